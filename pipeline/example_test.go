package pipeline_test

import (
	"context"
	"fmt"

	_ "github.com/trainscope/trainscope/ccl/local"
	"github.com/trainscope/trainscope/pipeline"
	_ "github.com/trainscope/trainscope/runtime/cpu"
)

func Example() {
	cfg := pipeline.DefaultConfig() // 2 stages × 2 chunks on cpu devices
	cfg.Width, cfg.MicrobatchSize, cfg.Steps = 32, 4, 6
	res, err := pipeline.Train(context.Background(), cfg)
	if err != nil {
		fmt.Println(err)
		return
	}
	ref, err := pipeline.ReferenceLosses(cfg)
	if err != nil {
		fmt.Println(err)
		return
	}
	last := len(res.Losses) - 1
	fmt.Println("steps:", len(res.Losses))
	fmt.Println("loss decreased:", res.Losses[last] < res.Losses[0])
	fmt.Printf("final loss %.4f, unpipelined %.4f\n", res.Losses[last], ref[last])
	// Output:
	// steps: 6
	// loss decreased: true
	// final loss 0.3270, unpipelined 0.3270
}

func ExampleTrainer() {
	cfg := pipeline.DefaultConfig()
	cfg.Width, cfg.Layers, cfg.MicrobatchSize = 16, 8, 4
	tr, err := pipeline.NewTrainer(context.Background(), cfg)
	if err != nil {
		fmt.Println(err)
		return
	}
	defer tr.Close()
	for range 3 {
		r, err := tr.Step(context.Background())
		if err != nil {
			fmt.Println(err)
			return
		}
		fmt.Printf("step %d: loss %.4f\n", r.Step, r.Loss)
	}
	// Output:
	// step 0: loss 0.4405
	// step 1: loss 0.3807
	// step 2: loss 0.3256
}
