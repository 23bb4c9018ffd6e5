package prom_test

import (
	"bytes"
	"context"
	"errors"
	"io"
	"math"
	"net"
	"net/http"
	"os/exec"
	"sort"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	_ "github.com/trainscope/trainscope/ccl/local" // in-process collectives for the CPU backend
	"github.com/trainscope/trainscope/exporters/prom"
	"github.com/trainscope/trainscope/pipeline"
	"github.com/trainscope/trainscope/profiler"
	"github.com/trainscope/trainscope/runtime"
)

// trainConfig is a small pipelined, data-parallel run: 2 stages × 2
// chunks × 2 replicas, so it has forward and backward actions, Send and
// Recv between stages and AllReduce between replicas.
func trainConfig(steps, microbatches int) pipeline.Config {
	c := pipeline.DefaultConfig()
	c.Backend = runtime.CPU
	c.Stages, c.Chunks, c.Replicas = 2, 2, 2
	c.Microbatches, c.MicrobatchSize = microbatches, 4
	c.Width, c.Layers = 16, 8
	c.Steps = steps
	c.CommTimeout = 30 * time.Second
	return c
}

// train runs cfg with a profiler and an exporter attached, and flushes.
func train(t *testing.T, cfg pipeline.Config, opts ...prom.Option) (*profiler.Profiler, *prom.Exporter) {
	t.Helper()
	p, err := profiler.New()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = p.Close(context.Background()) })
	e, err := prom.New(p, append([]prom.Option{prom.WithHostname(host)}, opts...)...)
	if err != nil {
		t.Fatal(err)
	}
	cfg.Profiler = p
	if _, err := pipeline.Train(t.Context(), cfg); err != nil {
		t.Fatal(err)
	}
	if err := p.Flush(t.Context()); err != nil {
		t.Fatal(err)
	}
	return p, e
}

// The series of a run do not depend on how many steps or microbatches it
// has: no label takes per-step or per-microbatch values.
func TestSeriesBoundedByLayoutNotLength(t *testing.T) {
	count := func(steps, mbs int) (int, map[string]bool) {
		_, e := train(t, trainConfig(steps, mbs))
		mfs, err := e.Registry().Gather()
		if err != nil {
			t.Fatal(err)
		}
		n := 0
		set := map[string]bool{}
		for _, mf := range mfs {
			for _, m := range mf.GetMetric() {
				n++
				var b strings.Builder
				b.WriteString(mf.GetName())
				for _, l := range m.GetLabel() {
					b.WriteString("," + l.GetName() + "=" + l.GetValue())
					if l.GetName() == "step" || l.GetName() == "microbatch" {
						t.Errorf("%s has a %s label", mf.GetName(), l.GetName())
					}
				}
				set[b.String()] = true
			}
		}
		return n, set
	}
	small, smallSet := count(2, 2)
	large, largeSet := count(12, 16)
	if small != large {
		for k := range largeSet {
			if !smallSet[k] {
				t.Logf("only in the long run: %s", k)
			}
		}
		t.Errorf("%d series after 2 steps × 2 microbatches, %d after 12 × 16: the series grow with the run", small, large)
	}
	// 4 ranks; per rank at most 20 range names × 3 chunk values × 3 phases
	// would already be generous.
	if large > 4*20*3*3 {
		t.Errorf("%d series for 4 ranks", large)
	}
	t.Logf("%d series for 4 ranks, independent of steps and microbatches", large)
}

// scrape returns the /metrics body served at addr.
func scrape(t *testing.T, addr net.Addr) []byte {
	t.Helper()
	resp, err := http.Get("http://" + addr.String() + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil || resp.StatusCode != http.StatusOK {
		t.Fatalf("GET /metrics: %d, %v", resp.StatusCode, err)
	}
	return body
}

// promtool, the Prometheus project's own linter, accepts what a real run
// serves.
func TestPromtoolCheckMetrics(t *testing.T) {
	promtool, err := exec.LookPath("promtool")
	if err != nil {
		t.Skip("promtool is not on PATH (Debian package prometheus provides /usr/bin/promtool; scripts/prometheus.sh start installs it)")
	}
	_, e := train(t, trainConfig(2, 4))
	if err := e.AddDelivery("otel", prom.DeliveryFunc(func() prom.Delivery { return prom.Delivery{Delivered: 1} })); err != nil {
		t.Fatal(err)
	}
	addr, err := e.Serve("127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer e.Shutdown(context.Background())
	body := scrape(t, addr)
	for _, name := range []string{"trainscope_records_total", "trainscope_range_device_seconds_bucket", "trainscope_collective_busbw_bytes_per_second_bucket",
		"trainscope_stage_idle_seconds_total", "trainscope_records_dropped_total", "trainscope_exporter_items_total"} {
		if !bytes.Contains(body, []byte("\n"+name+"{")) {
			t.Errorf("/metrics has no %s", name)
		}
	}
	cmd := exec.Command(promtool, "check", "metrics")
	cmd.Stdin = bytes.NewReader(body)
	out, err := cmd.CombinedOutput()
	if err != nil || len(bytes.TrimSpace(out)) != 0 {
		t.Errorf("promtool check metrics: %v\n%s", err, out)
	}
}

func TestServeOnLoopbackAndPortInUse(t *testing.T) {
	e, err := prom.New(nil, prom.WithHostname(host))
	if err != nil {
		t.Fatal(err)
	}
	addr, err := e.Serve(":0") // no host: loopback only
	if err != nil {
		t.Fatal(err)
	}
	if ip := addr.(*net.TCPAddr).IP; !ip.IsLoopback() {
		t.Errorf("Serve(\":0\") listens on %v, want loopback", ip)
	}
	if _, err := e.Serve("127.0.0.1:0"); err == nil {
		t.Error("a second Serve on one exporter: no error")
	}

	// Another exporter on the same port gets an error at start, not a crash.
	other, _ := prom.New(nil, prom.WithHostname(host))
	_, err = other.Serve(addr.String())
	if !errors.Is(err, syscall.EADDRINUSE) || !strings.Contains(err.Error(), "already in use") {
		t.Errorf("Serve on a port in use: %v, want a clear EADDRINUSE error", err)
	}
	// ...and stays usable.
	addr2, err := other.Serve("127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	other.Consume([]profiler.Record{rec(1, 0, 0, "step", profiler.KindHost, 0, 1, 0, 0)})
	if !bytes.Contains(scrape(t, addr2), []byte("trainscope_records_total{")) {
		t.Error("the second exporter does not serve its records")
	}
	// A scrape asking for gzip, as Prometheus's does, gets plain text:
	// compressing costs the training node's cores.
	req, _ := http.NewRequest(http.MethodGet, "http://"+addr2.String()+"/metrics", nil)
	req.Header.Set("Accept-Encoding", "gzip")
	resp, err := http.DefaultTransport.RoundTrip(req) // the client would ask for and undo gzip itself
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	_ = resp.Body.Close()
	if enc := resp.Header.Get("Content-Encoding"); enc != "" || !bytes.Contains(body, []byte("trainscope_records_total{")) {
		t.Errorf("a scrape asking for gzip: Content-Encoding %q, body readable as text %v; want no compression", enc, bytes.Contains(body, []byte("trainscope_records_total{")))
	}
	for _, x := range []*prom.Exporter{e, other} {
		if err := x.Shutdown(context.Background()); err != nil {
			t.Error(err)
		}
		if err := x.Shutdown(context.Background()); err != nil {
			t.Errorf("second Shutdown: %v", err)
		}
	}
	if _, err := http.Get("http://" + addr.String() + "/metrics"); err == nil {
		t.Error("still serving after Shutdown")
	}
	if _, err := e.Serve("127.0.0.1:0"); !errors.Is(err, prom.ErrClosed) {
		t.Errorf("Serve after Shutdown: %v, want ErrClosed", err)
	}
	if _, err := e.Serve("no-port"); err == nil {
		t.Error("Serve(\"no-port\"): no error")
	}
}

// On real runs — two in a row on one profiler, whose recorders number
// their records from 1 again — busy and idle per rank reconcile with the
// records the profiler kept (busy recomputed here by a sweep over each
// step's device intervals), and with the text report's step breakdown.
func TestBusyIdleReconcileWithRecords(t *testing.T) {
	p, err := profiler.New()
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close(context.Background())
	e, err := prom.New(p, prom.WithHostname(host))
	if err != nil {
		t.Fatal(err)
	}
	wantBusy, wantWall := map[string]float64{}, map[string]float64{}
	reportBusy, reportWall := map[string]float64{}, map[string]float64{}
	for run := range 2 {
		cfg := trainConfig(3, 4)
		cfg.Profiler = p
		if _, err := pipeline.Train(t.Context(), cfg); err != nil {
			t.Fatal(err)
		}
		if err := p.Flush(t.Context()); err != nil {
			t.Fatal(err)
		}
		recs := p.Snapshot()
		p.Reset()
		for _, rs := range profiler.StepBreakdown(recs) {
			reportBusy[strconv.Itoa(rs.Rank)] += rs.Busy.Seconds()
			reportWall[strconv.Itoa(rs.Rank)] += rs.Wall.Seconds()
		}
		type key struct{ rank, step int }
		steps := map[key]*profiler.Record{}
		for i := range recs {
			if r := &recs[i]; r.Depth == 0 && r.Name == "step" {
				steps[key{r.Rank, int(r.Step)}] = r
			}
		}
		if len(steps) != 3*4 {
			t.Fatalf("run %d: %d step records, want 12", run, len(steps))
		}
		// Sweep each step's device intervals: busy where some stream has
		// a forward, backward or optimizer range open and no transfer
		// (collective, send, receive) nor wait (communication phase) on
		// the same stream.
		type edge struct {
			at           time.Duration
			stream       uint64
			compute, off int
		}
		edges := map[key][]edge{}
		for i := range recs {
			r := &recs[i]
			if !r.HasDevice {
				continue
			}
			var c, o int
			switch {
			case r.Kind == profiler.KindCollective || r.Kind == profiler.KindP2P || r.Phase == profiler.Comm:
				o = 1
			case r.Kind == profiler.KindDevice && (r.Phase == profiler.Forward || r.Phase == profiler.Backward || r.Phase == profiler.Optimizer):
				c = 1
			default:
				continue
			}
			k := key{r.Rank, int(r.Step)}
			edges[k] = append(edges[k], edge{r.DeviceStart, r.Stream, c, o}, edge{r.DeviceEnd, r.Stream, -c, -o})
		}
		for k, s := range steps {
			es := edges[k]
			sort.Slice(es, func(i, j int) bool { return es[i].at < es[j].at })
			open := map[uint64][2]int{}
			var busy time.Duration
			for i, x := range es {
				if i > 0 {
					computing := false
					for _, n := range open {
						computing = computing || n[0] > 0 && n[1] == 0
					}
					if lo, hi := max(es[i-1].at, s.HostStart), min(x.at, s.HostEnd); computing && hi > lo {
						busy += hi - lo
					}
				}
				n := open[x.stream]
				open[x.stream] = [2]int{n[0] + x.compute, n[1] + x.off}
			}
			rank := strconv.Itoa(s.Rank)
			wantBusy[rank] += busy.Seconds()
			wantWall[rank] += s.HostDuration().Seconds()
		}
	}
	got := gatherValues(t, e.Registry())
	for rank := range wantWall {
		l := `{Hostname="node-7",UUID="",gpu="` + rank + `",rank="` + rank + `",stage="` + stageOf(rank) + `"}`
		busy, idle := got["trainscope_stage_busy_seconds_total"+l], got["trainscope_stage_idle_seconds_total"+l]
		if math.Abs(busy-wantBusy[rank]) > 1e-9 || math.Abs(busy+idle-wantWall[rank]) > 1e-9 {
			t.Errorf("rank %s: busy %v idle %v; want busy %v, busy+idle = step wall %v (have %v)",
				rank, busy, idle, wantBusy[rank], wantWall[rank], keys(got, "trainscope_stage_busy"))
		}
		if busy <= 0 || idle <= 0 {
			t.Errorf("rank %s: busy %v, idle %v: want both positive", rank, busy, idle)
		}
		// The report and /metrics say the same.
		if math.Abs(busy-reportBusy[rank]) > 1e-9 || math.Abs(busy+idle-reportWall[rank]) > 1e-9 {
			t.Errorf("rank %s: metrics busy %v of %v, report busy %v of %v", rank, busy, busy+idle, reportBusy[rank], reportWall[rank])
		}
		if late := got["trainscope_stage_late_ranges_total"+l]; late != 0 {
			t.Errorf("rank %s: %v late actions", rank, late)
		}
		if n := got["trainscope_step_seconds_count"+l]; n != 6 {
			t.Errorf("rank %s: %v steps, want 6", rank, n)
		}
	}
}

// stageOf is the trainer's stage of a rank with 2 stages.
func stageOf(rank string) string {
	r, _ := strconv.Atoi(rank)
	return strconv.Itoa(r % 2)
}

// Scrapes run concurrently with the collector feeding records in (the
// race detector watches), and the last scrape counts every record.
func TestScrapeWhileTraining(t *testing.T) {
	p, err := profiler.New()
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close(context.Background())
	e, err := prom.New(p, prom.WithHostname(host))
	if err != nil {
		t.Fatal(err)
	}
	addr, err := e.Serve("127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer e.Shutdown(context.Background())
	stop := make(chan struct{})
	scraped := make(chan int)
	go func() {
		n := 0
		defer func() { scraped <- n }()
		for {
			select {
			case <-stop:
				return
			default:
			}
			resp, err := http.Get("http://" + addr.String() + "/metrics")
			if err != nil {
				t.Error(err)
				return
			}
			_, _ = io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
			n++
		}
	}()
	cfg := trainConfig(4, 4)
	cfg.Profiler = p
	if _, err := pipeline.Train(t.Context(), cfg); err != nil {
		t.Fatal(err)
	}
	if err := p.Flush(t.Context()); err != nil {
		t.Fatal(err)
	}
	close(stop)
	t.Logf("%d scrapes during training", <-scraped)
	got := gatherValues(t, e.Registry())
	total := 0.0
	for _, k := range keys(got, "trainscope_records_total{") {
		total += got[k]
	}
	if n := len(p.Snapshot()); total != float64(n) {
		t.Errorf("trainscope_records_total sums to %v, the profiler kept %d", total, n)
	}
}
