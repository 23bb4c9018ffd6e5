package main

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/trainscope/trainscope/ccl"
	_ "github.com/trainscope/trainscope/ccl/local" // in-process collectives for the CPU backend
	_ "github.com/trainscope/trainscope/ccl/nccl"  // NCCL, loaded at run time where present
	"github.com/trainscope/trainscope/pipeline"
	"github.com/trainscope/trainscope/profiler"
	"github.com/trainscope/trainscope/runtime"
	_ "github.com/trainscope/trainscope/runtime/cpu"  // host device backend
	_ "github.com/trainscope/trainscope/runtime/cuda" // CUDA, loaded at run time where present
)

// Exit codes.
const (
	exitOK    = 0
	exitFail  = 1
	exitUsage = 2
)

// flushTimeout bounds the wait for outstanding device work at the end.
const flushTimeout = 30 * time.Second

func run(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	o, err := parseFlags(args, stderr)
	if errors.Is(err, errHelp) {
		return exitOK
	}
	var ue *usageError
	if errors.As(err, &ue) {
		fmt.Fprintf(stderr, "profile-run: %s (see profile-run -h)\n", ue.msg)
		return exitUsage
	}
	if err != nil {
		fmt.Fprintf(stderr, "profile-run: %v\n", err)
		return exitFail
	}
	backend, err := chooseBackend(o.backend)
	if err != nil {
		fmt.Fprintf(stderr, "profile-run: %v\n", err)
		if errors.As(err, &ue) {
			return exitUsage
		}
		return exitFail
	}
	o.train.Backend = backend
	if err := o.train.Validate(); err != nil {
		var ce *pipeline.ConfigError
		if errors.As(err, &ce) {
			fmt.Fprintf(stderr, "profile-run: %s (see profile-run -h)\n", ce.Explain(asFlag))
		} else {
			fmt.Fprintf(stderr, "profile-run: %v\n", err)
		}
		return exitUsage
	}
	if err := train(ctx, o, stdout, stderr); err != nil {
		if errors.As(err, &ue) {
			fmt.Fprintf(stderr, "profile-run: %s (see profile-run -h)\n", ue.msg)
			return exitUsage
		}
		fmt.Fprintf(stderr, "profile-run: %v\n", err)
		return exitFail
	}
	return exitOK
}

// chooseBackend resolves -backend: auto picks the first device type, in
// order of preference, whose runtime and collective backends both load.
func chooseBackend(name string) (runtime.DeviceType, error) {
	if name != "auto" {
		t, err := runtime.ParseDeviceType(name)
		if err != nil {
			return 0, usagef("-backend: unknown backend %q (one of: auto, cpu, cuda)", name)
		}
		if err := usable(t); err != nil {
			return 0, fmt.Errorf("backend %s is not usable here: %w", t, err)
		}
		return t, nil
	}
	var reasons []error
	for _, t := range []runtime.DeviceType{runtime.CUDA, runtime.CPU} {
		err := usable(t)
		if err == nil {
			return t, nil
		}
		reasons = append(reasons, fmt.Errorf("%s: %w", t, err))
	}
	return 0, fmt.Errorf("no usable backend: %w", errors.Join(reasons...))
}

func usable(t runtime.DeviceType) error {
	if _, err := runtime.Available(t); err != nil {
		return err
	}
	_, err := ccl.Available(t)
	return err
}

// newRunID names a run by time and a random suffix.
func newRunID() string {
	var b [3]byte
	_, _ = rand.Read(b[:])
	return time.Now().UTC().Format("20060102-150405") + "-" + hex.EncodeToString(b[:])
}

// makeRunDir creates a fresh directory for this run under dir, named by
// its run ID, so no run overwrites another's outputs.
func makeRunDir(dir string) (string, error) {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return "", fmt.Errorf("output directory: %w", err)
	}
	for range 10 {
		path := filepath.Join(dir, newRunID())
		err := os.Mkdir(path, 0o755)
		if err == nil {
			return path, nil
		}
		if !errors.Is(err, os.ErrExist) {
			return "", fmt.Errorf("output directory: %w", err)
		}
	}
	return "", fmt.Errorf("output directory: could not find a free run name under %s", dir)
}

func train(ctx context.Context, o *options, stdout, stderr io.Writer) error {
	var prof *profiler.Profiler
	if o.profile != "off" {
		opts := []profiler.Option{profiler.WithDeviceDepth(o.depth)}
		if o.profile == "sync" {
			opts = append(opts, profiler.WithSyncEachRange())
		}
		var err error
		if prof, err = profiler.New(opts...); err != nil {
			return err
		}
		defer func() {
			cctx, cancel := context.WithTimeout(context.Background(), flushTimeout)
			defer cancel()
			_ = prof.Close(cctx)
		}()
	}
	var out *outputs
	if prof != nil {
		var err error
		if out, err = openOutputs(o, prof, stderr); err != nil {
			return err
		}
	}
	cfg := o.train
	cfg.Profiler = prof
	fmt.Fprintf(stdout, "profile-run: training on %s: pp=%d vpp=%d dp=%d, %d microbatches of %d rows, %d layers of width %d, schedule %s, %d steps\n",
		cfg.Backend, cfg.Stages, cfg.Chunks, cfg.Replicas, cfg.Microbatches, cfg.MicrobatchSize, cfg.Layers, cfg.Width, cfg.Schedule, cfg.Steps)
	res, trainErr := pipeline.Train(ctx, cfg)
	if res != nil {
		for i, loss := range res.Losses {
			var dt time.Duration
			if i < len(res.StepTimes) {
				dt = res.StepTimes[i]
			}
			fmt.Fprintf(stdout, "step %d: loss %.6f, %v\n", i, loss, dt.Round(time.Microsecond))
		}
	}
	if prof == nil {
		return trainErr
	}
	// Whatever happened to training, what was recorded is written out.
	fctx, cancel := context.WithTimeout(context.Background(), flushTimeout)
	flushErr := prof.Flush(fctx)
	cancel()
	return errors.Join(trainErr, flushErr, out.finish(stdout))
}

// writeReports prints the all-steps summary on stdout and writes it to f,
// either of them nil to skip it, and writes one file per rank beside f with
// per-step tables and the per-call log.
func writeReports(stdout io.Writer, f *os.File, recs []profiler.Record, by profiler.SortKey, ideal float64) ([]string, error) {
	all := make([]profiler.Record, len(recs))
	copy(all, recs)
	for i := range all {
		all[i].Tag = "all steps"
	}
	peaks := map[int]int64{}
	for i := range recs {
		peaks[recs[i].Rank] = max(peaks[recs[i].Rank], recs[i].PeakMemory)
	}
	groups := profiler.Summarize(all)
	steps := profiler.StepBreakdown(recs)
	var ws []io.Writer
	if stdout != nil {
		fmt.Fprintln(stdout)
		ws = append(ws, stdout)
	}
	if f != nil {
		ws = append(ws, f)
	}
	for _, w := range ws {
		if err := profiler.WriteReport(w, groups, peaks, by); err != nil {
			return nil, fmt.Errorf("report: %w", err)
		}
		if len(steps) > 0 {
			fmt.Fprintf(w, "\n=== where the steps went (%s) ===\n", profiler.BusyDefinition)
			if err := profiler.WriteStepBreakdown(w, steps, ideal); err != nil {
				return nil, fmt.Errorf("report: %w", err)
			}
		}
	}
	if f == nil {
		return nil, nil
	}
	prefix := strings.TrimSuffix(f.Name(), filepath.Ext(f.Name()))
	return profiler.WriteRankFiles(prefix, recs, by)
}
