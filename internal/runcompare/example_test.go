package runcompare_test

import (
	"fmt"
	"os"

	"github.com/trainscope/trainscope/exporters/jsonsummary"
	"github.com/trainscope/trainscope/internal/runcompare"
)

// Two runs of one job, the second's median step 8 % longer: the
// comparison sets their figures side by side, and a 5 % gate fails it.
func Example() {
	run := func(p50 float64, busy float64) jsonsummary.Document {
		return jsonsummary.Document{
			Schema:  jsonsummary.Schema,
			Command: []string{"--", "torchrun", "train.py"},
			Steps: []jsonsummary.RankStep{
				{Rank: 0, Steps: 50, Mean: ptr(p50), P50: ptr(p50), P90: ptr(p50 * 1.25), Busy: &busy},
				{Rank: 1, Steps: 50, Mean: ptr(p50 * 0.9), P50: ptr(p50 * 0.9), P90: ptr(p50), Busy: &busy},
			},
		}
	}
	c := runcompare.Compare(runcompare.Run{Name: "before", Doc: run(0.100, 0.8)}, runcompare.Run{Name: "after", Doc: run(0.108, 0.75)})
	if err := c.Write(os.Stdout); err != nil {
		fmt.Println(err)
	}
	growth, ok, err := c.Gate(0.05)
	fmt.Printf("\ngrowth %.3f, within 5 %%: %v, %v\n", growth, ok, err)
	// Output:
	// base  before  (wrapped: torchrun train.py)
	// new   after  (wrapped: torchrun train.py)
	// the same job
	//
	// figure                          base     new    change
	// step time p50, slowest rank   100 ms  108 ms    +8.0 %
	// step time mean, slowest rank  100 ms  108 ms    +8.0 %
	// step time p90, slowest rank   125 ms  135 ms    +8.0 %
	// busy, mean over ranks         80.0 %  75.0 %  −5.0 pts
	// records dropped                    0       0         =
	// (measured by neither run: bubble, mean over stages; ideal bubble; communication per step, mean over ranks; waiting at collectives per step, all ranks; collective arrival skew p90; straggler; slowest stage (stage balance))
	//
	// growth 0.080, within 5 %: false, <nil>
}
