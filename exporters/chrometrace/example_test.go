package chrometrace_test

import (
	"bytes"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/trainscope/trainscope/exporters/chrometrace"
	"github.com/trainscope/trainscope/profiler"
	"github.com/trainscope/trainscope/runtime"
)

// Rank 0 sends a microbatch's activations to rank 1. Each range becomes a
// complete event on its rank's host track, and again at its device times
// on a device track; a flow arrow joins the Send and the Recv.
func Example() {
	const us = time.Microsecond
	p2p := func(op string, rank, peer int32) profiler.Collective {
		return profiler.Collective{Op: op, Bytes: 1 << 16, Peer: peer, Root: -1, Group: "pp0", GroupSize: 2, GroupRank: rank}
	}
	recs := []profiler.Record{
		{ID: 1, Name: "Send", Kind: profiler.KindP2P, Rank: 0, Device: runtime.Device{Type: runtime.CPU, Index: 0},
			Labels: profiler.NoLabels, Collective: p2p("Send", 0, 1), HostStart: 10 * us, HostEnd: 12 * us,
			HasDevice: true, DeviceStart: 15 * us, DeviceEnd: 40 * us},
		{ID: 1, Name: "Recv", Kind: profiler.KindP2P, Rank: 1, Device: runtime.Device{Type: runtime.CPU, Index: 1},
			Labels: profiler.NoLabels, Collective: p2p("Recv", 1, 0), HostStart: 11 * us, HostEnd: 13 * us,
			HasDevice: true, DeviceStart: 20 * us, DeviceEnd: 41 * us},
	}
	var buf bytes.Buffer
	if _, err := chrometrace.Write(&buf, recs); err != nil {
		panic(err)
	}
	for _, line := range strings.Split(buf.String(), "\n") {
		switch {
		case strings.Contains(line, `"thread_name"`):
			fmt.Println(strings.TrimSuffix(line, ","))
		case strings.Contains(line, `"bind_id"`):
			fmt.Println(line[:strings.Index(line, `,"args"`)])
		}
	}
	// Output:
	// {"ph":"M","name":"thread_name","pid":1,"tid":1,"args":{"name":"host"}}
	// {"ph":"M","name":"thread_name","pid":1,"tid":2,"args":{"name":"cpu:0 communication"}}
	// {"ph":"M","name":"thread_name","pid":2,"tid":3,"args":{"name":"host"}}
	// {"ph":"M","name":"thread_name","pid":2,"tid":4,"args":{"name":"cpu:1 communication"}}
	// {"ph":"X","name":"Send","cat":"p2p","ts":15.00025,"dur":25.00025,"pid":1,"tid":2,"bind_id":1,"flow_out":true
	// {"ph":"X","name":"Recv","cat":"p2p","ts":20.00025,"dur":21.00025,"pid":2,"tid":4,"bind_id":1,"flow_in":true
}

// WriteFile is what a run does at its end, with every record after a
// Flush; open the file in ui.perfetto.dev.
func ExampleWriteFile() {
	dir, err := os.MkdirTemp("", "trainscope-example")
	if err != nil {
		panic(err)
	}
	defer os.RemoveAll(dir)
	recs := []profiler.Record{{ID: 1, Name: "step", Labels: profiler.NoLabels, HostEnd: time.Millisecond}}
	st, err := chrometrace.WriteFile(filepath.Join(dir, "trace.json"), recs)
	if err != nil {
		panic(err)
	}
	fmt.Printf("%d events, %d flows\n", st.Events, st.Flows)
	// Output: 1 events, 0 flows
}
