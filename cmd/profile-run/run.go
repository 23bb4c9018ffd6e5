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
	"slices"
	"strings"
	"syscall"
	"time"

	"go.uber.org/zap"

	_ "github.com/trainscope/trainscope/ccl/local" // in-process collectives for the CPU backend
	_ "github.com/trainscope/trainscope/ccl/nccl"  // NCCL, loaded at run time where present
	"github.com/trainscope/trainscope/pipeline"
	"github.com/trainscope/trainscope/profiler"
	"github.com/trainscope/trainscope/profiler/analysis"
	"github.com/trainscope/trainscope/profiler/cycle"
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

// run is profile-run with ctx in place of signals: its end stops
// training, as a first signal would.
func run(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	return runWith(newInterrupt(ctx), args, stdout, stderr)
}

func runWith(in *interrupt, args []string, stdout, stderr io.Writer) int {
	if len(args) > 0 && args[0] == "import" {
		return runImport(in, args[1:], stdout, stderr)
	}
	if len(args) > 0 && args[0] == "report" {
		return runReport(in, args[1:], stdout, stderr)
	}
	if len(args) > 0 && args[0] == "compare" {
		return runCompare(in, args[1:], stdout, stderr)
	}
	if len(args) > 0 && (args[0] == "version" || args[0] == "-version" || args[0] == "--version") {
		return runVersion(in, args[1:], stdout, stderr)
	}
	if len(args) > 0 && args[0] == "help" {
		// A command to wrap comes after --, so "help" first is a request
		// for the usage, as -h is.
		switch {
		case len(args) == 1:
			args = []string{"-h"}
		case len(args) == 2 && (args[1] == "import" || args[1] == "report" || args[1] == "compare" || args[1] == "version"):
			return runWith(in, []string{args[1], "-h"}, stdout, stderr)
		default:
			fmt.Fprintf(stderr, "profile-run: help %q: no such subcommand (profile-run help, profile-run help import, profile-run help report, profile-run help compare, profile-run help version) (see profile-run -h)\n", strings.Join(args[1:], " "))
			return exitUsage
		}
	}
	o, err := parseFlags(args, stderr)
	if code, failed := setupFailed(err, stderr, "profile-run"); failed {
		return code
	}
	log, err := newLogger(stderr, o.logFormat, o.logLevel)
	if code, failed := setupFailed(err, stderr, "profile-run"); failed {
		return code
	}
	defer func() { _ = log.Sync() }()
	for _, d := range slices.Concat(o.deprecations, o.warnings) {
		log.Warn(d)
	}
	if len(o.command) > 0 {
		return runWrapped(in, o, log, stdout, stderr)
	}
	choice, err := chooseBackend(o.backend, o.train, systemBackends)
	if code, failed := setupFailed(err, stderr, "profile-run"); failed {
		return code
	}
	o.train.Backend = choice.backend
	if err := o.train.Validate(); err != nil {
		var ce *pipeline.ConfigError
		if errors.As(err, &ce) {
			fmt.Fprintf(stderr, "profile-run: %s (see profile-run -h)\n", ce.Explain(asFlag))
		} else {
			fmt.Fprintf(stderr, "profile-run: %v\n", err)
		}
		return exitUsage
	}
	// Why auto passed a backend over, once the job is known to be valid:
	// a usage error stays one line.
	for _, p := range choice.passedOver {
		if p.found {
			log.Warn(p.String())
		} else {
			log.Info(p.Brief())
			log.Debug(p.String())
		}
	}
	// A precision the backend lacks is a warning, not a mistake: the
	// same command line runs everywhere, in float32 where it must.
	var why string
	if o.train.Precision, why = o.train.EffectivePrecisionExplained(asFlag); why != "" {
		log.Warn(why)
	}
	if err := train(in, o, log, stdout); err != nil {
		var ei *errInterrupted
		if errors.As(err, &ei) {
			// The signal sets the status; what else went wrong on the
			// way out (a flush cut short, an output not written) is
			// still said.
			if rest := besidesInterruption(err); rest != nil {
				for _, line := range strings.Split(trainError(rest), "\n") {
					if line != "" {
						log.Warn(line)
					}
				}
			}
			return in.exitCode()
		}
		var ue *usageError
		if errors.As(err, &ue) {
			fmt.Fprintf(stderr, "profile-run: %s (see profile-run -h)\n", ue.msg)
			return exitUsage
		}
		// Errors joined (outputs that each failed) are a line each, every
		// line with the log's prefix.
		for _, line := range strings.Split(trainError(err), "\n") {
			if line != "" {
				log.Error(line)
			}
		}
		return exitFail
	}
	return exitOK
}

// besidesInterruption is err without the signal's own error: the errors
// joined into it that are not an *errInterrupted, joined again; nil when
// there are none.
func besidesInterruption(err error) error {
	var errs []error
	if j, ok := err.(interface{ Unwrap() []error }); ok {
		errs = j.Unwrap()
	} else {
		errs = []error{err}
	}
	var rest []error
	for _, e := range errs {
		var ei *errInterrupted
		if !errors.As(e, &ei) {
			rest = append(rest, e)
		}
	}
	return errors.Join(rest...)
}

// trainError is the text of a failed run's error, led by the flag whose
// deadline expired where a wait was cut short by -comm-timeout (the
// pipeline's text names the timeout by value only).
func trainError(err error) string {
	var te *pipeline.CommTimeoutError
	if errors.As(err, &te) {
		return fmt.Sprintf("-comm-timeout %v expired (raise it if waits this long are expected): %v", te.Timeout, err)
	}
	return err.Error()
}

// newRunID names a run by time and a random suffix.
func newRunID() string {
	var b [3]byte
	_, _ = rand.Read(b[:])
	return time.Now().UTC().Format("20060102-150405") + "-" + hex.EncodeToString(b[:])
}

// makeRunDir creates a fresh directory for this run under dir, named by
// its run ID, so no run overwrites another's outputs. It also returns the
// directories of dir it had to make, innermost first: a run that writes
// nothing removes them with its own (removeRunDir).
func makeRunDir(dir string) (path string, made []string, err error) {
	for d := filepath.Clean(dir); ; {
		if _, err := os.Lstat(d); err == nil || !errors.Is(err, os.ErrNotExist) {
			break
		}
		made = append(made, d)
		up := filepath.Dir(d)
		if up == d {
			break
		}
		d = up
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		if errors.Is(err, syscall.ENOTDIR) {
			return "", nil, usagef("-out %s: not a directory (%v): name a directory, or one to create", dir, err)
		}
		return "", nil, fmt.Errorf("output directory -out %s: %w", dir, err)
	}
	for range 10 {
		path := filepath.Join(dir, newRunID())
		err := os.Mkdir(path, 0o755)
		if err == nil {
			return path, made, nil
		}
		if !errors.Is(err, os.ErrExist) {
			return "", made, fmt.Errorf("output directory -out %s: %w", dir, err)
		}
	}
	return "", made, fmt.Errorf("output directory -out %s: could not find a free run name in it", dir)
}

func train(in *interrupt, o *options, log *zap.Logger, stdout io.Writer) error {
	var prof *profiler.Profiler
	if o.profile != "off" {
		// The sinks keep the whole-run summaries and a window of detail in
		// bounded memory; the profiler keeps no records of its own.
		opts := []profiler.Option{profiler.WithDeviceDepth(o.depth), profiler.WithMaxRecords(0)}
		if o.profile == "sync" {
			opts = append(opts, profiler.WithSyncEachRange())
		}
		var trace *runtime.WorkTrace
		if o.timing == "trace" {
			var err error
			if trace, err = startWorkTrace(o.train.Backend); err != nil {
				return err
			}
			opts = append(opts, profiler.WithWorkTrace(trace))
			o.workTrace = trace
			fmt.Fprintf(stdout, "profile-run: device ranges timed from %s\n", workTraceName(o.train.Backend))
		}
		var err error
		if prof, err = profiler.New(opts...); err != nil {
			if trace != nil {
				_ = trace.Stop()
			}
			return err
		}
		defer func() {
			cctx, cancel := context.WithTimeout(in.abort, flushTimeout)
			defer cancel()
			_ = prof.Close(cctx)
			if trace != nil {
				_ = trace.Stop()
			}
		}()
	}
	var out *outputs
	if prof != nil {
		// The ranks, and so the names of their files, are known now.
		for rank := range o.train.Stages * o.train.Replicas {
			o.ranks = append(o.ranks, rank)
		}
		var err error
		if out, err = openOutputs(in.abort, o, prof, log); err != nil {
			return err
		}
		// Should a wait that no signal reaches keep profile-run past a
		// signal's grace, it ends without finishing these: it says so.
		in.onHardExit(func() {
			if msg := out.abandon(context.Cause(in.abort)); msg != "" {
				log.Warn(msg)
				_ = log.Sync()
			}
		})
		defer in.onHardExit(nil)
	}
	cfg := o.train
	cfg.Profiler = prof
	where := cfg.Backend.String()
	if pl, err := cfg.Placement(); err == nil {
		where = pl.String()
		if pl.Shared && out != nil {
			out.shared = where
		}
		if out != nil {
			out.env = trainerEnvironment(pl)
		}
	}
	fmt.Fprintf(stdout, "profile-run: training on %s: pp=%d vpp=%d dp=%d, %s of %s, %s of width %d, precision %s, schedule %s, %s\n",
		where, cfg.Stages, cfg.Chunks, cfg.Replicas, count(cfg.Microbatches, "microbatch", "microbatches"),
		count(cfg.MicrobatchSize, "row", "rows"), count(cfg.Layers, "layer", "layers"), cfg.Width, cfg.Precision, cfg.Schedule, count(cfg.Steps, "step", "steps"))
	var live func() liveCounts
	if prof != nil {
		live = out.liveCounts
	}
	pr := newProgress(o.progress, stdout, log, cfg, o.progressEvery, !o.quietSteps, live)
	trained, said := make(chan struct{}), make(chan struct{})
	go func() {
		defer close(said)
		sayStopping(in, cfg, log, trained)
	}()
	done, trainErr := trainSteps(in.stop, in.abort.Done(), cfg, pr, func(step int, err error) {
		if in.stopped() {
			return // sayStopping has said what happens
		}
		// The error is printed in full at the end, after the outputs; the
		// ranks may take -comm-timeout to stop before then.
		msg, _, _ := strings.Cut(trainError(err), "\n")
		log.Warn(fmt.Sprintf("training failed at step %d: %s; the ranks' device work gets up to -comm-timeout %v to stop, then what was recorded is written", step, msg, commTimeout(cfg)))
	})
	close(trained)
	<-said // a stop is said before what follows it
	pr.stop()
	in.trainingDone()
	var interrupted error
	// A failed or stopped run's trainer has waited for the ranks' device
	// work already, within -comm-timeout; what had not finished then is
	// not waited for again.
	cutShort := trainErr != nil || in.stopped()
	if in.stopped() {
		switch {
		case errors.Is(trainErr, pipeline.ErrStoppedNow):
			log.Warn("device work the ranks had queued was given up at the second signal")
		case errors.Is(trainErr, pipeline.ErrCommTimeout):
			// Device work that outlasted the stop's deadline is news;
			// the rest the ranks said on their way out follows from the
			// signal.
			log.Warn(fmt.Sprintf("device work the ranks had queued did not finish within -comm-timeout %v: it is abandoned", commTimeout(cfg)))
		}
		trainErr = nil
		interrupted = context.Cause(in.stop)
		next := "writing what was recorded (another signal stops at once)"
		if in.abort.Err() != nil {
			next = "writing what was recorded"
		}
		if prof == nil {
			next = "-profile off: nothing was recorded"
		}
		log.Warn(fmt.Sprintf("%v at step %d (%d of %s complete); %s", interrupted, done, done, count(cfg.Steps, "step", "steps"), next))
		if out != nil {
			out.partial = fmt.Sprintf("partial run: %v at step %d (%d of %s complete)", interrupted, done, done, count(cfg.Steps, "step", "steps"))
		}
	}
	if trainErr != nil && out != nil {
		// The error goes to stderr in full; the outputs say that the run
		// stopped and where, so that nobody takes them for a whole run.
		msg, _, _ := strings.Cut(trainError(trainErr), "\n")
		out.partial = fmt.Sprintf("partial run: training failed at step %d (%d of %s complete): %s", done, done, count(cfg.Steps, "step", "steps"), msg)
	}
	if prof == nil {
		return errors.Join(trainErr, interrupted)
	}
	// Whatever happened to training, what was recorded is written out.
	bound := flushTimeout
	if cutShort {
		bound = 0 // gather what is complete, without waiting
	}
	fctx, cancel := context.WithTimeout(in.abort, bound)
	flushErr := prof.Flush(fctx)
	abandoned := 0
	if flushErr != nil {
		// The device ranges whose device work has not finished — the
		// actions that hung, which a reader of the trace looks for —
		// are written with their host times only, marked unfinished,
		// rather than left pending and out of every output. The
		// context has ended: nothing waits for the device.
		abandoned, _ = prof.AbandonPending(fctx)
	}
	cancel()
	switch {
	case flushErr != nil && in.abort.Err() != nil:
		flushErr = fmt.Errorf("flush cut short (%v): %s", context.Cause(in.abort), unfinishedSaid(abandoned, prof.Stats().Pending))
	case flushErr != nil && cutShort:
		if abandoned > 0 || prof.Stats().Pending > 0 {
			log.Warn(fmt.Sprintf("device work had not finished when training ended: %s", unfinishedSaid(abandoned, prof.Stats().Pending)))
			flushErr = nil
		}
	case flushErr != nil && abandoned > 0:
		// Device work outlasted the flush of a run that went well.
		flushErr = fmt.Errorf("%w; %s", flushErr, unfinishedSaid(abandoned, prof.Stats().Pending))
	}
	err := errors.Join(trainErr, flushErr, out.finish(stdout), interrupted)
	if err == nil && in.signal() != nil {
		// A signal after training (during the linger, say) ended the run
		// early all the same.
		err = context.Cause(in.abort)
	}
	return err
}

// unfinishedSaid says what became of the device ranges whose device work
// had not finished at the end of the run: abandoned ones are written with
// host times only; pending ones (AbandonPending could not run: a sink
// stuck in Consume) are left out.
func unfinishedSaid(abandoned, pending int) string {
	var parts []string
	if abandoned > 0 || pending == 0 {
		parts = append(parts, fmt.Sprintf("%s written with host times only, marked unfinished (counted as device work unfinished below)",
			count(abandoned, "device range", "device ranges")))
	}
	if pending > 0 {
		parts = append(parts, fmt.Sprintf("%s left out (counted as pending below)", count(pending, "device range", "device ranges")))
	}
	return strings.Join(parts, "; ")
}

// stepFault, set by tests only, fails the run before a step: a device lost
// mid-run, which no real device does on demand.
var stepFault func(step int) error

// sayStopping says, as soon as a signal stops training, what happens
// next: the ranks stop at their next pipeline action, but device work
// they already queued must finish before its buffers are freed and its
// times read, which can take long (a step's worth of queued kernels, or
// -action-delay): it gets -comm-timeout from the signal in all (see
// pipeline.Trainer.Step and Close), then what has not finished is given
// up. Without it the terminal stays silent meanwhile.
func sayStopping(in *interrupt, cfg pipeline.Config, log *zap.Logger, trained <-chan struct{}) {
	select {
	case <-in.stop.Done():
	case <-trained:
		// Training may have ended because of the signal, its ranks
		// quicker than this goroutine: it is still said, first.
	}
	if !in.stopped() {
		return
	}
	timeout := commTimeout(cfg)
	what := signalName(in.signal())
	if in.signal() == syscall.SIGPIPE {
		what = "the reader of profile-run's output has gone (SIGPIPE)"
	}
	then := ", then what was recorded is written (what has not finished by then with host times only, marked unfinished)"
	if cfg.Profiler == nil {
		then = "" // -profile off: nothing is
	}
	log.Warn(fmt.Sprintf("%s: stopping training at the next pipeline action; device work already queued gets up to -comm-timeout %v to finish%s; another signal gives that work up and stops at once",
		what, timeout, then))
}

// commTimeout is cfg's CommTimeout, or the default where it is 0.
func commTimeout(cfg pipeline.Config) time.Duration {
	if cfg.CommTimeout <= 0 {
		return pipeline.DefaultCommTimeout
	}
	return cfg.CommTimeout
}

// trainSteps runs cfg's steps, reporting each to pr as it finishes, until
// they are done, one fails, or ctx ends. A step that fails is passed to
// failed before the trainer is closed (which waits for the ranks' device
// work). Once now is closed (a second signal) the device work the ranks
// queued is given up at once (Trainer.StopNow) instead of getting
// -comm-timeout. It returns the number of steps completed.
func trainSteps(ctx context.Context, now <-chan struct{}, cfg pipeline.Config, pr *progress, failed func(step int, err error)) (int, error) {
	tr, err := pipeline.NewTrainer(ctx, cfg)
	if err != nil {
		return 0, err
	}
	finished := make(chan struct{})
	defer close(finished)
	go func() {
		select {
		case <-now:
			tr.StopNow()
		case <-finished:
		}
	}()
	done := 0
	for done < cfg.Steps {
		if stepFault != nil {
			if err := stepFault(done); err != nil {
				failed(done, err)
				return done, errors.Join(err, tr.Close())
			}
		}
		sr, err := tr.Step(ctx)
		if err != nil {
			failed(done, err)
			return done, errors.Join(err, tr.Close())
		}
		done++
		pr.stepDone(sr)
	}
	return done, tr.Close()
}

// peakSource says what a run's peak device memory figures measure.
type peakSource struct {
	// note gives, per rank, what the figure measures ("" or nil for the
	// built-in trainer's: its buffers, from the runtime's allocator).
	note func(rank int) string
	// atLeast holds per rank a peak seen outside every record (an
	// imported trace's memory events outside its top-level ranges): the
	// report's all-steps figure is at least this.
	atLeast map[int]int64
	// cycle is what the collectives' cycle says of a job that marks no
	// steps (cycle.Result.Lines), for the report file's collectives
	// section; the screen has it on its summary's cycle: line.
	cycle string
	// cycleRuns is the table of every rank's cycles over the run
	// (cycle.Result.RunsTable), for the report file.
	cycleRuns string
}

// writeReports prints the all-steps summary on stdout and writes it to f,
// either of them nil to skip it, and writes one file per rank beside f with
// per-step tables and the per-call log of the detail records.
func writeReports(stdout io.Writer, f *os.File, tables *profiler.Summary, steps *profiler.StepSummary, pipe *analysis.Summary, detail []profiler.Record, by profiler.SortKey, ideal float64, header, rankHeader []string, src peakSource, aopts ...analysis.ReportOption) (paths []string, fileErr, screenErr error) {
	groups, peaks := tables.Groups(), tables.Peaks()
	if peaks == nil {
		peaks = map[int]int64{}
	}
	for rank, b := range src.atLeast {
		if _, ok := peaks[rank]; ok || b > 0 {
			peaks[rank] = max(peaks[rank], b)
		}
	}
	var opts []profiler.ReportOption
	if src.note != nil {
		opts = append(opts, profiler.WithPeakNote(src.note))
	}
	times := steps.Ranks()
	breakdown := steps.Breakdown()
	// The screen gets one table per tag for all ranks where a table per
	// rank would run to hundreds of lines; the file keeps each rank's.
	screenGroups, screenNote, screenRows := groups, "", 0
	if ranks := rankCount(groups); ranks > listEach {
		screenGroups = profiler.MergeRanks(groups)
		screenNote = fmt.Sprintf("the %d ranks' tables summed, one per tag; each rank's is in the report file", ranks)
		if f == nil {
			screenNote = fmt.Sprintf("the %d ranks' tables summed, one per tag (each rank's goes to the report file, not written: -report off)", ranks)
		}
		if ranks > screenRankRows {
			// The per-rank lines below, likewise: those of the ranks
			// that stand out, every rank's in the file.
			screenRows = screenRankRows
			screenNote += fmt.Sprintf(", as are all the per-rank lines of the tables below, which show %d", screenRows)
		}
	}
	write := func(w io.Writer, groups []profiler.Group, note string, rows int) error {
		for _, h := range header {
			fmt.Fprintln(w, h)
		}
		if note != "" {
			fmt.Fprintln(w, note)
		}
		if err := profiler.WriteReport(w, groups, peaks, by, opts...); err != nil {
			return fmt.Errorf("report: %w", err)
		}
		if len(breakdown) > 0 {
			fmt.Fprintf(w, "\n=== where the steps went (%s) ===\n", profiler.BusyDefinition)
			if err := profiler.WriteStepBreakdown(w, breakdown, ideal, profiler.WithRankRows(rows)); err != nil {
				return fmt.Errorf("report: %w", err)
			}
			fmt.Fprintf(w, "\n=== step times, all steps (nearest-rank quantiles within %.0f%%) ===\n", 100*profiler.StepQuantileAccuracy)
			if err := profiler.WriteStepTimes(w, times, profiler.WithRankRows(rows)); err != nil {
				return fmt.Errorf("report: %w", err)
			}
		}
		switch {
		case pipe != nil && pipe.Stepless && pipe.Collectives.Matched+pipe.Collectives.Incomplete > 0:
			fmt.Fprintln(w, "\n=== collectives across ranks: skew, waiting, stragglers, clocks (docs/analysis.md) ===")
			if err := analysis.WriteReport(w, *pipe, append(slices.Clip(aopts), analysis.WithRankRows(rows))...); err != nil {
				return fmt.Errorf("report: %w", err)
			}
			if w != stdout && src.cycle != "" {
				fmt.Fprintf(w, "%s\n", src.cycle)
			}
			if w != stdout && src.cycleRuns != "" {
				fmt.Fprintf(w, "\n=== cycles of the collectives over the run, by rank (nearest-rank quantiles within %.0f%%; docs/wrap.md) ===\n%s", 100*cycle.QuantileAccuracy, src.cycleRuns)
			}
		case pipe != nil && pipe.Steps > 0:
			fmt.Fprintln(w, "\n=== pipeline analysis: bubbles, overlap, collectives, stragglers (docs/analysis.md) ===")
			if err := analysis.WriteReport(w, *pipe, append(slices.Clip(aopts), analysis.WithRankRows(rows))...); err != nil {
				return fmt.Errorf("report: %w", err)
			}
		}
		return nil
	}
	// The summary on stdout and the files are independent: a stdout that
	// fails (a full disk under a redirect, a closed pipe) loses the
	// summary, never the files.
	if stdout != nil {
		if _, err := fmt.Fprintln(stdout); err != nil {
			screenErr = fmt.Errorf("summary on stdout: %w", err)
		} else if err := write(stdout, screenGroups, screenNote, screenRows); err != nil {
			screenErr = fmt.Errorf("summary on stdout: %w", err)
		}
	}
	if f == nil {
		return nil, nil, screenErr
	}
	if err := write(f, groups, "", 0); err != nil {
		return nil, err, screenErr
	}
	paths, fileErr = profiler.WriteRankFiles(rankReportPrefix(f.Name()), detail, by, rankHeader, opts...)
	return paths, fileErr, screenErr
}

// screenRankRows is how many ranks' lines the per-rank tables on the
// screen show when there are more ranks.
const screenRankRows = 16

// rankCount is the number of ranks among groups.
func rankCount(groups []profiler.Group) int {
	seen := map[int]bool{}
	for _, g := range groups {
		seen[g.Rank] = true
	}
	return len(seen)
}

// count is n with its noun: "1 step", "8 steps". Any integer type: the
// statistics it counts are ints and uint64s.
func count[N int | int64 | uint64](n N, one, many string) string {
	if n == 1 {
		return "1 " + one
	}
	return fmt.Sprint(n) + " " + many
}
