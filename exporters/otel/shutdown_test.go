package otel_test

import (
	"bytes"
	"context"
	"errors"
	"io"
	"net"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	coltracepb "go.opentelemetry.io/proto/otlp/collector/trace/v1"
	"google.golang.org/grpc"

	sdktrace "go.opentelemetry.io/otel/sdk/trace"

	otelexp "github.com/trainscope/trainscope/exporters/otel"
	"github.com/trainscope/trainscope/profiler"
	"github.com/trainscope/trainscope/runtime"
)

// bound only limits how long a failing test waits for something that
// should happen at once; no passing run comes near it.
const bound = time.Minute

// slowCollector is a fake OTLP receiver whose first request waits,
// unanswered, until the test releases it (or the request's caller gives
// up); later requests are answered at once.
type slowCollector struct {
	*collector
	entered chan struct{} // closed when the first request has arrived
	release chan struct{} // closing it lets the first request be answered
	first   atomic.Bool
	gaveUp  atomic.Bool // the first request's caller cancelled it
	once    sync.Once
}

func newSlowCollector() *slowCollector {
	return &slowCollector{collector: newCollector(), entered: make(chan struct{}), release: make(chan struct{})}
}

func (s *slowCollector) open() { s.once.Do(func() { close(s.release) }) }

func (s *slowCollector) hold(ctx context.Context) {
	if !s.first.CompareAndSwap(false, true) {
		return
	}
	close(s.entered)
	select {
	case <-s.release:
	case <-ctx.Done():
		s.gaveUp.Store(true)
	}
}

func (s *slowCollector) Export(ctx context.Context, req *coltracepb.ExportTraceServiceRequest) (*coltracepb.ExportTraceServiceResponse, error) {
	s.hold(ctx)
	return s.collector.Export(ctx, req)
}

func (s *slowCollector) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	// Read the body first: the server notices a client that gives up
	// only once the body is read.
	body, err := io.ReadAll(r.Body)
	if err != nil {
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}
	if len(body) > 0 { // New's empty probe goes through
		s.hold(r.Context())
	}
	r.Body = io.NopCloser(bytes.NewReader(body))
	s.collector.ServeHTTP(w, r)
}

// serveSlow serves s over protocol on a loopback port until the test ends.
func serveSlow(t *testing.T, protocol string, s *slowCollector) string {
	t.Helper()
	l := listen(t)
	if protocol == otelexp.ProtocolHTTP {
		srv := &http.Server{Handler: s, ReadHeaderTimeout: 5 * time.Second}
		go func() { _ = srv.Serve(l) }()
		t.Cleanup(func() { _ = srv.Close() })
	} else {
		srv := grpc.NewServer()
		coltracepb.RegisterTraceServiceServer(srv, s)
		go func() { _ = srv.Serve(l) }()
		t.Cleanup(srv.Stop)
	}
	t.Cleanup(s.open) // runs first: nothing stays held
	return l.Addr().String()
}

// expired is a context that has already ended.
func expired() context.Context {
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	return ctx
}

// probe is a record of one span.
var probe = []profiler.Record{{ID: 1 << 30, Name: "probe", Labels: profiler.NoLabels, HostStart: 1, HostEnd: 2}}

// awaitShutdownBegun waits until a Shutdown called on another goroutine
// has begun, which shows as records being dropped (records consumed
// after Shutdown are): it consumes one-span probes until one is dropped,
// and returns how many it consumed. The queue must have room for them.
func awaitShutdownBegun(t *testing.T, exp *otelexp.Exporter) (probes int) {
	t.Helper()
	dropped := exp.Stats().Dropped
	tick := time.NewTicker(time.Millisecond)
	defer tick.Stop()
	giveUp := time.After(bound)
	for exp.Stats().Dropped == dropped {
		exp.Consume(probe)
		probes++
		select {
		case <-tick.C:
		case <-giveUp:
			t.Fatal("the first Shutdown never began")
		}
	}
	return probes
}

// A second Shutdown whose context has already ended, called while the
// first is still exporting within its own deadline to an endpoint that is
// slow to answer, returns at once with its context's error and leaves the
// first alone: the first's request is answered, every span it carried is
// exported, and the first returns nil. Before, the second cancelled the
// first's requests and every span in them failed. The expected counts
// come from the records the test made and from what the endpoint received.
func TestSecondShutdownLeavesTheFirstAlone(t *testing.T) {
	for _, protocol := range []string{otelexp.ProtocolGRPC, otelexp.ProtocolHTTP} {
		t.Run(strings.ReplaceAll(protocol, "/", "-"), func(t *testing.T) {
			clearOTLPEnv(t)
			c := newSlowCollector()
			addr := serveSlow(t, protocol, c)
			exp, err := otelexp.New(context.Background(), nil, otelexp.Config{
				Epoch: epoch, Protocol: protocol, Endpoint: "http://" + addr,
				// Only the test decides when the first request is answered.
				ExportTimeout: time.Hour, RetryTime: -1,
			})
			if err != nil {
				t.Fatal(err)
			}
			recs, spans := records(30)
			exp.Consume(recs)
			select {
			case <-c.entered: // the first request is at the endpoint, unanswered
			case <-time.After(bound):
				t.Fatal("no request reached the endpoint")
			}

			firstCtx, cancel := context.WithTimeout(context.Background(), time.Hour)
			defer cancel()
			first := make(chan error, 1)
			go func() { first <- exp.Shutdown(firstCtx) }()
			probes := awaitShutdownBegun(t, exp)

			second := make(chan error, 1)
			go func() { second <- exp.Shutdown(expired()) }()
			select {
			case err := <-second:
				if !errors.Is(err, context.Canceled) || errors.Is(err, otelexp.ErrShutdownDeadline) {
					t.Errorf("second Shutdown, context ended: %v; want its context's error, and no spans lost", err)
				}
			case <-time.After(bound):
				t.Fatal("a Shutdown whose context had ended waited for the first")
			}
			if st := exp.Stats(); st.Failed != 0 || st.Pending == 0 {
				t.Errorf("after the second Shutdown, with the first request still at the endpoint: stats %+v; want none failed, some pending", st)
			}
			select {
			case err := <-first:
				t.Errorf("the first Shutdown returned (%v) while its request was still at the endpoint", err)
				first <- err
			default:
			}

			c.open() // the endpoint answers
			select {
			case err := <-first:
				if err != nil {
					t.Errorf("first Shutdown: %v; want nil, every span exported", err)
				}
			case <-time.After(bound):
				t.Fatal("the first Shutdown did not return once the endpoint answered")
			}
			if c.gaveUp.Load() {
				t.Error("the first request was cancelled")
			}
			want := uint64(spans + probes)
			got := uint64(c.spans.Load())
			st := exp.Stats()
			if st.Spans != want || st.Failed != 0 || st.Pending != 0 || st.Exported != got || got+st.Dropped != want || got < uint64(spans) || st.Dropped == 0 {
				t.Errorf("stats %+v, the endpoint received %d spans; want all %d spans: the first %d and every probe not dropped received, none failed",
					st, got, want, spans)
			}

			// Later calls return the first's result, whatever their
			// context; records consumed now are dropped and counted.
			if err := exp.Shutdown(expired()); err != nil {
				t.Errorf("third Shutdown: %v; want the first's result (nil)", err)
			}
			exp.Consume(probe)
			if st2 := exp.Stats(); st2.Dropped != st.Dropped+1 || st2.Spans != want+1 {
				t.Errorf("a record after Shutdown: stats %+v; want it dropped and counted (before: %+v)", st2, st)
			}
		})
	}
}

// stuckClose is a span exporter whose Shutdown waits until released.
type stuckClose struct {
	stub
	entered, release chan struct{}
	once             sync.Once
}

func (s *stuckClose) Shutdown(ctx context.Context) error {
	s.once.Do(func() { close(s.entered) })
	<-s.release
	return s.stub.Shutdown(ctx)
}

var _ sdktrace.SpanExporter = (*stuckClose)(nil)

// A later Shutdown waits for the first at most until its own context
// ends, even while the first is closing the span exporter; it then
// returns its context's error, and once the first has finished, the
// first's result.
func TestLaterShutdownKeepsToItsContext(t *testing.T) {
	s := &stuckClose{entered: make(chan struct{}), release: make(chan struct{})}
	var releaseOnce sync.Once
	release := func() { releaseOnce.Do(func() { close(s.release) }) }
	defer release()
	exp, err := otelexp.New(context.Background(), nil, otelexp.Config{Epoch: epoch}, otelexp.WithSpanExporter(s))
	if err != nil {
		t.Fatal(err)
	}
	recs, spans := records(10)
	exp.Consume(recs)
	first := make(chan error, 1)
	go func() { first <- exp.Shutdown(context.Background()) }()
	select {
	case <-s.entered: // the first Shutdown is closing the span exporter
	case <-time.After(bound):
		t.Fatal("the first Shutdown never closed the span exporter")
	}

	for range 3 {
		second := make(chan error, 1)
		go func() { second <- exp.Shutdown(expired()) }()
		select {
		case err := <-second:
			if !errors.Is(err, context.Canceled) || errors.Is(err, otelexp.ErrShutdownDeadline) {
				t.Errorf("Shutdown with an ended context during the first: %v; want its context's error", err)
			}
		case <-time.After(bound):
			t.Fatal("a Shutdown whose context had ended waited for the first")
		}
	}

	release()
	select {
	case err := <-first:
		if err != nil {
			t.Errorf("first Shutdown: %v", err)
		}
	case <-time.After(bound):
		t.Fatal("the first Shutdown did not return")
	}
	if err := exp.Shutdown(expired()); err != nil {
		t.Errorf("Shutdown after the first: %v; want the first's result (nil)", err)
	}
	got, _, shutdowns := s.got()
	if st := exp.Stats(); st.Exported != uint64(spans) || len(got) != spans || st.Failed != 0 || shutdowns != 1 {
		t.Errorf("stats %+v, %d spans exported, span exporter shut down %d times; want all %d exported, one shutdown", st, len(got), shutdowns, spans)
	}
}

// recordCounter is a sink that counts the records it is handed.
type recordCounter struct{ n atomic.Uint64 }

func (c *recordCounter) Consume(batch []profiler.Record) { c.n.Add(uint64(len(batch))) }

// Two goroutines shut the exporter down at once while ranks record and
// the profiler's collector hands it their records, and then the
// profiler's Close shuts it down a third time: no call fails, the span
// exporter is shut down once, and every span is counted once, as exported
// or dropped. Every other round a third goroutine's Shutdown, its context
// already ended, joins the race: whichever call comes first decides, so
// spans may fail then, but each is still counted once. Run under -race.
func TestConcurrentShutdownsWhileRecording(t *testing.T) {
	const ranks, ranges = 4, 2000
	for round := range 10 {
		withEnded := round%2 == 1
		p, err := profiler.New(profiler.WithCollectInterval(time.Millisecond))
		if err != nil {
			t.Fatal(err)
		}
		// Handed the same batches as the exporter, added before it.
		count := &recordCounter{}
		if err := p.AddSink(count); err != nil {
			t.Fatal(err)
		}
		s := &stub{}
		exp, err := otelexp.New(context.Background(), p, otelexp.Config{Epoch: p.Epoch(), QueueSize: 256, BatchSize: 16}, otelexp.WithSpanExporter(s))
		if err != nil {
			t.Fatal(err)
		}
		recorders := make([]*profiler.Recorder, ranks)
		for i := range recorders {
			if recorders[i], err = p.NewRecorder(i, runtime.Device{Type: runtime.CPU, Index: i}); err != nil {
				t.Fatal(err)
			}
		}

		var recording sync.WaitGroup
		started := make(chan struct{}, ranks)
		for _, r := range recorders {
			recording.Go(func() {
				for i := range ranges {
					if i == ranges/4 {
						started <- struct{}{}
					}
					r.Start("op")
					r.End()
				}
			})
		}
		for range ranks {
			<-started // every rank is recording
		}
		gate := make(chan struct{})
		errs := make(chan error, 3)
		calls := 2
		for range calls {
			go func() {
				<-gate
				errs <- exp.Shutdown(context.Background())
			}()
		}
		if withEnded {
			calls++
			go func() {
				<-gate
				errs <- exp.Shutdown(expired())
			}()
		}
		close(gate)
		// Without the ended context no call may fail; with it, a call
		// fails with that context's error (it came first and cut the
		// export short, or it gave up waiting for the first), and so may
		// the others, with the first's result.
		acceptable := func(err error) bool {
			return err == nil || withEnded && errors.Is(err, context.Canceled)
		}
		for range calls {
			select {
			case err := <-errs:
				if !acceptable(err) {
					t.Errorf("concurrent Shutdown: %v", err)
				}
			case <-time.After(bound):
				t.Fatal("a concurrent Shutdown did not return")
			}
		}
		recording.Wait()
		ctx, cancel := context.WithTimeout(context.Background(), bound)
		if err := p.Close(ctx); !acceptable(err) {
			t.Errorf("profiler Close after the exporter's Shutdowns: %v", err)
		}
		cancel()

		st := exp.Stats()
		got, _, shutdowns := s.got()
		// A host range is one span.
		if n := count.n.Load(); st.Records != n || st.Spans != n || n == 0 {
			t.Fatalf("stats %+v; the profiler handed the exporter %d records of one span each", st, n)
		}
		if st.Exported+st.Dropped+st.Failed != st.Spans || (!withEnded && st.Failed != 0) || st.Pending != 0 || st.Exported != uint64(len(got)) || shutdowns != 1 {
			t.Fatalf("stats %+v, %d spans exported, span exporter shut down %d times; want every span counted once (none failed unless a Shutdown's context had ended), one shutdown",
				st, len(got), shutdowns)
		}
	}
}

// hangingAddr is a loopback address that accepts connections and never
// answers on them, until the test ends.
func hangingAddr(t *testing.T) string {
	t.Helper()
	l := listen(t)
	var mu sync.Mutex
	var held []net.Conn
	done := make(chan struct{})
	go func() {
		defer close(done)
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			mu.Lock()
			held = append(held, c)
			mu.Unlock()
		}
	}()
	t.Cleanup(func() {
		_ = l.Close()
		<-done
		mu.Lock()
		defer mu.Unlock()
		for _, c := range held {
			_ = c.Close()
		}
	})
	return l.Addr().String()
}

// ForceFlush's and Shutdown's errors name the endpoint: a run that sends
// to several, or a log line far from the configuration, says which one
// did not take its spans.
func TestFlushAndShutdownErrorsNameTheEndpoint(t *testing.T) {
	for _, protocol := range []string{otelexp.ProtocolGRPC, otelexp.ProtocolHTTP} {
		t.Run(strings.ReplaceAll(protocol, "/", "-"), func(t *testing.T) {
			clearOTLPEnv(t)
			addr := hangingAddr(t)
			exp, err := otelexp.New(context.Background(), nil, otelexp.Config{
				Epoch: epoch, Protocol: protocol, Endpoint: "http://" + addr, ExportTimeout: time.Hour, RetryTime: -1,
			})
			if err != nil {
				t.Fatal(err)
			}
			recs, _ := records(10)
			exp.Consume(recs)
			if err := exp.ForceFlush(expired()); !errors.Is(err, context.Canceled) || !strings.Contains(err.Error(), addr) {
				t.Errorf("ForceFlush, context ended, endpoint not answering: %v; want the context's error, naming %s", err, addr)
			}
			err = exp.Shutdown(expired())
			if !errors.Is(err, otelexp.ErrShutdownDeadline) || !strings.Contains(err.Error(), addr) {
				t.Errorf("Shutdown, context ended, endpoint not answering: %v; want ErrShutdownDeadline, naming %s", err, addr)
			}
			if again := exp.Shutdown(context.Background()); again == nil || again.Error() != err.Error() {
				t.Errorf("Shutdown again: %v; want the first's result (%v)", again, err)
			}
		})
	}
}

// deaf is a span exporter that ignores its contexts: ExportSpans and
// Shutdown return only once released.
type deaf struct {
	stub
	entered, release chan struct{}
	returned         chan struct{} // one value per ExportSpans that returned
	once             sync.Once
}

func (d *deaf) ExportSpans(ctx context.Context, spans []sdktrace.ReadOnlySpan) error {
	d.once.Do(func() { close(d.entered) })
	<-d.release
	defer func() { d.returned <- struct{}{} }()
	return d.stub.ExportSpans(ctx, spans)
}

func (d *deaf) Shutdown(ctx context.Context) error {
	<-d.release
	return d.stub.Shutdown(ctx)
}

// A span exporter that ignores cancellation (one of the caller's) does
// not hold Shutdown past its deadline: Shutdown gives up on it, counts
// what it held as failed, and says so; what the exporter answers later is
// not counted again.
func TestShutdownGivesUpOnADeafSpanExporter(t *testing.T) {
	d := &deaf{entered: make(chan struct{}), release: make(chan struct{}), returned: make(chan struct{}, 100)}
	var releaseOnce sync.Once
	release := func() { releaseOnce.Do(func() { close(d.release) }) }
	defer release()
	exp, err := otelexp.New(context.Background(), nil, otelexp.Config{Epoch: epoch}, otelexp.WithSpanExporter(d))
	if err != nil {
		t.Fatal(err)
	}
	recs, spans := records(10)
	exp.Consume(recs)
	select {
	case <-d.entered:
	case <-time.After(bound):
		t.Fatal("no export reached the span exporter")
	}
	done := make(chan error, 1)
	go func() {
		ctx, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
		defer cancel()
		done <- exp.Shutdown(ctx)
	}()
	select {
	case err := <-done:
		if !errors.Is(err, otelexp.ErrShutdownDeadline) || !strings.Contains(err.Error(), "the span exporter did not return") ||
			!strings.Contains(err.Error(), "Shutdown did not return") {
			t.Errorf("Shutdown: %v; want the deadline error naming the span exporter that did not return, and its Shutdown", err)
		}
	case <-time.After(bound):
		t.Fatal("Shutdown waited for a span exporter that ignores its context")
	}
	st := exp.Stats()
	if st.Pending != 0 || st.Failed != uint64(spans) || st.Exported != 0 || st.Queued != uint64(spans) {
		t.Errorf("stats after Shutdown %+v; want all %d spans queued and failed, none pending", st, spans)
	}
	release()
	select {
	case <-d.returned:
	case <-time.After(bound):
		t.Fatal("the released export did not return")
	}
	if after := exp.Stats(); after.Failed != st.Failed || after.Exported != 0 || after.Pending != 0 {
		t.Errorf("stats after the export returned late %+v; want them as at Shutdown %+v", after, st)
	}
}
