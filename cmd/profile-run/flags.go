package main

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"strings"

	"github.com/trainscope/trainscope/pipeline"
	"github.com/trainscope/trainscope/profiler"
)

// options are the parsed command line.
type options struct {
	train   pipeline.Config
	backend string // "auto", "cpu", "cuda"
	outDir  string
	sortBy  profiler.SortKey
	profile string // "on", "off", "seed-sync"
	command []string
}

var errHelp = errors.New("help requested")

// usageError is a command-line mistake: one line, exit code 2.
type usageError struct{ msg string }

func (e *usageError) Error() string { return e.msg }

func usagef(format string, args ...any) error { return &usageError{fmt.Sprintf(format, args...)} }

func parseFlags(args []string, stderr io.Writer) (*options, error) {
	def := pipeline.DefaultConfig()
	o := &options{train: def}
	fs := flag.NewFlagSet("profile-run", flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	c := &o.train
	fs.IntVar(&c.Stages, "pp", def.Stages, "pipeline-parallel stages")
	fs.IntVar(&c.Chunks, "vpp", def.Chunks, "virtual pipeline chunks per stage (VPP)")
	fs.IntVar(&c.Replicas, "dp", def.Replicas, "data-parallel replicas")
	fs.IntVar(&c.Microbatches, "microbatches", def.Microbatches, "microbatches per step")
	fs.IntVar(&c.MicrobatchSize, "microbatch-size", def.MicrobatchSize, "rows per microbatch")
	fs.IntVar(&c.Steps, "steps", def.Steps, "training steps")
	fs.IntVar(&c.Width, "width", def.Width, "layer width")
	fs.IntVar(&c.Layers, "layers", def.Layers, "total number of layers (divisible by pp·vpp)")
	fs.StringVar(&c.Schedule, "schedule", def.Schedule, "pipeline schedule: 1f1b (interleaved when vpp>1) or gpipe")
	fs.Uint64Var(&c.Seed, "seed", def.Seed, "seed for weights and data")
	lr := fs.Float64("lr", float64(def.LearningRate), "SGD learning rate")
	fs.DurationVar(&c.CommTimeout, "comm-timeout", def.CommTimeout, "deadline for any one communication wait")
	fs.StringVar(&o.backend, "backend", "auto", "device backend: auto, cpu or cuda")
	fs.StringVar(&o.outDir, "out", "trainscope-out", "directory for this run's outputs (a new subdirectory per run)")
	sortBy := fs.String("sort", "host_total", "report sort column: "+strings.Join(profiler.SortKeys(), ", "))
	fs.StringVar(&o.profile, "profile", "on", "profiling: on, off, or seed-sync (synchronise around every range, as the seed did)")
	printUsage := func() {
		fmt.Fprintf(stderr, "Usage: profile-run [flags]\n\nTrains the built-in pipelined model on the best available backend and reports\nwhere each step's time went.\n\nFlags:\n")
		fs.SetOutput(stderr)
		fs.PrintDefaults()
		fs.SetOutput(io.Discard)
	}
	// The flag package would print the whole usage on every mistake; a
	// mistake gets one line, -h gets the usage.
	fs.Usage = func() {}
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			printUsage()
			return nil, errHelp
		}
		return nil, usagef("%v", err)
	}
	o.command = fs.Args()
	if len(o.command) > 0 {
		return nil, usagef("unexpected arguments %q: profile-run takes flags only (wrapping a command is not supported yet)", o.command)
	}
	c.LearningRate = *lr
	var err error
	if o.sortBy, err = profiler.ParseSortKey(*sortBy); err != nil {
		return nil, usagef("-sort: %v", err)
	}
	switch o.profile {
	case "on", "off", "seed-sync":
	default:
		return nil, usagef("-profile: unknown mode %q (one of: on, off, seed-sync)", o.profile)
	}
	if c.CommTimeout <= 0 {
		return nil, usagef("-comm-timeout: %v must be positive", c.CommTimeout)
	}
	if strings.TrimSpace(o.outDir) == "" {
		return nil, usagef("-out: empty directory name")
	}
	return o, nil
}
