package profiler_test

import (
	"context"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/trainscope/trainscope/profiler"
	"github.com/trainscope/trainscope/runtime"
)

func newProfiler(t testing.TB, opts ...profiler.Option) *profiler.Profiler {
	t.Helper()
	p, err := profiler.New(opts...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = p.Close(context.Background()) })
	return p
}

// hostDevice is a device type no backend is registered for in this test
// binary's host-only tests, so recorders on it are host-only.
var hostDevice = runtime.Device{Type: runtime.DeviceType(99)}

func TestNestingKeepsTree(t *testing.T) {
	p := newProfiler(t, profiler.WithCollectInterval(0))
	r, err := p.NewRecorder(3, hostDevice)
	if err != nil {
		t.Fatal(err)
	}
	r.SetStep(7)
	r.Start("step")
	r.SetMicrobatch(1)
	r.SetPhase(profiler.Forward)
	r.Start("microbatch")
	r.SetChunk(0)
	r.SetStage(1)
	r.Start("chunk")
	r.End()
	r.End()
	r.Start("optimizer")
	r.End()
	r.End()

	recs := p.Snapshot()
	if len(recs) != 4 {
		t.Fatalf("got %d records, want 4", len(recs))
	}
	byName := map[string]profiler.Record{}
	for _, rec := range recs {
		byName[rec.Name] = rec
	}
	step, mb, chunk, opt := byName["step"], byName["microbatch"], byName["chunk"], byName["optimizer"]
	if step.Parent != 0 || mb.Parent != step.ID || chunk.Parent != mb.ID || opt.Parent != step.ID {
		t.Errorf("parents: step %d, mb %d→%d, chunk %d→%d, opt %d→%d", step.ID, mb.ID, mb.Parent, chunk.ID, chunk.Parent, opt.ID, opt.Parent)
	}
	if step.Depth != 0 || mb.Depth != 1 || chunk.Depth != 2 || opt.Depth != 1 {
		t.Errorf("depths %d %d %d %d", step.Depth, mb.Depth, chunk.Depth, opt.Depth)
	}
	for _, rec := range recs {
		if rec.Rank != 3 || rec.Step != 7 {
			t.Errorf("%s: rank %d step %d", rec.Name, rec.Rank, rec.Step)
		}
		if rec.HostEnd < rec.HostStart {
			t.Errorf("%s ends before it starts", rec.Name)
		}
	}
	if chunk.HostStart < mb.HostStart || chunk.HostEnd > mb.HostEnd || mb.HostEnd > step.HostEnd {
		t.Errorf("children not inside parents")
	}
	if chunk.Stage != 1 || chunk.Chunk != 0 || chunk.Microbatch != 1 || chunk.Phase != profiler.Forward {
		t.Errorf("chunk labels %+v", chunk.Labels)
	}
	if step.Stage != profiler.None || step.Microbatch != profiler.None || step.Phase != profiler.PhaseNone {
		t.Errorf("step labels %+v, want none set", step.Labels)
	}
}

func TestMisuseIsCountedNotFatal(t *testing.T) {
	p := newProfiler(t, profiler.WithCollectInterval(0))
	r, _ := p.NewRecorder(0, hostDevice)
	r.End() // nothing open
	for range 70 {
		r.Start("deep")
	}
	for range 70 {
		r.End()
	}
	r.Start("after")
	r.End()
	st := p.Stats()
	if st.Unbalanced != 1 {
		t.Errorf("Unbalanced = %d, want 1", st.Unbalanced)
	}
	if st.Dropped != 6 {
		t.Errorf("Dropped = %d, want 6 (70 nested starts, 64 kept)", st.Dropped)
	}
	recs := p.Snapshot()
	if len(recs) != 65 {
		t.Fatalf("kept %d records, want 64 nested + 1", len(recs))
	}
	if recs[len(recs)-1].Name != "after" || recs[len(recs)-1].Depth != 0 {
		t.Errorf("last record %q at depth %d: nesting not restored after overflow", recs[len(recs)-1].Name, recs[len(recs)-1].Depth)
	}

	var nilRec *profiler.Recorder
	nilRec.Start("x")
	nilRec.SetStage(1)
	nilRec.End()
}

func TestBoundsDropAndCount(t *testing.T) {
	p := newProfiler(t, profiler.WithCollectInterval(0), profiler.WithBufferSize(4), profiler.WithMaxRecords(6))
	r, _ := p.NewRecorder(0, hostDevice)
	for range 10 {
		r.Start("a")
		r.End()
	}
	if got := len(p.Snapshot()); got != 4 {
		t.Fatalf("after a full buffer: %d records, want 4", got)
	}
	if st := p.Stats(); st.Dropped != 6 {
		t.Fatalf("Dropped = %d, want 6", st.Dropped)
	}
	for range 4 {
		r.Start("b")
		r.End()
	}
	if got := len(p.Snapshot()); got != 6 {
		t.Fatalf("record bound: %d records, want 6", got)
	}
	if st := p.Stats(); st.Dropped != 6 || st.Overflow != 2 {
		t.Fatalf("Dropped = %d, Overflow = %d; want 6 and 2", st.Dropped, st.Overflow)
	}
}

func TestResetKeepsOpenRanges(t *testing.T) {
	p := newProfiler(t, profiler.WithCollectInterval(0))
	r, _ := p.NewRecorder(0, hostDevice)
	r.Start("outer")
	r.Start("inner")
	r.End()
	p.Reset()
	if n := len(p.Snapshot()); n != 0 {
		t.Fatalf("after Reset: %d records", n)
	}
	r.End()
	recs := p.Snapshot()
	if len(recs) != 1 || recs[0].Name != "outer" {
		t.Fatalf("after Reset the open range should still be recorded, got %+v", recs)
	}
}

func TestTagAndStepFromOtherGoroutines(t *testing.T) {
	p := newProfiler(t, profiler.WithCollectInterval(0))
	r, _ := p.NewRecorder(0, hostDevice)
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		p.SetTag("warmup")
		r.SetStep(2)
	}()
	wg.Wait()
	r.Start("x")
	r.End()
	recs := p.Snapshot()
	if recs[0].Tag != "warmup" || recs[0].Step != 2 {
		t.Fatalf("tag %q step %d", recs[0].Tag, recs[0].Step)
	}
	if got := profiler.TagOf(&recs[0]); got != "warmup" {
		t.Errorf("TagOf = %q", got)
	}
	recs[0].Tag = ""
	if got := profiler.TagOf(&recs[0]); got != "step 2" {
		t.Errorf("TagOf without tag = %q", got)
	}
}

func TestContextCarriesRecorder(t *testing.T) {
	p := newProfiler(t, profiler.WithCollectInterval(0))
	r, _ := p.NewRecorder(1, hostDevice)
	ctx := profiler.NewContext(context.Background(), r)
	if profiler.FromContext(ctx) != r {
		t.Fatal("FromContext lost the recorder")
	}
	if profiler.FromContext(context.Background()) != nil {
		t.Fatal("FromContext invented a recorder")
	}
}

func TestOptionsValidated(t *testing.T) {
	for _, o := range []profiler.Option{
		profiler.WithBufferSize(0), profiler.WithMaxRecords(-1), profiler.WithEventPool(1), profiler.WithCollectInterval(-time.Second),
	} {
		if _, err := profiler.New(o); err == nil {
			t.Errorf("option accepted, want error")
		}
	}
	if _, err := profiler.New(profiler.WithCollectInterval(0)); err != nil {
		t.Fatal(err)
	}
	p := newProfiler(t)
	if _, err := p.NewRecorder(-1, hostDevice); err == nil {
		t.Error("negative rank accepted")
	}
	if err := p.Close(context.Background()); err != nil {
		t.Fatal(err)
	}
	if err := p.Close(context.Background()); err == nil {
		t.Error("second Close returned nil")
	}
}

func TestBackgroundCollectorGathers(t *testing.T) {
	p := newProfiler(t, profiler.WithCollectInterval(time.Millisecond), profiler.WithBufferSize(2))
	r, _ := p.NewRecorder(0, hostDevice)
	// Pace the ranges so the collector drains the two-slot buffer in time.
	for range 20 {
		r.Start("a")
		r.End()
		deadline := time.Now().Add(2 * time.Second)
		for p.Stats().Records == 0 && time.Now().Before(deadline) {
			time.Sleep(100 * time.Microsecond)
		}
	}
	if st := p.Stats(); st.Records == 0 {
		t.Fatalf("collector gathered nothing: %+v", st)
	}
}

type countingSink struct {
	names map[string]int
	total int
}

func (s *countingSink) Consume(batch []profiler.Record) {
	for i := range batch {
		s.names[batch[i].Name]++
		s.total++
	}
}

func TestSinksSeeEveryRecordOnce(t *testing.T) {
	p := newProfiler(t, profiler.WithCollectInterval(0), profiler.WithMaxRecords(3))
	sink := &countingSink{names: map[string]int{}}
	p.AddSink(sink)
	r, _ := p.NewRecorder(0, hostDevice)
	for i := range 5 {
		r.Start("a")
		r.End()
		if i == 2 {
			_ = p.Snapshot()
		}
	}
	r.Start("b")
	r.End()
	_ = p.Snapshot()
	_ = p.Snapshot()
	if sink.total != 6 || sink.names["a"] != 5 || sink.names["b"] != 1 {
		t.Fatalf("sink saw %d records %v; want 5×a and 1×b, each once", sink.total, sink.names)
	}
	if st := p.Stats(); st.Records != 3 || st.Overflow != 3 {
		t.Errorf("store %+v: the bound applies to the store, not to sinks", st)
	}
}

// Nil arguments and a nil *Profiler are errors or no-ops, never panics.
func TestNilArgumentsDoNotPanic(t *testing.T) {
	p, err := profiler.New(nil, profiler.WithCollectInterval(0), nil)
	if err != nil {
		t.Fatalf("New with nil options: %v", err)
	}
	defer p.Close(context.Background())
	r, _ := p.NewRecorder(0, hostDevice)
	calls := []profiler.GroupedCollective{{Name: "send"}}
	for _, tc := range []struct {
		name string
		r    *profiler.Recorder
		c    []profiler.GroupedCollective
	}{{"nil recorder, no calls", nil, nil}, {"recorder, calls", r, calls}, {"recorder, no calls", r, nil}} {
		if err := tc.r.Grouped(tc.c, nil); err == nil || !strings.Contains(err.Error(), "nil launch") {
			t.Errorf("%s: Grouped(…, nil) = %v, want an error naming the nil launch", tc.name, err)
		}
	}
	if n := len(p.Snapshot()); n != 0 {
		t.Errorf("Grouped with a nil launch recorded %d ranges", n)
	}
	if err := p.Report(nil, profiler.SortHostTotal); err == nil || !strings.Contains(err.Error(), "nil writer") {
		t.Errorf("Report(nil) = %v, want an error naming the nil writer", err)
	}
	if err := profiler.WriteRecords(nil, nil); err == nil {
		t.Error("WriteRecords(nil) succeeded")
	}

	var np *profiler.Profiler
	nr, err := np.NewRecorder(0, hostDevice)
	if nr != nil || err != nil {
		t.Errorf("nil Profiler: NewRecorder = %v, %v; want a nil recorder (profiling off), no error", nr, err)
	}
	nr.Start("x")
	nr.End()
	if err := np.Flush(context.Background()); err != nil {
		t.Errorf("nil Profiler: Flush = %v", err)
	}
	if recs := np.Snapshot(); recs != nil {
		t.Errorf("nil Profiler: Snapshot = %v", recs)
	}
	if st := np.Stats(); st != (profiler.Stats{}) {
		t.Errorf("nil Profiler: Stats = %+v", st)
	}
	np.Reset()
	np.SetTag("warmup")
	if tag := np.Tag(); tag != "" {
		t.Errorf("nil Profiler: Tag = %q", tag)
	}
	if !np.Epoch().IsZero() || np.PeakMemory(0) != 0 {
		t.Errorf("nil Profiler: Epoch %v, PeakMemory %d; want zero", np.Epoch(), np.PeakMemory(0))
	}
	if err := np.Calibrate(context.Background(), nil, hostDevice); err != nil {
		t.Errorf("nil Profiler: Calibrate = %v", err)
	}
	if err := np.AddSink(&countingSink{names: map[string]int{}}); err != nil {
		t.Errorf("nil Profiler: AddSink = %v", err)
	}
	if err := np.Ingest(context.Background(), []profiler.Record{{Name: "x"}}); err != nil {
		t.Errorf("nil Profiler: Ingest = %v", err)
	}
	var buf strings.Builder
	if err := np.Report(&buf, profiler.SortHostTotal); err != nil || buf.Len() != 0 {
		t.Errorf("nil Profiler: Report = %v, wrote %q", err, buf.String())
	}
	if err := np.Close(context.Background()); err != nil {
		t.Errorf("nil Profiler: Close = %v", err)
	}
}

// nameSink counts the records of each name it is given and keeps the
// last one's tag.
type nameSink struct {
	mu   sync.Mutex
	n    map[string]int
	tags map[string]string
}

func newNameSink() *nameSink { return &nameSink{n: map[string]int{}, tags: map[string]string{}} }

func (s *nameSink) Consume(batch []profiler.Record) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, r := range batch {
		s.n[r.Name]++
		s.tags[r.Name] = r.Tag
	}
}

// A tag set while a collection runs reaches the ranges recorded under it:
// the collector read the tag table before the recorders' queues, and a
// range tagged with a newer entry came out untagged.
func TestTagSetDuringCollection(t *testing.T) {
	p := newProfiler(t, profiler.WithCollectInterval(0), profiler.WithMaxRecords(0)) // the sink takes every record
	sink := newNameSink()
	if err := p.AddSink(sink); err != nil {
		t.Fatal(err)
	}
	r, _ := p.NewRecorder(0, hostDevice)
	stop := make(chan struct{})
	var wg sync.WaitGroup
	wg.Add(1)
	go func() { // collections, as fast as they come
		defer wg.Done()
		for {
			select {
			case <-stop:
				return
			default:
				p.Snapshot()
			}
		}
	}()
	const n = 5000
	for i := range n {
		name := strconv.Itoa(i)
		p.SetTag("tag " + name)
		r.Start(name)
		r.End()
		if i%256 == 255 {
			p.Snapshot() // keep the buffer from filling
		}
	}
	close(stop)
	wg.Wait()
	if err := p.Flush(context.Background()); err != nil {
		t.Fatal(err)
	}
	sink.mu.Lock()
	defer sink.mu.Unlock()
	dropped := p.Stats().Dropped
	wrong := 0
	for i := range n {
		name := strconv.Itoa(i)
		if tag, ok := sink.tags[name]; ok && tag != "tag "+name {
			if wrong++; wrong <= 3 {
				t.Errorf("range %s: tag %q, want %q", name, tag, "tag "+name)
			}
		}
	}
	if wrong > 0 || uint64(len(sink.tags))+dropped != n {
		t.Errorf("%d of %d ranges mistagged; %d delivered, %d dropped", wrong, n, len(sink.tags), dropped)
	}
}
