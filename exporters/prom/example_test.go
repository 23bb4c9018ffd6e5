package prom_test

import (
	"bufio"
	"context"
	"fmt"
	"net/http"
	"strings"

	"github.com/trainscope/trainscope/exporters/prom"
	"github.com/trainscope/trainscope/profiler"
	"github.com/trainscope/trainscope/runtime"
)

// A profiled loop's records become metrics served on /metrics while it
// runs; Push would send the same values to a Pushgateway at the end.
func Example() {
	ctx := context.Background()
	p, err := profiler.New()
	if err != nil {
		panic(err)
	}
	defer p.Close(ctx)
	e, err := prom.New(p, prom.WithHostname("node-1"))
	if err != nil {
		panic(err)
	}
	// profile-run serves on prom.DefaultAddr; a port already in use is an
	// error here, and training can go on without the endpoint.
	addr, err := e.Serve("127.0.0.1:0")
	if err != nil {
		panic(err)
	}
	defer e.Shutdown(ctx)

	dev := runtime.Device{Type: runtime.CPU, Index: 0}
	stream, _ := runtime.NewStream(dev)
	defer stream.Destroy()
	rec, _ := p.NewRecorder(0, dev)
	for step := range 3 {
		rec.SetStep(step)
		rec.Start("step")
		rec.SetPhase(profiler.Forward)
		rec.StartDevice("forward", stream)
		rec.End()
		rec.SetPhase(profiler.PhaseNone)
		rec.End()
	}
	_ = p.Flush(ctx) // resolves device times and hands every record to the exporter

	resp, err := http.Get("http://" + addr.String() + "/metrics")
	if err != nil {
		panic(err)
	}
	defer resp.Body.Close()
	sc := bufio.NewScanner(resp.Body)
	for sc.Scan() {
		if l := sc.Text(); strings.HasPrefix(l, "trainscope_records_total{") || strings.HasPrefix(l, "trainscope_step_seconds_count{") {
			fmt.Println(l)
		}
	}
	// Output:
	// trainscope_records_total{Hostname="node-1",name="forward"} 3
	// trainscope_records_total{Hostname="node-1",name="step"} 3
	// trainscope_step_seconds_count{Hostname="node-1",UUID="",gpu="0",rank="0",stage=""} 3
}
