package jsonsummary_test

import (
	"os"
	"time"

	"github.com/trainscope/trainscope/exporters/jsonsummary"
	"github.com/trainscope/trainscope/profiler"
)

// A rank's three steps of 10 ms each, 4 ms of them computing, and its
// forward ranges.
func ExampleWrite() {
	ms := time.Millisecond
	in := jsonsummary.Input{
		RunID: "example",
		Stats: profiler.Stats{Collected: 4},
		Steps: []profiler.StepStats{{
			RankSteps: profiler.RankSteps{Rank: 0, Stage: profiler.None, Steps: 3, Wall: 30 * ms, Busy: 12 * ms, Computed: true},
			Min:       10 * ms, Max: 10 * ms, P50: 10 * ms, P90: 10 * ms, P99: 10 * ms,
		}},
		Groups: []profiler.Group{{Tag: "all steps", Names: []profiler.NameStats{{Name: "forward", Count: 3, HostTotal: 1500 * time.Microsecond, DeviceTotal: 12 * ms}}}},
	}
	if err := jsonsummary.Write(os.Stdout, in); err != nil {
		panic(err)
	}
	// Output:
	// {
	//   "schema": "trainscope.summary/v1",
	//   "run_id": "example",
	//   "command": [],
	//   "records": {
	//     "collected": 4,
	//     "dropped": 0,
	//     "host_only": 0,
	//     "device_unfinished": 0,
	//     "backend_errors": 0
	//   },
	//   "steps": [
	//     {
	//       "rank": 0,
	//       "stage": null,
	//       "steps": 3,
	//       "mean_s": 0.01,
	//       "min_s": 0.01,
	//       "p50_s": 0.01,
	//       "p90_s": 0.01,
	//       "p99_s": 0.01,
	//       "max_s": 0.01,
	//       "busy_fraction": 0.4,
	//       "cut_short_steps": 0
	//     }
	//   ],
	//   "ranges": [
	//     {
	//       "tag": "all steps",
	//       "name": "forward",
	//       "count": 3,
	//       "host_s": 0.0015,
	//       "device_s": 0.012
	//     }
	//   ]
	// }
}
