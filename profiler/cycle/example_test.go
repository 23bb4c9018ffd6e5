package cycle_test

import (
	"fmt"
	"time"

	"github.com/trainscope/trainscope/profiler"
	"github.com/trainscope/trainscope/profiler/cycle"
)

// A data-parallel loop's all-reduces, one per gradient bucket, 40 ms a
// step: the Sink takes them as a profiler hands them over, and Result
// says what they repeat.
func ExampleSink() {
	s := cycle.NewSink(0)
	var batch []profiler.Record
	for step := range 10 {
		at := time.Duration(step) * 40 * time.Millisecond
		for i, mib := range []int64{25, 25, 6} {
			batch = append(batch, profiler.Record{Name: "AllReduce", Kind: profiler.KindCollective, Rank: 0,
				HostStart:  at + 30*time.Millisecond + time.Duration(i)*2*time.Millisecond,
				Collective: profiler.Collective{Op: "AllReduce", Bytes: mib << 20, Peer: -1, Root: -1, Group: "dp"}})
		}
	}
	s.Consume(batch)
	fmt.Println(s.Result().Text())
	// Output:
	// cycle: rank 0 repeats a cycle of 3 collectives (AllReduce ×3, 56.0 MiB) every 40.0 ms (median over 10 or more cycles a rank; p90 40.0 ms): the step, most likely
}
