package nccl_test

import (
	"context"
	"fmt"
	"time"

	_ "github.com/trainscope/trainscope/ccl/local" // the CPU run to compare with
	"github.com/trainscope/trainscope/pipeline"
	"github.com/trainscope/trainscope/profiler"
	_ "github.com/trainscope/trainscope/runtime/cpu"
)

// trainLosses trains cfg and returns its losses; with profile, under the
// profiler, checking that the run was recorded with device times.
func trainLosses(cfg pipeline.Config, profile bool) ([]float64, error) {
	var p *profiler.Profiler
	if profile {
		var err error
		if p, err = profiler.New(); err != nil {
			return nil, err
		}
		defer p.Close(context.Background())
		cfg.Profiler = p
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	res, err := pipeline.Train(ctx, cfg)
	if err != nil {
		return nil, err
	}
	if p != nil {
		fctx, fcancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer fcancel()
		if err := p.Flush(fctx); err != nil {
			return nil, err
		}
		var device int
		for _, r := range p.Snapshot() {
			if r.HasDevice {
				device++
			}
		}
		st := p.Stats()
		if device == 0 || st.Errors != 0 {
			return nil, fmt.Errorf("profiled run: %d device-timed records, stats %+v", device, st)
		}
	}
	return res.Losses, nil
}
