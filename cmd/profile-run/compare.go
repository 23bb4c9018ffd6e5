package main

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/trainscope/trainscope/exporters/jsonsummary"
	"github.com/trainscope/trainscope/internal/runcompare"
)

// exitSlower is profile-run compare's status where the new run's step
// time grew by more than -fail-above allows: apart from 1 (a run that
// cannot be read), so that a CI job can tell a slower change from a
// broken one.
const exitSlower = 3

const compareUsage = `Usage: profile-run compare [flags] BASE NEW

Compares two runs' summaries (RUN_DIR/summary.json, or the files named):
step time, busy share, bubble, communication and waiting, the straggler,
drops, and the ranges whose time per step changed most. It says where the
jobs differ (shape, width, backend, command) or a run is partial or short.

With -fail-above, it exits 3 when NEW's median step time (of its slowest
rank) is more than that share above BASE's: a CI gate. Exit 1: a run could
not be read, or has no step times to gate on; 2: a usage mistake.
See docs/compare.md.

Flags:
`

// compareOptions are profile-run compare's command line.
type compareOptions struct {
	base, new string
	failAbove float64 // a share (0.05); NaN-free, ≥ 0; gated only when set
	gate      bool
}

func parseCompareFlags(args []string, stderr io.Writer) (*compareOptions, error) {
	o := &compareOptions{}
	fs := flag.NewFlagSet("profile-run compare", flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	fs.Func("fail-above", "exit 3 when NEW's median step time (slowest rank) is more than this `PERCENT` above BASE's (5, 5%, 0.5%)", func(s string) error {
		v, err := strconv.ParseFloat(strings.TrimSpace(strings.TrimSuffix(strings.TrimSpace(s), "%")), 64)
		switch {
		case err != nil:
			return fmt.Errorf("%q is not a percentage (5, 5%%, 0.5%%)", s)
		case v < 0 || v != v || v > 1e6:
			return fmt.Errorf("%q: a percentage from 0 up", s)
		}
		o.failAbove, o.gate = v/100, true
		return nil
	})
	fs.Usage = func() {}
	runs, err := parseInterleaved(fs, args)
	if err != nil {
		if errors.Is(err, flag.ErrHelp) {
			fmt.Fprint(stderr, compareUsage)
			fs.SetOutput(stderr)
			fs.PrintDefaults()
			return nil, errHelp
		}
		return nil, flagError("compare: ", fs, err, nil)
	}
	if len(runs) != 2 {
		return nil, usagef("compare: two runs, BASE and NEW (run directories or summary.json files), not %d%s", len(runs), listed(runs))
	}
	o.base, o.new = runs[0], runs[1]
	return o, nil
}

// listed is ": a, b" for the arguments given, or nothing.
func listed(args []string) string {
	if len(args) == 0 {
		return ""
	}
	return " (" + strings.Join(args, ", ") + ")"
}

// runCompare is `profile-run compare`.
func runCompare(in *interrupt, args []string, stdout, stderr io.Writer) int {
	in.nothingToStop()
	o, err := parseCompareFlags(args, stderr)
	if code, failed := setupFailed(err, stderr, "profile-run compare"); failed {
		return code
	}
	var sides [2]runcompare.Run
	for i, name := range []string{o.base, o.new} {
		d, err := readSummary(name)
		if err != nil {
			fmt.Fprintf(stderr, "profile-run: compare: %v\n", err)
			return exitFail
		}
		sides[i] = runcompare.Run{Name: name, Doc: d}
	}
	c := runcompare.Compare(sides[0], sides[1])
	job, measuring := settingDiffs(sides[0].Doc.Command, sides[1].Doc.Command)
	c.JobDiffs = append(c.JobDiffs, job...)
	if len(measuring) > 0 {
		c.Notes = append(c.Notes, "the profiling differs, and with it its cost: "+strings.Join(measuring, ", "))
	}
	if err := c.Write(stdout); err != nil {
		fmt.Fprintf(stderr, "profile-run: compare: %v\n", err)
		return exitFail
	}
	if !o.gate {
		return exitOK
	}
	g, ok, err := c.Gate(o.failAbove)
	if err != nil {
		fmt.Fprintf(stderr, "profile-run: compare: -fail-above: %v\n", err)
		return exitFail
	}
	verdict := "within"
	if !ok {
		verdict = "more than"
	}
	what := "step time p50 (slowest rank)"
	if c.GatedFigure() != runcompare.GatedStepTime {
		what = "the collectives' cycle p50 (neither run marks steps)"
	}
	fmt.Fprintf(stdout, "\n%s %s%.1f %%: %s the %s allowed by -fail-above\n", what, sign(g), abs(g*100), verdict, pct(o.failAbove))
	if !ok {
		return exitSlower
	}
	return exitOK
}

func sign(v float64) string {
	if v < 0 {
		return "−"
	}
	return "+"
}

func abs(v float64) float64 {
	if v < 0 {
		return -v
	}
	return v
}

func pct(share float64) string { return strconv.FormatFloat(share*100, 'g', -1, 64) + " %" }

// readSummary reads a run's summary.json: name is a run directory or the
// file itself. The error names the path and what is wrong.
func readSummary(name string) (jsonsummary.Document, error) {
	fi, err := os.Stat(name)
	switch {
	case errors.Is(err, os.ErrNotExist):
		return jsonsummary.Document{}, fmt.Errorf("%s: no such run directory or file", name)
	case err != nil:
		return jsonsummary.Document{}, err
	}
	path := name
	if fi.IsDir() {
		path = filepath.Join(name, "summary.json")
		if !fileExists(path) {
			switch runs := runsUnder(name, "summary.json"); len(runs) {
			case 0:
			case 1:
				return jsonsummary.Document{}, fmt.Errorf("%s is an output directory holding one run directory, not a run directory: name it, %s", name, filepath.Join(name, runs[0]))
			default:
				n := len(runs)
				return jsonsummary.Document{}, fmt.Errorf("%s is an output directory holding %d run directories, not a run directory: name one; its latest two: profile-run compare %s %s",
					name, n, filepath.Join(name, runs[n-2]), filepath.Join(name, runs[n-1]))
			}
			return jsonsummary.Document{}, fmt.Errorf("%s: no such file: the run wrote no summary.json (it is written with the report into the run directory: not with -report off or -report PATH, nor by a profile-run older than summary.json)", path)
		}
	}
	// A run directory's summary.json is a file; a summary named on the
	// command line may be a pipe (`<(…)`) with its writer.
	open := os.Open
	if fi.IsDir() {
		open = openRegular
	}
	f, err := open(path)
	if err != nil {
		return jsonsummary.Document{}, err
	}
	defer f.Close()
	d, err := jsonsummary.Read(f)
	if err != nil {
		return jsonsummary.Document{}, fmt.Errorf("%s: %w", path, err)
	}
	return d, nil
}

// settingDiffs compares two profile-run command lines' settings that a
// summary's job does not carry: those that change the job's speed
// (injected delays, the data's seed, the learning rate) and those that
// change what profiling costs (-profile, -device-depth, a wrapped
// command's kernel tracing). A command line that does not parse (of
// another version) gives none.
func settingDiffs(a, b []string) (job, measuring []string) {
	if len(a) > 0 && a[0] == "import" || len(b) > 0 && b[0] == "import" {
		return nil, nil
	}
	oa, err := parseFlags(a, io.Discard)
	if err != nil {
		return nil, nil
	}
	ob, err := parseFlags(b, io.Discard)
	if err != nil {
		return nil, nil
	}
	diff := func(to *[]string, name string, x, y any) {
		if x != y {
			*to = append(*to, fmt.Sprintf("-%s %v → %v", name, x, y))
		}
	}
	if len(oa.command) == 0 && len(ob.command) == 0 {
		ta, tb := oa.train, ob.train
		diff(&job, "seed", ta.Seed, tb.Seed)
		diff(&job, "lr", ta.LearningRate, tb.LearningRate)
		diff(&job, "action-delay", ta.ActionDelay, tb.ActionDelay)
		straggler := func(d time.Duration, r int) string {
			if d == 0 {
				return "none"
			}
			return fmt.Sprintf("rank %d +%v", r, d)
		}
		diff(&job, "straggler-delay", straggler(ta.StragglerDelay, ta.StragglerRank), straggler(tb.StragglerDelay, tb.StragglerRank))
		diff(&measuring, "device-depth", oa.depth, ob.depth)
	} else {
		diff(&measuring, "kernels", oa.kernels, ob.kernels)
		diff(&measuring, "kernel-labels", oa.kernelLabels, ob.kernelLabels)
	}
	diff(&measuring, "profile", oa.profile, ob.profile)
	return job, measuring
}
