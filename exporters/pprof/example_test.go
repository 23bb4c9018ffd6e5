package pprof_test

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/trainscope/trainscope/exporters/pprof"
	"github.com/trainscope/trainscope/profiler"
)

// A step holding a device-timed forward range with one op inside becomes
// three samples whose stacks are the nesting paths and whose values are
// self times: the step's 100µs of host time are split 40/50/10 between
// the step itself, forward and linear, so pprof's cum for step is 100µs.
func Example() {
	const us = time.Microsecond
	l := profiler.NoLabels
	l.Step = 0
	recs := []profiler.Record{
		{ID: 1, Name: "step", Labels: l, HostStart: 0, HostEnd: 100 * us},
		{ID: 2, Parent: 1, Depth: 1, Name: "forward", Kind: profiler.KindDevice, Labels: l, HostStart: 10 * us, HostEnd: 70 * us,
			HasDevice: true, DeviceStart: 20 * us, DeviceEnd: 90 * us},
		{ID: 3, Parent: 2, Depth: 2, Name: "linear", Kind: profiler.KindDevice, Labels: l, HostStart: 20 * us, HostEnd: 30 * us,
			HasDevice: true, DeviceStart: 25 * us, DeviceEnd: 85 * us},
	}
	p, err := pprof.Build(recs)
	if err != nil {
		panic(err)
	}
	var types []string
	for _, st := range p.SampleType {
		types = append(types, st.Type+"/"+st.Unit)
	}
	fmt.Println(strings.Join(types, " "))
	for _, s := range p.Sample {
		var stack []string
		for _, loc := range s.Location {
			stack = append(stack, loc.Line[0].Function.Name)
		}
		fmt.Printf("%-22s host %v device %v ranges %d\n", strings.Join(stack, " ← "),
			time.Duration(s.Value[0]), time.Duration(s.Value[1]), s.Value[2])
	}
	// Output:
	// host_time/nanoseconds device_time/nanoseconds ranges/count
	// step                   host 40µs device 0s ranges 1
	// forward ← step         host 50µs device 10µs ranges 1
	// linear ← forward ← step host 10µs device 60µs ranges 1
}

// WriteFile is what a run does at its end, with every record after a
// Flush; open the file with `go tool pprof -http=:8080 profile.pb.gz`.
func ExampleWriteFile() {
	dir, err := os.MkdirTemp("", "trainscope-example")
	if err != nil {
		panic(err)
	}
	defer os.RemoveAll(dir)
	recs := []profiler.Record{{ID: 1, Name: "step", Labels: profiler.NoLabels, HostEnd: time.Millisecond}}
	st, err := pprof.WriteFile(filepath.Join(dir, "profile.pb.gz"), recs)
	if err != nil {
		panic(err)
	}
	fmt.Println(st.Samples, "samples")
	// Output: 1 samples
}
