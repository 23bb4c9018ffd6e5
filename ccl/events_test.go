package ccl_test

import (
	"context"
	"fmt"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/trainscope/trainscope/ccl"
	"github.com/trainscope/trainscope/ccl/local"
	"github.com/trainscope/trainscope/runtime"
	"github.com/trainscope/trainscope/runtime/cpu"
)

// eventCounting is the cpu runtime, counting the events created through
// it, whose event records fail while failRecords is set.
type eventCounting struct {
	runtime.Impl
	created     atomic.Int64
	failRecords atomic.Bool
}

func (e *eventCounting) EventRecord(ev, s any) error {
	if e.failRecords.Load() {
		return runtime.Errorf("EventRecord", runtime.StatusError, "refused for the test")
	}
	return e.Impl.EventRecord(ev, s)
}

func (e *eventCounting) EventCreate(dev int, flags runtime.EventFlag) (any, error) {
	e.created.Add(1)
	return e.Impl.EventCreate(dev, flags)
}

// countingFactory is a factory on the local backend whose process groups
// create their events through the returned runtime.
func countingFactory(t *testing.T) (*ccl.ProcessGroupFactory, *eventCounting) {
	t.Helper()
	rt := &eventCounting{Impl: cpuRuntime(t)}
	f := ccl.NewProcessGroupFactory(local.New(local.WithTimeout(10*time.Second)), rt)
	t.Cleanup(func() {
		if err := f.Destroy(); err != nil {
			t.Errorf("factory Destroy: %v", err)
		}
	})
	return f, rt
}

// A pipeline's ranks issue a Send or Recv per microbatch from their compute
// streams; the group records the same events again rather than create two
// per operation (its completion point, and the communication stream's wait
// for the compute stream).
func TestOperationsReuseEvents(t *testing.T) {
	noLeaks(t)
	const n, ops = 2, 300
	f, rt := countingFactory(t)
	devs := cpuDevs(0, n)
	pg, err := f.GetOrCreate("reuse", devs)
	if err != nil {
		t.Fatal(err)
	}
	before := rt.created.Load()
	ctx := context.Background()
	first := make([]*ccl.Work, n)
	ranks(t, n, func(r int) error {
		s := stream(t, devs[r])
		buf := floats(t, devs[r], []float32{0, 0})
		f32, err := cpu.Float32s(buf)
		if err != nil {
			return err
		}
		for i := range ops {
			var w *ccl.Work
			if r == 0 {
				if err := cpu.Enqueue(s, func() { f32[0], f32[1] = float32(i), float32(2*i) }); err != nil {
					return err
				}
				w, err = pg.Send(ctx, s, buf, runtime.Float32, 1)
			} else {
				w, err = pg.Recv(ctx, s, buf, runtime.Float32, 0)
			}
			if err != nil {
				return err
			}
			if err := w.StreamWait(s); err != nil {
				return err
			}
			if r == 1 {
				// Read what arrived in the order of s, as the next
				// microbatch's kernels would.
				got := make(chan [2]float32, 1)
				if err := cpu.Enqueue(s, func() { got <- [2]float32{f32[0], f32[1]} }); err != nil {
					return err
				}
				if v := <-got; v != [2]float32{float32(i), float32(2 * i)} {
					t.Errorf("message %d: received %v", i, v)
				}
			}
			if err := w.Wait(5 * time.Second); err != nil {
				return err
			}
			if i == 0 {
				first[r] = w
			}
		}
		return nil
	})
	// Each operation used to create two; now each rank has a completion
	// ring and one event its communication stream waits on.
	if got, most := rt.created.Load()-before, int64(n*(ccl.CompletionSlots+1)); got > most {
		t.Errorf("%d operations created %d events, want at most %d", n*ops, got, most)
	}
	// The first operations' events went to later ones: they answer from
	// what they saw.
	s := stream(t, devs[0])
	for r, w := range first {
		if !w.Done() || w.Err() != nil {
			t.Errorf("rank %d: first operation: Done %v, Err %v", r, w.Done(), w.Err())
		}
		if err := w.StreamWait(s); err != nil {
			t.Errorf("rank %d: first operation: StreamWait: %v", r, err)
		}
		if ev := w.Event(); ev == nil || ev.Query() != nil {
			t.Errorf("rank %d: first operation: Event %v, want one that reports complete", r, ev)
		}
	}
}

// blockStream holds s until the returned function is called (at cleanup at
// the latest).
func blockStream(t *testing.T, s *runtime.Stream) (unblock func()) {
	t.Helper()
	gate := make(chan struct{})
	var once atomic.Bool
	unblock = func() {
		if once.CompareAndSwap(false, true) {
			close(gate)
		}
	}
	t.Cleanup(unblock)
	if err := cpu.Enqueue(s, func() { <-gate }); err != nil {
		t.Fatal(err)
	}
	return unblock
}

// soloGroup is a one-rank group on the local backend, counting its
// events, with a stream and a one-element buffer of its device.
func soloGroup(t *testing.T) (*ccl.ProcessGroup, *runtime.Stream, runtime.Buffer, *eventCounting) {
	t.Helper()
	noLeaks(t)
	f, rt := countingFactory(t)
	dev := cpuDevs(0, 1)
	pg, err := f.GetOrCreate("solo", dev)
	if err != nil {
		t.Fatal(err)
	}
	return pg, stream(t, dev[0]), floats(t, dev[0], []float32{1}), rt
}

// waitAll waits for every Work of ws.
func waitAll(t *testing.T, ws []*ccl.Work) {
	t.Helper()
	for i, w := range ws {
		if err := w.Wait(5 * time.Second); err != nil {
			t.Fatalf("operation %d: %v", i, err)
		}
	}
}

// issueAllReduces issues k all-reduces on a one-rank group from s.
func issueAllReduces(t *testing.T, pg *ccl.ProcessGroup, s *runtime.Stream, buf runtime.Buffer, k int) []*ccl.Work {
	t.Helper()
	out := make([]*ccl.Work, k)
	for i := range out {
		w, err := pg.AllReduce(context.Background(), s, buf, runtime.Float32, ccl.Sum)
		if err != nil {
			t.Fatal(err)
		}
		out[i] = w
	}
	return out
}

// An operation the device has not passed when its ring slot comes round
// again keeps its event: the later operation gets a new one.
func TestUnfinishedWorkKeepsItsEvent(t *testing.T) {
	pg, s, buf, rt := soloGroup(t)
	dev := pg.Devices()
	unblock := blockStream(t, pg.Stream(dev[0]))
	before := rt.created.Load()
	ws := issueAllReduces(t, pg, s, buf, ccl.CompletionSlots+1)
	if got, want := rt.created.Load()-before, int64(ccl.CompletionSlots+2); got != want {
		t.Errorf("%d operations behind a blocked stream created %d events, want %d (one each and one for the wait on s)", len(ws), got, want)
	}
	if ws[0].Done() {
		t.Fatal("the first operation is done while its stream is blocked")
	}
	if ev := ws[0].Event(); ev == nil || runtime.StatusOf(ev.Query()) != runtime.StatusNotReady {
		t.Fatalf("the first operation's event: %v, want one not yet reached", ev)
	}
	unblock()
	waitAll(t, ws)
}

// An event handed out by Work.Event stays the caller's: a later operation
// does not record it again.
func TestHandedOutEventNotReused(t *testing.T) {
	pg, s, buf, _ := soloGroup(t)
	dev := pg.Devices()
	w := issueAllReduces(t, pg, s, buf, 1)[0]
	if err := w.Wait(5 * time.Second); err != nil {
		t.Fatal(err)
	}
	ev := w.Event()
	unblock := blockStream(t, pg.Stream(dev[0]))
	later := issueAllReduces(t, pg, s, buf, ccl.CompletionSlots)
	if err := ev.Query(); err != nil {
		t.Errorf("the handed-out event after %d later operations behind a blocked stream: %v, want complete", len(later), err)
	}
	if !w.Done() {
		t.Error("the first operation no longer reports done")
	}
	unblock()
	waitAll(t, later)
}

// Works asked from another goroutine while their rank issues more
// operations (and comes round to reuse their events) answer consistently:
// once done, done for good, and without error.
func TestWorksAskedWhileEventsAreReused(t *testing.T) {
	pg, s, buf, _ := soloGroup(t)
	const ops = 4 * ccl.CompletionSlots
	works := make(chan *ccl.Work, ops)
	asked := make(chan error, 1)
	go func() {
		var seen []*ccl.Work
		done := map[*ccl.Work]bool{}
		check := func() error {
			for _, w := range seen {
				if w.Done() {
					if err := w.Err(); err != nil {
						return err
					}
					done[w] = true
				} else if done[w] {
					return fmt.Errorf("operation %p reported done, then not done", w)
				}
				if err := w.StreamWait(s); err != nil {
					return err
				}
			}
			return nil
		}
		for w := range works {
			seen = append(seen, w)
			if err := check(); err != nil {
				asked <- err
				return
			}
		}
		asked <- check()
	}()
	for range ops {
		w, err := pg.AllReduce(context.Background(), s, buf, runtime.Float32, ccl.Sum)
		if err != nil {
			t.Fatal(err)
		}
		works <- w
	}
	close(works)
	if err := <-asked; err != nil {
		t.Fatal(err)
	}
	if err := s.Synchronize(context.Background()); err != nil {
		t.Fatal(err)
	}
}

// heldBack fails the test if w completes within 200ms: its stream must
// still be waiting. (A slow machine can only make this pass where it
// should not, never fail where it should pass.)
func heldBack(t *testing.T, w *ccl.Work, what string) {
	t.Helper()
	if err := w.Wait(200 * time.Millisecond); err == nil {
		t.Errorf("%s completed before the work it follows", what)
	}
}

// An operation issued inside a group follows what its stream holds at the
// outermost GroupEnd, when the group's kernels are enqueued, as NCCL's do:
// here work enqueued on the stream after the call and before GroupEnd.
func TestGroupedOperationFollowsItsStreamAtGroupEnd(t *testing.T) {
	pg, s, buf, _ := soloGroup(t)
	if err := pg.GroupStart(); err != nil {
		t.Fatal(err)
	}
	w := issueAllReduces(t, pg, s, buf, 1)[0]
	unblock := blockStream(t, s)
	if err := pg.GroupEnd(); err != nil {
		t.Fatal(err)
	}
	heldBack(t, w, "the grouped all-reduce")
	unblock()
	waitAll(t, []*ccl.Work{w})
}

// Where an event recorded last on the caller's stream by someone else (a
// profiler ending a range) still marks the stream's point, the group's
// communication stream waits for that one: the operations record nothing
// on the caller's stream, one at a time or in a group, and still follow it.
func TestOperationsFollowTheLatestEvent(t *testing.T) {
	for _, grouped := range []bool{false, true} {
		t.Run(fmt.Sprintf("grouped=%v", grouped), func(t *testing.T) {
			pg, s, buf, _ := soloGroup(t)
			theirs, err := runtime.NewEventWith(cpuRuntime(t), s.Device(), 0)
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { _ = theirs.Destroy() })
			unblock := blockStream(t, s)
			if err := theirs.Record(s); err != nil {
				t.Fatal(err)
			}
			ops := s.Ops()
			var ws []*ccl.Work
			if grouped {
				if err := pg.GroupStart(); err != nil {
					t.Fatal(err)
				}
				// A group's operations run together: one buffer each.
				for range 3 {
					b := floats(t, s.Device(), []float32{1})
					ws = append(ws, issueAllReduces(t, pg, s, b, 1)...)
				}
				if err := pg.GroupEnd(); err != nil {
					t.Fatal(err)
				}
			} else {
				ws = issueAllReduces(t, pg, s, buf, 3)
			}
			if got := s.Ops(); got != ops {
				t.Errorf("three all-reduces enqueued %d operations on the caller's stream, want none", got-ops)
			}
			heldBack(t, ws[2], "the last all-reduce")
			unblock()
			waitAll(t, ws)
		})
	}
}

// A group whose communication stream cannot be made to follow the caller's
// stream at GroupEnd fails its operations with an error that says so, and
// closes the backend's group: the next group runs.
func TestGroupEndFollowFailure(t *testing.T) {
	pg, s, buf, rt := soloGroup(t)
	if err := pg.GroupStart(); err != nil {
		t.Fatal(err)
	}
	ws := issueAllReduces(t, pg, s, buf, 1)
	if err := cpu.Enqueue(s, func() {}); err != nil { // work after any event: the group records its own
		t.Fatal(err)
	}
	rt.failRecords.Store(true)
	err := pg.GroupEnd()
	rt.failRecords.Store(false)
	if err == nil || !strings.Contains(err.Error(), "order after the caller's stream") {
		t.Fatalf("GroupEnd with the follow's record failing: %v, want an error about ordering after the caller's stream", err)
	}
	for i, w := range ws {
		if werr := w.Wait(5 * time.Second); werr == nil || !strings.Contains(werr.Error(), "refused for the test") {
			t.Errorf("operation %d: Wait: %v, want the launch's failure", i, werr)
		}
	}
	if err := pg.GroupStart(); err != nil {
		t.Fatal(err)
	}
	later := issueAllReduces(t, pg, s, buf, 1)
	if err := pg.GroupEnd(); err != nil {
		t.Fatalf("the next group: %v", err)
	}
	waitAll(t, later)
}
