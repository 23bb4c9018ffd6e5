package schedule_test

import (
	"fmt"

	"github.com/trainscope/trainscope/pipeline/schedule"
)

func Example() {
	s, err := schedule.Interleaved1F1B(2, 2, 4)
	if err != nil {
		fmt.Println(err)
		return
	}
	for stage := range s.Stages() {
		fmt.Printf("stage %d (warm-up %d):", stage, s.Warmup(stage))
		for _, a := range s.Actions(stage) {
			fmt.Print(" ", a)
		}
		fmt.Println()
	}
	tl, err := schedule.Simulate(s, schedule.UniformCost(1, 2))
	if err != nil {
		fmt.Println(err)
		return
	}
	fmt.Printf("makespan %g, bubble %.3f (ideal %.3f)\n",
		tl.Makespan, tl.BubbleFraction(), schedule.IdealBubbleFraction(2, 2, 4))
	// Output:
	// stage 0 (warm-up 4): F0.c0 F1.c0 F0.c1 F1.c1 F2.c0 B0.c1 F3.c0 B1.c1 F2.c1 B0.c0 F3.c1 B1.c0 B2.c1 B3.c1 B2.c0 B3.c0
	// stage 1 (warm-up 2): F0.c0 F1.c0 F0.c1 B0.c1 F1.c1 B1.c1 F2.c0 B0.c0 F3.c0 B1.c0 F2.c1 B2.c1 F3.c1 B3.c1 B2.c0 B3.c0
	// makespan 27, bubble 0.111 (ideal 0.111)
}
