package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"math"
	"net"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"go.uber.org/zap"

	"github.com/trainscope/trainscope/exporters/chrometrace"
	"github.com/trainscope/trainscope/exporters/htmlreport"
	"github.com/trainscope/trainscope/exporters/jsonsummary"
	"github.com/trainscope/trainscope/exporters/otel"
	"github.com/trainscope/trainscope/exporters/pprof"
	"github.com/trainscope/trainscope/exporters/prom"
	"github.com/trainscope/trainscope/internal/ncclplugin"
	"github.com/trainscope/trainscope/profiler"
	"github.com/trainscope/trainscope/profiler/analysis"
	"github.com/trainscope/trainscope/profiler/cycle"
)

// closeTimeout bounds each exporter's shutdown at the end of a run.
const closeTimeout = 15 * time.Second

// stepsOrCalls feeds an imported profile's or a wrapped command's records
// to both analyses and reports the steps' where any step is complete (the
// labels it needs are there: a wrapped command's NVTX step ranges), else
// the collectives matched without steps.
type stepsOrCalls struct {
	steps *analysis.Sink
	calls *analysis.CallSink
	// What the step analysis needs, seen in any record: a step range
	// (profiler.StepName) to measure a step by, and device work labelled
	// with a pipeline phase to account its busy time. A Kineto trace whose
	// ProfilerStep#N ranges lie inside another range has neither: they
	// only label its steps.
	stepRange, phases atomic.Bool
}

// detailBound is the most records the trace and the per-step tables
// keep; 0: the profiler's default (profiler.NewWindow). Tests lower it.
var detailBound = 0

func (a *stepsOrCalls) Consume(batch []profiler.Record) {
	if !a.stepRange.Load() || !a.phases.Load() {
		for i := range batch {
			r := &batch[i]
			if r.Depth == 0 && r.Name == profiler.StepName {
				a.stepRange.Store(true)
			}
			if r.HasDevice && (r.Phase == profiler.Forward || r.Phase == profiler.Backward || r.Phase == profiler.Optimizer) {
				a.phases.Store(true)
			}
		}
	}
	a.steps.Consume(batch)
	a.calls.Consume(batch)
}

// unaccountable says why no labelled step can be accounted when the
// records carry step labels and nothing else the step analysis needs —
// no step range and no pipeline phase, as a Kineto trace's whose steps lie
// inside another range — so that one
// line says so, not a "no step range" per step and rank. "" otherwise:
// the step analysis's own problems then say what went wrong.
func (a *stepsOrCalls) unaccountable(steps int) string {
	if a.phases.Load() || a.stepRange.Load() {
		return ""
	}
	labelled := "1 step"
	if steps != 1 {
		labelled = fmt.Sprintf("%d steps", steps)
	}
	return fmt.Sprintf("the steps cannot be accounted: the records label %s but carry no pipeline phase (forward, backward or optimizer) on their device work and no %q range to measure a step by, as in a Kineto trace whose ProfilerStep#N ranges lie inside another range (they label the steps; a step range is top-level)", labelled, profiler.StepName)
}

// ExpectRanks has the step analysis wait for n ranks.
func (a *stepsOrCalls) ExpectRanks(n int) { a.steps.ExpectRanks(n) }

// ConsumeLost tells the step analysis of ranges dropped while recording
// (profiler.LostSink).
func (a *stepsOrCalls) ConsumeLost(lost []profiler.Lost) { a.steps.ConsumeLost(lost) }

func (a *stepsOrCalls) Flush() {
	a.steps.Flush()
	a.calls.Flush()
}

// Shutdown flushes both; Profiler.Close calls it after the last delivery.
func (a *stepsOrCalls) Shutdown(ctx context.Context) error {
	return errors.Join(a.steps.Shutdown(ctx), a.calls.Shutdown(ctx))
}

func (a *stepsOrCalls) Summary() analysis.Summary {
	s := a.steps.Summary()
	if s.Complete > 0 {
		return s
	}
	if c := a.calls.Summary(); c.Collectives.Matched+c.Collectives.Incomplete > 0 {
		if s.Steps > 0 {
			line := fmt.Sprintf("the step analysis found no complete step of %d (first problem: %s): the collectives are matched without steps", s.Steps, firstOr(s.Problems, "none"))
			if why := a.unaccountable(s.Steps); why != "" {
				line = why + "; the collectives are matched without steps"
			}
			c.Problems = append([]string{line}, c.Problems...)
		}
		return c
	}
	return s
}

// expectRanks has the pipeline analysis wait for n ranks before it
// accounts a step: a wrapped job's launcher's number of processes on this
// host, learnt as they connect.
func (out *outputs) expectRanks(n int) {
	if e, ok := out.pipe.(interface{ ExpectRanks(int) }); ok {
		e.ExpectRanks(n)
	}
}

func firstOr(list []string, or string) string {
	if len(list) == 0 {
		return or
	}
	return list[0]
}

// pipeAnalysis is the analysis a run's records feed: per step for the
// built-in trainer (analysis.Sink), per collective for a wrapped command
// (analysis.CallSink).
type pipeAnalysis interface {
	profiler.Sink
	Flush()
	Summary() analysis.Summary
}

// outputs are the destinations of one run's records: files opened at start
// (so an unwritable path fails before training), the live /metrics
// endpoint, and what is pushed at the end.
type outputs struct {
	o      *options
	runID  string
	runDir string // "" unless a file goes into the run directory
	// madeDirs are the -out directories made for the run directory,
	// innermost first: removed with it when it is (removeRunDir).
	madeDirs []string
	prof     *profiler.Profiler
	log      *zap.Logger
	abort    context.Context // every wait at the end also ends with it (interrupt.abort)
	// partial, when set, says why the run is incomplete ("interrupted by
	// SIGINT at step 46"); every output says it.
	partial string
	// shared is the trainer's placement where ranks share devices ("2
	// ranks sharing 1 cuda device (in-process collectives)"), for the
	// report's stage balance; empty otherwise.
	shared string
	// env is what the run ran on (trainerEnvironment,
	// wrappedEnvironment); nil for an import, whose summary names this
	// build only.
	env *jsonsummary.Environment

	report, pprofFile, traceFile *os.File
	detail                       *profiler.Window // the steps the trace and the per-call logs cover

	// Whole-run summaries, kept as records arrive in bounded memory.
	tables *profiler.Summary     // the report's all-steps tables
	steps  *profiler.StepSummary // the step breakdown and step-time distribution
	pipe   pipeAnalysis          // bubbles, overlap, collectives, stragglers
	// stepSpans is spans once it exists: the analysis sink, added before
	// it, reads it from the profiler's collector.
	stepSpans atomic.Pointer[otel.Exporter]
	profile   *pprof.Aggregate  // the pprof profile
	calls     *profiler.CallLog // every call, per rank, as it finishes
	// cycles keeps a wrapped command's or an import's latest collectives
	// per rank, for the cycle they repeat: the step of a job that marks
	// none.
	cycles *cycle.Sink
	cycle  *cycle.Result // cycles' result at the end (cycleResult)

	metrics     *prom.Exporter
	metricsAddr net.Addr
	spans       *otel.Exporter

	summary []string // one line per destination, for the end of the run

	// For a hard exit (abandon), which may come while the files are
	// being written: the paths of report, pprof and trace as created at
	// open, and each file written whole so far.
	created    []string
	reportPath string // "" with -report off
	wholeMu    sync.Mutex
	wholeDone  map[string]bool
}

// cycleResult is the cycle of the run's collectives (cycle.Sink.Result),
// searched once the records are all in (after the last Flush) and kept;
// nil for a run that does not look for one (the built-in trainer's).
func (out *outputs) cycleResult() *cycle.Result {
	if out.cycles == nil {
		return nil
	}
	if out.cycle == nil {
		out.cycles.Finish()
		res := out.cycles.Result()
		out.cycle = &res
	}
	return out.cycle
}

// resolvePath applies a file flag's convention: "" is the default name in
// the run directory, "off" is no file.
func resolvePath(flagValue, runDir, defaultName string) string {
	switch flagValue {
	case "off":
		return ""
	case "":
		return filepath.Join(runDir, defaultName)
	}
	return flagValue
}

// createFile creates path for flag what, never over an existing file: one
// there is a usage error naming it.
func createFile(what, path string) (*os.File, error) {
	if path == "" {
		return nil, nil
	}
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o644)
	if errors.Is(err, fs.ErrExist) {
		if fi, serr := os.Stat(path); serr == nil && fi.IsDir() {
			return nil, usagef("%s %s: a directory: name a file (in it, say: %s)", what, path, filepath.Join(path, filepath.Base(defaultName(what))))
		}
		return nil, usagef("%s %s: the file exists: profile-run never replaces a file; name another path", what, path)
	}
	switch {
	case errors.Is(err, fs.ErrNotExist):
		return nil, usagef("%s %s: the directory %s does not exist: create it, or name a file in one that does", what, path, filepath.Dir(path))
	case errors.Is(err, syscall.ENOTDIR):
		return nil, usagef("%s %s: a part of the path above the file is not a directory", what, path)
	case err != nil:
		return nil, fmt.Errorf("%s: %w", what, err)
	}
	return f, nil
}

// defaultName is the file an output flag names in the run directory by
// default.
func defaultName(what string) string {
	switch what {
	case "-report":
		return "report.txt"
	case "-pprof":
		return "profile.pb.gz"
	case "-trace":
		return "trace.json"
	}
	return strings.TrimPrefix(what, "-")
}

// rankReportPrefix is where the per-rank reports go beside the report
// file: <prefix>.rank<N> (report.txt: report.rank0, …).
func rankReportPrefix(report string) string {
	return strings.TrimSuffix(report, filepath.Ext(report))
}

// callLogLimit is -call-log-size in bytes: a size beyond what 63 bits
// of bytes hold caps nothing (shifted, it would wrap to a small cap, or
// to 0, no cap at all, by chance).
func callLogLimit(mib int) int64 {
	if int64(mib) > math.MaxInt64>>20 {
		return math.MaxInt64
	}
	return int64(mib) << 20
}

// callLogPrefix is where the per-rank call logs go beside the report
// file: <dir>/calls.rank<N>.gz.
func callLogPrefix(report string) string {
	return filepath.Join(filepath.Dir(report), "calls")
}

// checkRankFiles refuses, before anything runs, a report path whose
// per-rank files would land on existing ones (the files being imported,
// an earlier run's): the ranks are known now, the names too. Ranks known
// only later (a wrapped command's) are still never written over: each
// file is created exclusively when it is written.
func checkRankFiles(o *options, report string) error {
	calls := profiler.NewCallLog(callLogPrefix(report), 0) // for its names; opens nothing
	for _, rank := range o.ranks {
		path := fmt.Sprintf("%s.rank%d", rankReportPrefix(report), rank)
		if fileExists(path) {
			return usagef("-report %s: %s exists, where rank %d's report goes (<report without extension>.rank<N>): profile-run never replaces a file; name another -report path", report, path, rank)
		}
		if o.callLogMiB == 0 {
			continue
		}
		if path := calls.Path(rank); fileExists(path) {
			return usagef("-report %s: %s exists, where rank %d's call log goes (calls.rank<N>.gz beside the report): profile-run never replaces a file; name a -report path in another directory, or -call-log-size 0", report, path, rank)
		}
	}
	return nil
}

// checkClashes refuses, before any file is made, two outputs on one
// path: -report, -pprof and -trace, and the files beside the report
// (<report without extension>.rank<N>, calls.rank<N>.gz), whatever the
// ranks turn out to be. Each file is created exclusively, so a clash
// would otherwise surface as "the file exists", for a file profile-run
// had just made, or — for a rank's file, written at the end — after the
// whole run.
func checkClashes(o *options, report, pprofPath, tracePath string) error {
	abs := func(p string) string {
		if a, err := filepath.Abs(p); err == nil {
			return a
		}
		return filepath.Clean(p)
	}
	named := []struct{ what, path string }{{"-report", report}, {"-pprof", pprofPath}, {"-trace", tracePath}}
	for i, a := range named {
		if a.path == "" {
			continue
		}
		for _, b := range named[i+1:] {
			if b.path != "" && abs(a.path) == abs(b.path) {
				return usagef("%s %s and %s %s name the same file; give each output its own path", a.what, a.path, b.what, b.path)
			}
		}
	}
	if report == "" {
		return nil
	}
	rankPrefix := abs(rankReportPrefix(report)) + ".rank"
	callPrefix := abs(callLogPrefix(report)) + ".rank"
	for _, x := range named[1:] {
		if x.path == "" {
			continue
		}
		p := abs(x.path)
		if n, ok := strings.CutPrefix(p, rankPrefix); ok && digits(n) {
			return usagef("%s %s is where rank %s's report goes beside -report %s (<report without extension>.rank<N>); give each output its own path", x.what, x.path, n, report)
		}
		if n, ok := strings.CutPrefix(p, callPrefix); ok && o.callLogMiB > 0 && digits(strings.TrimSuffix(n, ".gz")) && strings.HasSuffix(n, ".gz") {
			return usagef("%s %s is where rank %s's call log goes beside -report %s (calls.rank<N>.gz); give each output its own path, or -call-log-size 0", x.what, x.path, strings.TrimSuffix(n, ".gz"), report)
		}
	}
	return nil
}

// digits reports whether s is a non-empty run of decimal digits.
func digits(s string) bool {
	if s == "" {
		return false
	}
	for _, c := range s {
		if c < '0' || c > '9' {
			return false
		}
	}
	return true
}

func fileExists(path string) bool {
	_, err := os.Lstat(path)
	return err == nil
}

// unalignedText says which ranks' clocks an import left as recorded.
func unalignedText(a *analysis.Offsets) string {
	if a.Reference == profiler.None {
		return "not aligned: every file's clock as recorded"
	}
	return "not aligned: " + ranksText(slices.Sorted(slices.Values(a.Unaligned))) + " as recorded"
}

// unalignedRanks reads back what unalignedText wrote into a trace: of
// ranks, those whose clocks the import that wrote it left as recorded.
func unalignedRanks(text string, ranks []int) []int {
	list, ok := strings.CutPrefix(text, "not aligned: ")
	if !ok {
		return nil
	}
	if list == "every file's clock as recorded" {
		return ranks
	}
	list, _ = strings.CutSuffix(list, " as recorded")
	list, ok = strings.CutPrefix(list, "rank ")
	if !ok {
		list, _ = strings.CutPrefix(list, "ranks ")
	}
	var unaligned []int
	for _, f := range strings.Split(list, ", ") {
		if r, err := strconv.Atoi(f); err == nil && slices.Contains(ranks, r) {
			unaligned = append(unaligned, r)
		}
	}
	return unaligned
}

// openOutputs prepares every destination. File problems are errors, and
// leave nothing behind: no file, no run directory. Network problems (a
// port in use) are warnings: training goes on.
func openOutputs(abort context.Context, o *options, prof *profiler.Profiler, log *zap.Logger) (*outputs, error) {
	out := &outputs{o: o, prof: prof, log: log, abort: abort}
	var err error
	// The run directory is made only when a file goes into it.
	if o.report == "" || o.pprofPath == "" || o.tracePath == "" {
		if out.runDir, out.madeDirs, err = makeRunDir(o.outDir); err != nil {
			removeEmpty(out.madeDirs)
			return nil, err
		}
		out.runID = filepath.Base(out.runDir)
	} else {
		out.runID = newRunID()
	}
	files := []struct {
		dst        **os.File
		what, path string
	}{
		{&out.report, "-report", resolvePath(o.report, out.runDir, "report.txt")},
		{&out.pprofFile, "-pprof", resolvePath(o.pprofPath, out.runDir, "profile.pb.gz")},
		{&out.traceFile, "-trace", resolvePath(o.tracePath, out.runDir, "trace.json")},
	}
	if err := checkClashes(o, files[0].path, files[1].path, files[2].path); err != nil {
		out.discard()
		return nil, err
	}
	for _, f := range files {
		if *f.dst, err = createFile(f.what, f.path); err != nil {
			out.discard()
			return nil, err
		}
		if *f.dst != nil {
			out.created = append(out.created, f.path)
		}
	}
	if out.report != nil {
		out.reportPath = out.report.Name()
	}
	if out.report != nil {
		if err := checkRankFiles(o, out.report.Name()); err != nil {
			out.discard()
			return nil, err
		}
	}
	var sinks []profiler.Sink
	if out.traceFile != nil || out.report != nil {
		out.detail = profiler.NewWindow(o.detail, detailBound)
		sinks = append(sinks, out.detail)
	}
	if out.report != nil || !o.quiet {
		tag := "all steps"
		if len(o.command) > 0 {
			tag = "whole run" // a wrapped command's steps, if it marks any, are not known ahead
		}
		out.tables = profiler.NewSummary(profiler.WithSummaryTag(tag))
		out.steps = profiler.NewStepSummary()
		sinks = append(sinks, out.tables, out.steps)
	}
	if out.pprofFile != nil {
		out.profile = pprof.NewAggregate()
		sinks = append(sinks, out.profile)
	}
	// The pipeline analysis: the report's section, the metrics, and each
	// step for the profile's step_time and the analysis spans. A wrapped
	// command's operations carry steps only where the job marks them with
	// NVTX; imported profiles, where they carry the labels the step
	// analysis needs. Both get both analyses: the steps where any is
	// complete, else the collectives matched across ranks as they come.
	// Clocks are aligned by collective departures for several imported
	// files (one clock per file); a wrapped command's processes all run on
	// this host, on its clock (the plugin reaches the collector through a
	// local socket).
	out.pipe = newPipeAnalysis(o, out.stepAnalysed)
	sinks = append(sinks, out.pipe)
	if out.report != nil && o.callLogMiB > 0 {
		out.calls = profiler.NewCallLog(callLogPrefix(out.report.Name()), callLogLimit(o.callLogMiB))
		sinks = append(sinks, out.calls)
	}
	if len(o.command) > 0 || o.importing > 0 {
		out.cycles = cycle.NewSink(0)
		sinks = append(sinks, out.cycles)
	}
	for _, sk := range sinks {
		if err := prof.AddSink(sk); err != nil {
			out.discard()
			return nil, err
		}
	}
	if o.otlpEndpoint != "" || otel.EnvEndpoint() != "" {
		cfg := otel.Config{
			Epoch:       prof.Epoch(),
			RunID:       out.runID,
			Endpoint:    o.otlpEndpoint,
			Protocol:    o.otlpProtocol,
			Insecure:    o.otlpInsecure || loopbackHostPort(o.otlpEndpoint),
			ServiceName: o.serviceName,
		}
		if out.cycles != nil {
			// A job that marks no steps gets a trace per cycle of its
			// collectives, not one trace of the whole run.
			cfg.Cycles = out.cycles
		}
		out.spans, err = otel.New(context.Background(), prof, cfg, otel.WithLogger(log.Named("otel")))
		if err != nil {
			out.discard()
			return nil, &usageError{err.Error()}
		}
		out.stepSpans.Store(out.spans)
		log.Info("sending spans over OTLP", zap.String("protocol", out.spans.Protocol()), zap.String("endpoint", out.spans.Endpoint()))
	}
	if o.otlpProtocol != "" && out.spans == nil {
		log.Warn("-otlp-protocol " + o.otlpProtocol + " has no effect: spans are sent only with -otlp-endpoint or OTEL_EXPORTER_OTLP_ENDPOINT")
	}
	if o.metricsAddr != "off" || o.pushgateway != "" {
		popts := []prom.Option{prom.WithRunID(out.runID), prom.WithDetail(o.metricsDetail), prom.WithLogger(log.Named("prom"))}
		if out.spans != nil {
			// Step and collective times link to the sampled steps' traces.
			popts = append(popts, prom.WithStepTraces(out.spans.StepTrace))
		}
		if out.metrics, err = prom.New(prof, popts...); err != nil {
			out.discard()
			return nil, err
		}
		// The pipeline analysis's totals, mapped at scrape time.
		if err := out.metrics.Register(prom.NewAnalysisCollector(out.pipe)); err != nil {
			out.discard()
			return nil, err
		}
		// A wrapped command's cycle of collectives, its step where it
		// marks none.
		if out.cycles != nil {
			if err := out.metrics.Register(prom.NewCycleCollector(out.cycles, 0)); err != nil {
				out.discard()
				return nil, err
			}
		}
		if out.spans != nil {
			spans := out.spans
			err := out.metrics.AddDelivery("otel", prom.DeliveryFunc(func() prom.Delivery {
				s := spans.Stats()
				return prom.Delivery{Delivered: s.Exported, Failed: s.Failed, Dropped: s.Dropped, Unsampled: s.Unsampled}
			}))
			if err != nil {
				out.discard()
				return nil, err
			}
		}
	}
	if o.metricsAddr != "off" {
		if out.metricsAddr, err = out.metrics.Serve(o.metricsAddr); err != nil {
			log.Warn("not serving /metrics; training goes on", zap.Error(err))
			out.summary = append(out.summary, fmt.Sprintf("metrics: not served: %v", err))
		} else {
			log.Info("serving Prometheus metrics", zap.String("url", "http://"+out.metricsAddr.String()+"/metrics"))
		}
	}
	return out, nil
}

// newPipeAnalysis is the pipeline analysis for o's records, calling
// stepAnalysed with each step analysed.
func newPipeAnalysis(o *options, stepAnalysed func(*analysis.Step)) pipeAnalysis {
	switch {
	case len(o.command) > 0 || o.importing > 0:
		var align, clocks, sched analysis.Option
		switch {
		case o.importing > 1:
			align = analysis.WithClockAlignment()
		case len(o.command) > 0:
			align = analysis.WithOneClock()
		}
		if o.clocks != nil {
			clocks = analysis.WithClockDomains(o.clocks)
		}
		if o.schedMB > 0 {
			sched = analysis.WithSchedule(o.schedChunks, o.schedMB)
		}
		// A wrapped command's step ranges are held back until their
		// kernels have come (half a second of GPU time and more), while
		// the records of later steps flow: at 13 ms a step, 16 open steps
		// were too few, and steps were analysed without their ranges.
		var open analysis.Option // the default: 16
		if len(o.command) > 0 {
			open = analysis.WithMaxOpenSteps(ncclplugin.MaxHeldSteps)
		}
		if o.applied != nil {
			// import aligned the records before they came.
			align = analysis.WithAppliedOffsets(*o.applied)
		}
		return &stepsOrCalls{
			steps: analysis.NewSink(analysis.WithStepFunc(stepAnalysed), align, clocks, sched, open),
			calls: analysis.NewCallSink(align, clocks),
		}
	default:
		return analysis.NewSink(analysis.WithStepFunc(stepAnalysed))
	}
}

// lostStepsText says which steps of the window were left out whole for
// ranges dropped while recording; "" where none was.
func lostStepsText(st profiler.WindowStats) string {
	if st.LostText() == "" {
		return ""
	}
	if st.LostFirst == st.LostLast {
		return fmt.Sprintf(" (%s left out whole: it lost ranges while recording)", st.LostText())
	}
	return fmt.Sprintf(" (of %s, those that lost ranges while recording left out whole)", st.LostText())
}

func (out *outputs) files() []*os.File {
	return []*os.File{out.report, out.pprofFile, out.traceFile}
}

func (out *outputs) closeFiles() {
	for _, f := range out.files() {
		if f != nil {
			_ = f.Close()
		}
	}
}

// removeFiles closes and removes every file openOutputs created, and the
// run directory: for a run that stops before it writes anything.
func (out *outputs) removeFiles() {
	out.closeFiles()
	for _, f := range out.files() {
		if f != nil {
			_ = os.Remove(f.Name())
		}
	}
	out.report, out.pprofFile, out.traceFile = nil, nil, nil
	if out.runDir != "" {
		out.removeRunDir() // only if empty: never what someone else put there
	}
}

// removeRunDir removes the run directory if it is empty, and then the
// -out directories made for it that are empty too; it reports whether
// the run directory went.
func (out *outputs) removeRunDir() bool {
	if os.Remove(out.runDir) != nil {
		return false
	}
	removeEmpty(out.madeDirs)
	return true
}

// removeEmpty removes dirs, innermost first, each only if empty.
func removeEmpty(dirs []string) {
	for _, d := range dirs {
		if os.Remove(d) != nil {
			return
		}
	}
}

// dropTrace closes and removes a trace file that could not be written
// whole: half a trace, or an empty one, is no trace.
func (out *outputs) dropTrace() {
	_ = out.traceFile.Close()
	_ = os.Remove(out.traceFile.Name())
	out.traceFile = nil
}

// discard undoes openOutputs when a destination cannot be prepared.
func (out *outputs) discard() {
	out.removeFiles()
	if out.spans != nil {
		ctx, cancel := context.WithTimeout(out.abort, closeTimeout)
		_ = out.spans.Shutdown(ctx)
		cancel()
	}
}

// finish writes the file outputs from the flushed profiler, pushes and
// closes the network ones, and prints the summary. Training's own outcome
// is not its business: a destination that fails is reported, and returned.
func (out *outputs) finish(stdout io.Writer) error {
	// The trace window's records, copied once for the rank files and the
	// trace (a copy of up to 262,144 records, tens of MB, and a sort).
	var windowRecs []profiler.Record
	windowRecords := func() []profiler.Record {
		if windowRecs == nil {
			windowRecs = out.detail.Records()
		}
		return windowRecs
	}
	defer out.closeFiles()
	collected := out.prof.Stats().Collected
	var errs []error
	if collected == 0 {
		// The run failed before recording anything, or a wrapped command
		// used no NCCL: empty files and an empty run directory would only
		// look like a result. The run directory was announced at the
		// start (where a wrapped command's outputs go): say it is gone.
		files := out.report != nil || out.pprofFile != nil || out.traceFile != nil
		out.removeFiles()
		if files {
			line := "files: nothing was recorded, so none were written"
			if out.runDir != "" {
				if _, err := os.Stat(out.runDir); errors.Is(err, fs.ErrNotExist) {
					line += ", and the run directory " + out.runDir + " was removed"
				}
			}
			out.summary = append(out.summary, line)
		}
	}
	// -report off skips the files, -quiet the summary on stdout.
	var screen io.Writer
	if !out.o.quiet {
		screen = stdout
	}
	if collected > 0 && out.tables != nil {
		c := out.o.train
		var header []string
		if out.partial != "" {
			header = append(header, out.partial)
		}
		var detail []profiler.Record
		var rankHeader []string
		if out.report != nil {
			detail = windowRecords()
			st := out.detail.Stats()
			if covers := st.Covers(); len(out.o.command) > 0 && covers == "no steps" {
				// A job that marks no steps: the window keeps the first
				// records, up to its bound.
				rankHeader = append(slices.Clone(header), fmt.Sprintf("the wrapped command's NCCL operations, kernels and NVTX ranges: the first %d are listed, %d more left out", len(detail), st.Outside+st.Full))
			} else if len(out.o.command) > 0 {
				line := fmt.Sprintf("the wrapped command's NCCL operations, kernels and NVTX ranges of %s (-trace-steps %s) and outside every step; %s of other steps left out (all ranks')", covers, out.o.detail, count(st.Outside+st.Full, "record", "records"))
				if st.CutText() != "" {
					line += fmt.Sprintf(" (%s whole: beyond the %d records kept)", st.CutText(), out.detail.Bound())
				}
				line += lostStepsText(st)
				rankHeader = append(slices.Clone(header), line)
			} else {
				line := fmt.Sprintf("per-step tables and calls cover %s (-trace-steps %s); %s of other steps left out (all ranks')", st.Covers(), out.o.detail, count(st.Outside+st.Full, "record", "records"))
				if st.CutText() != "" {
					line += fmt.Sprintf(" (%s whole: beyond the %d records kept)", st.CutText(), out.detail.Bound())
				}
				line += lostStepsText(st)
				rankHeader = append(slices.Clone(header), line)
			}
		}
		out.pipe.Flush() // the last steps wait for no later ones now
		pipe := out.pipe.Summary()
		ideal := c.IdealBubble()
		if len(out.o.command) > 0 || out.o.importing > 0 {
			ideal = 0 // the schedule is not the built-in trainer's, nor known
		}
		src := out.o.peaks
		if res := out.cycleResult(); res != nil && !anySteps(out.steps) {
			src.cycle, src.cycleRuns = res.Lines(), res.RunsTable()
		}
		paths, err, screenErr := writeReports(screen, out.report, out.tables, out.steps, &pipe, detail, out.o.sortBy, ideal, header, rankHeader, src,
			analysis.WithSharedDevices(out.shared))
		errs = append(errs, err, screenErr)
		out.whole(paths...) // those listed are whole, error or not
		if out.report != nil && err == nil {
			out.whole(out.report.Name())
		}
		if out.report != nil {
			line := fmt.Sprintf("report: %s → %s", count(collected, "record", "records"), out.report.Name())
			if err != nil {
				line += fmt.Sprintf(": INCOMPLETE: %v", err) // the report, or a rank's file (those listed are whole)
			}
			out.summary = append(out.summary, line)
			if len(paths) > listEach {
				// One line per rank is thousands of lines in a large
				// job's summary: the first and last say where they are.
				out.summary = append(out.summary, fmt.Sprintf("        %s … %s (%d files, one per rank)", paths[0], filepath.Base(paths[len(paths)-1]), len(paths)))
			} else {
				for _, p := range paths {
					out.summary = append(out.summary, "        "+p)
				}
			}
			if err == nil && len(paths) == 0 && collected > 0 {
				// The per-rank files hold the steps the trace keeps.
				out.summary = append(out.summary, fmt.Sprintf("        report.rank<N>: not written: no records in the steps -trace-steps %s covers", out.o.detail))
			}
			if out.runDir != "" && filepath.Dir(out.report.Name()) == out.runDir {
				errs = append(errs, out.writeJSONSummary(&pipe))
			}
		}
	}
	if out.pprofFile != nil {
		out.pipe.Flush() // the last steps' step_time
		opts := []pprof.Option{pprof.WithEpoch(out.prof.Epoch())}
		if out.partial != "" {
			opts = append(opts, pprof.WithComment(out.partial))
		}
		st, err := out.profile.Write(out.pprofFile, opts...)
		if err == nil {
			err = out.pprofFile.Close() // a full disk may say so only here
		}
		if err != nil {
			// A profile cut short is no profile: gzip and protobuf read
			// nothing of it. It goes, as a trace cut short does.
			out.summary = append(out.summary, fmt.Sprintf("pprof: not written: %v", err))
			_ = os.Remove(out.pprofFile.Name())
			out.pprofFile = nil
			errs = append(errs, fmt.Errorf("-pprof: %w", err))
		} else {
			out.whole(out.pprofFile.Name())
			// The command is for pasting into a shell: a path with a
			// space or a quote is quoted.
			out.summary = append(out.summary, fmt.Sprintf("pprof: %s → %s (go tool pprof -http=:8080 %s)", count(st.Samples, "sample", "samples"), out.pprofFile.Name(), commandLine([]string{out.pprofFile.Name()})))
		}
	}
	if out.traceFile != nil {
		opts := []chrometrace.Option{chrometrace.WithEpoch(out.prof.Epoch())}
		if out.partial != "" {
			opts = append(opts, chrometrace.WithOtherData("partial", out.partial))
		}
		covers := out.detail.Stats().Covers()
		opts = append(opts, chrometrace.WithOtherData("steps", covers))
		if out.shared != "" {
			// For profile-run report's stage balance.
			opts = append(opts, chrometrace.WithOtherData("shared", out.shared))
		}
		if a := out.o.applied; a != nil && (a.Reference == profiler.None || len(a.Unaligned) > 0) {
			// Records of several clocks, some left as recorded: the
			// trace is not on one clock (a report of it must not say so).
			opts = append(opts, chrometrace.WithOtherData("clocks", unalignedText(a)))
		}
		st, err := chrometrace.Write(out.traceFile, windowRecords(), opts...)
		switch {
		case errors.Is(err, chrometrace.ErrNoRecords):
			// A run cut short before the window's steps: an empty file
			// would only look like a trace (and profile-run report could
			// not read it).
			ws := out.detail.Stats()
			out.summary = append(out.summary, fmt.Sprintf("trace: not written: no records in the steps -trace-steps %s covers (%s of other steps left out)", out.o.detail, count(ws.Outside+ws.Full, "record", "records")))
			out.dropTrace()
		case err != nil:
			out.summary = append(out.summary, fmt.Sprintf("trace: not written: %v", err))
			out.dropTrace()
			errs = append(errs, fmt.Errorf("-trace: %w", err))
		default:
			out.whole(out.traceFile.Name())
			line := fmt.Sprintf("trace: %s, %s (%d unmatched), %s", count(st.Events, "event", "events"), count(st.Flows, "flow", "flows"), st.Unmatched, covers)
			ws := out.detail.Stats()
			if ws.CutText() != "" {
				line += fmt.Sprintf(" (%s left out whole: the trace holds %d records at most; -trace-steps to choose the steps)", ws.CutText(), out.detail.Bound())
			}
			line += lostStepsText(ws)
			out.summary = append(out.summary, fmt.Sprintf("%s → %s (open in ui.perfetto.dev)", line, out.traceFile.Name()))
			if out.runDir != "" && filepath.Clean(out.traceFile.Name()) == filepath.Join(out.runDir, "trace.json") && htmlreport.Drawable(windowRecords()) {
				// Where profile-run report finds it: the page is a
				// command away.
				out.summary = append(out.summary, "html: profile-run report "+commandLine([]string{out.runDir})+" --html (these steps' pipeline chart, bubbles, stragglers)")
			}
		}
	}
	if collected > 0 && out.runDir != "" && out.removeRunDir() {
		// Every file meant for the run directory was left out (a trace
		// without records in its steps): removed only when empty, it
		// would otherwise only look like a result.
		out.summary = append(out.summary, "files: none was written into the run directory "+out.runDir+", so it was removed")
	}
	if out.spans != nil && out.abort.Err() == nil {
		// Spans a slow or absent endpoint has not taken are waited for
		// (flushed before a push or linger, then at the shutdown), each
		// wait up to closeTimeout: said, or the run seems to hang.
		if n := out.spans.Stats().Pending; n > 0 {
			out.log.Info(fmt.Sprintf("waiting for the OTLP endpoint to take %s (each wait at most %v; a signal ends it, the spans not delivered counted below)", count(n, "queued span", "queued spans"), closeTimeout),
				zap.String("endpoint", out.spans.Endpoint()))
		}
	}
	if out.metrics != nil {
		out.pushAndLinger()
	}
	// The profiler shuts its sinks down in the order they were added: the
	// span exporter delivers what it holds, then /metrics stops.
	ctx, cancel := context.WithTimeout(out.abort, closeTimeout)
	closeErr := closeProfiler(ctx, out.prof)
	cancel()
	if out.calls != nil {
		// The call logs are files, closed whole whatever became of the
		// shutdown: one cut short by a signal skips every sink's (when
		// the collector holds the profiler at that instant), and would
		// leave them without their ends, or empty, while listed below.
		_ = out.calls.Close() // its errors are each file's, below
	}
	if closeErr != nil {
		// Undelivered spans are counted and shown below; they do not
		// fail the run. Cut short by a signal, the shutdown leaves out
		// nothing else of the run's (the records were flushed, the files
		// are closed): only spans can be lost then.
		switch {
		case out.abort.Err() == nil:
			out.log.Warn("shutting the exporters down", zap.Error(closeErr))
		case out.spans != nil:
			out.log.Warn("delivering the spans was cut short; the otlp line below counts those not delivered", zap.String("by", context.Cause(out.abort).Error()))
		default:
			out.log.Debug("shutting the exporters down was cut short", zap.String("by", context.Cause(out.abort).Error()), zap.Error(closeErr))
		}
	}
	if out.calls != nil {
		for _, f := range out.calls.Files() {
			if f.Err == nil {
				out.whole(f.Path)
			}
		}
		files := out.calls.Files()
		out.summary = append(out.summary, callLogLines(files, out.o.callLogMiB)...)
		for _, f := range files {
			if f.Err != nil {
				errs = append(errs, fmt.Errorf("call log %s: %w", f.Path, f.Err))
			}
		}
	}
	if out.spans != nil {
		st := out.spans.Stats()
		line := fmt.Sprintf("otlp (%s → %s): %s delivered, %d dropped, %d failed", out.spans.Protocol(), out.spans.Endpoint(), count(st.Exported, "span", "spans"), st.Dropped, st.Failed)
		if st.Unsampled > 0 {
			line += fmt.Sprintf("; %s of unsampled steps left out", count(st.Unsampled, "span", "spans"))
			if st.KeptFirst+st.KeptSlow > 0 {
				line += fmt.Sprintf(" (%s kept beyond the ratio: %d first, %d slowest so far)", count(st.KeptFirst+st.KeptSlow, "step", "steps"), st.KeptFirst, st.KeptSlow)
			}
		}
		if st.LastError != nil {
			line += fmt.Sprintf("; last error: %v", st.LastError)
		}
		out.summary = append(out.summary, line)
	}
	if out.metricsAddr != nil {
		out.summary = append(out.summary, fmt.Sprintf("metrics: served on http://%s/metrics during the run", out.metricsAddr))
	}
	st := out.prof.Stats()
	// Abandoned ranges are among those collected: written to every
	// output, with host times only.
	fmt.Fprintf(stdout, "\nrecords: %d collected, %d dropped while recording, %d pending, %d written without device times (device work unfinished), %d timed on host only (no pooled event), %s, %s\n",
		st.Collected, st.Dropped, st.Pending, st.Abandoned, st.EventDrops, count(st.Unbalanced, "unbalanced end", "unbalanced ends"), count(st.Errors, "backend error", "backend errors"))
	if out.o.timing == "trace" {
		fmt.Fprintf(stdout, "work trace: %d device ranges written without device times (more waited for their work than the profiler holds), %d pieces of work lost by the trace, %d reported out of issue order",
			st.TraceLost, st.TraceDropped, st.TraceLate)
		if f := out.o.workTrace.Foreign(); f > 0 {
			fmt.Fprintf(stdout, ", %d run outside the job's streams (copies with no stream, other libraries' streams: no range's work)", f)
		}
		if st.TraceUnheld > 0 {
			fmt.Fprintf(stdout, "; %d pieces of work let go while a range open across more than the profiler holds waited for them", st.TraceUnheld)
		}
		if st.TraceEmpty > 0 {
			fmt.Fprintf(stdout, "; %d device ranges ran nothing on their stream (it only waited for another stream's work) and have no device times", st.TraceEmpty)
		}
		fmt.Fprintln(stdout)
	}
	if st.FirstError != nil {
		fmt.Fprintf(stdout, "backend errors: the first was %v\n", st.FirstError)
	}
	if st.SinkFailures > 0 {
		fmt.Fprintf(stdout, "outputs failed: %d removed after a panic, their files or series incomplete; the first: %v\n", st.SinkFailures, st.SinkError)
	}
	if len(out.o.command) > 0 {
		// Nothing recorded: the nccl line says why, and there is no
		// timing to describe.
		if st.Collected > 0 {
			line := "device timing: each NCCL operation from its first kernel channel's start to its last one's stop, on the GPU's timer"
			if out.o.kernels {
				line += "; kernels, memory copies and memsets from CUPTI's activity records"
			}
			fmt.Fprintln(stdout, line)
		}
	} else if out.o.importing > 0 {
		fmt.Fprintln(stdout, "device timing: as the imported profiles recorded it (torch.profiler: CUPTI's kernel, copy and memset records; the C++ framework: its events; a trainscope trace: its device ranges' times)")
	} else {
		line := "device timing: every device range (-device-depth 0)"
		if d := out.o.depth; d > 0 {
			line = fmt.Sprintf("device timing: device ranges up to %d deep and every collective; ranges inside them (kernels) on the host only (-device-depth 0 times them all)", d)
		}
		// What the timing put on the streams: each event is a command the
		// device runs between kernels.
		fmt.Fprintf(stdout, "%s; %s recorded on the streams, %s reused an event already marking that point of their stream (adjacent ranges share one)\n", line, count(st.Events, "timing event", "timing events"), count(st.Adjacent, "range start or end", "range starts and ends"))
	}
	if out.o.profile == "sync" {
		fmt.Fprintln(stdout, "synchronised: the stream was synchronised around every device range (-profile sync), so host times include the waits")
	}
	if out.partial != "" {
		fmt.Fprintln(stdout, out.partial)
	}
	if len(out.summary) == 0 {
		// Every output off (-report, -pprof, -trace off, -metrics-addr
		// off): a heading over nothing would look like a fault.
		fmt.Fprintln(stdout, "outputs: none (every file and exporter is off)")
	} else {
		fmt.Fprintln(stdout, "outputs:")
	}
	for _, line := range out.summary {
		fmt.Fprintf(stdout, "  %s\n", line)
	}
	return errors.Join(errs...)
}

// closeProfiler closes the profiler at the end of a run; tests replace it
// to hold the profiler as its collector can at the instant Close runs.
var closeProfiler = func(ctx context.Context, p *profiler.Profiler) error { return p.Close(ctx) }

// whole records paths as written whole (see abandon).
func (out *outputs) whole(paths ...string) {
	out.wholeMu.Lock()
	defer out.wholeMu.Unlock()
	if out.wholeDone == nil {
		out.wholeDone = map[string]bool{}
	}
	for _, p := range paths {
		out.wholeDone[p] = true
	}
}

func (out *outputs) isWhole(path string) bool {
	out.wholeMu.Lock()
	defer out.wholeMu.Unlock()
	return out.wholeDone[path]
}

// abandon is what profile-run leaves when it exits before its outputs are
// finished (a second signal while a wait no signal reaches holds it,
// in.hardExit): it runs on another goroutine while they may still be
// being written, and takes no lock they hold. Each file this run may make
// that is not yet written whole is removed while still empty (created at
// the start, it holds nothing: it would only look like a result), and the
// run directory with it when nothing else is left there; the files left
// that hold something are named, as incomplete. It returns the line that
// says so, "" when every file was written whole.
func (out *outputs) abandon(cause error) string {
	candidates := slices.Clone(out.created)
	if out.reportPath != "" {
		// Known at open, as the report's name: the per-rank files.
		for _, rank := range out.o.ranks {
			candidates = append(candidates, fmt.Sprintf("%s.rank%d", rankReportPrefix(out.reportPath), rank))
		}
	}
	if out.calls != nil {
		for _, rank := range out.o.ranks {
			candidates = append(candidates, out.calls.Path(rank))
		}
	}
	if len(out.o.ranks) == 0 && out.runDir != "" {
		// A wrapped command's ranks are known only as its processes
		// connect; the run directory is this run's alone, so what it
		// holds is this run's files.
		ents, _ := os.ReadDir(out.runDir) // not a glob: -out may hold [ or *
		for _, e := range ents {
			if p := filepath.Join(out.runDir, e.Name()); !slices.Contains(candidates, p) {
				candidates = append(candidates, p)
			}
		}
	}
	var removed, left []string
	for _, p := range candidates {
		if out.isWhole(p) {
			continue
		}
		fi, err := os.Lstat(p)
		if err != nil || !fi.Mode().IsRegular() {
			continue // not made (yet), or removed as empty already
		}
		if fi.Size() == 0 {
			if os.Remove(p) == nil {
				removed = append(removed, p)
			}
			continue
		}
		left = append(left, p)
	}
	if len(removed)+len(left) == 0 {
		return ""
	}
	// Names in the run directory are given relative to it.
	names := func(paths []string) string {
		var short []string
		for _, p := range paths {
			if out.runDir != "" && filepath.Dir(p) == filepath.Clean(out.runDir) {
				p = filepath.Base(p)
			}
			short = append(short, p)
		}
		return strings.Join(short, ", ")
	}
	var parts []string
	if len(left) > 0 {
		parts = append(parts, "INCOMPLETE, cut off where the exit found them: "+names(left))
	}
	if len(removed) > 0 {
		parts = append(parts, "removed, still empty: "+names(removed))
	}
	where := ""
	if out.runDir != "" {
		where = " in " + out.runDir
		if out.removeRunDir() { // only if nothing is left in it
			where = "; the run directory " + out.runDir + " is removed, nothing being left in it"
		}
	}
	return fmt.Sprintf("%v: exiting without finishing the outputs (still waiting %v after the signal): %s%s", cause, abortGrace, strings.Join(parts, "; "), where)
}

// listEach is how many per-rank files the summary lists one by one;
// beyond it, those that are whole and alike are counted on one line.
const listEach = 8

// callLogLines are the summary's lines for the ranks' call logs: one per
// file up to listEach files; beyond, one line for every file that was
// written whole within -call-log-size, and a line each for the others
// (cut short, not written, or capped), which need their own word.
func callLogLines(files []profiler.CallLogFile, capMiB int) []string {
	if len(files) <= listEach {
		out := make([]string, 0, len(files))
		for _, f := range files {
			out = append(out, callLogLine(f, capMiB))
		}
		return out
	}
	var out, plain []string
	var lines uint64
	lo, hi, steps := 0, 0, false
	var first, last profiler.CallLogFile
	for _, f := range files {
		if f.Err != nil || f.Skipped > 0 {
			out = append(out, callLogLine(f, capMiB))
			continue
		}
		if len(plain) == 0 {
			first = f
		}
		last = f
		plain = append(plain, f.Path)
		lines += f.Lines
		if f.HasSteps {
			if !steps {
				lo, hi, steps = f.FirstStep, f.LastStep, true
			}
			lo, hi = min(lo, f.FirstStep), max(hi, f.LastStep)
		}
	}
	if len(plain) == 0 {
		return out
	}
	what := "one per rank"
	switch {
	case steps && lo == hi:
		what += fmt.Sprintf("; step %d", lo)
	case steps:
		what += fmt.Sprintf("; steps %d–%d", lo, hi)
	}
	line := fmt.Sprintf("calls: %d in %d files → %s … %s (%s)", lines, len(plain), first.Path, filepath.Base(last.Path), what)
	return append([]string{line}, out...)
}

// callLogLine is the summary's line for one rank's call log: what it
// holds, or that an error cut it short (a full disk) or kept it from being
// written (a file there already).
func callLogLine(f profiler.CallLogFile, capMiB int) string {
	switch {
	case f.Err != nil && f.Bytes == 0:
		return fmt.Sprintf("calls: rank %d's log not written (%s left out): %v", f.Rank, count(f.Skipped, "call", "calls"), f.Err)
	case f.Err != nil:
		return fmt.Sprintf("calls: %s is INCOMPLETE: %v (%s given to it before the error, %d more not written)", f.Path, f.Err, count(f.Lines, "call", "calls"), f.Skipped)
	}
	line := fmt.Sprintf("calls: %d → %s", f.Lines, f.Path)
	switch {
	case f.HasSteps && f.FirstStep == f.LastStep:
		line += fmt.Sprintf(" (step %d)", f.FirstStep)
	case f.HasSteps:
		line += fmt.Sprintf(" (steps %d–%d)", f.FirstStep, f.LastStep)
	}
	if f.Skipped > 0 {
		line += fmt.Sprintf("; %d more beyond -call-log-size %d MiB not written", f.Skipped, capMiB)
	}
	return line
}

// pushAndLinger pushes the final metrics to a Pushgateway and keeps
// /metrics up for -metrics-linger, before the profiler shuts the exporters
// down. Spans are flushed first, so the delivery counts they show are
// final unless the endpoint is slow.
func (out *outputs) pushAndLinger() {
	if out.spans != nil && (out.o.pushgateway != "" || out.o.metricsLinger > 0) {
		ctx, cancel := context.WithTimeout(out.abort, closeTimeout)
		_ = out.spans.ForceFlush(ctx) // what it could not deliver shows in its counts
		cancel()
	}
	if out.o.pushgateway != "" {
		ctx, cancel := context.WithTimeout(out.abort, closeTimeout)
		err := out.metrics.Push(ctx, out.o.pushgateway, "profile-run")
		cancel()
		switch {
		case errors.Is(err, prom.ErrIncompletePush):
			out.summary = append(out.summary, fmt.Sprintf("pushgateway: pushed to %s without some series: %v", out.o.pushgateway, err))
			out.log.Warn("pushgateway: pushed without some series", zap.Error(err))
		case err != nil:
			out.summary = append(out.summary, fmt.Sprintf("pushgateway: not delivered: %v", err))
			out.log.Warn("pushgateway: not delivered", zap.Error(err))
		default:
			out.summary = append(out.summary, "pushgateway: pushed to "+out.o.pushgateway)
		}
	}
	if out.metricsAddr != nil && out.o.metricsLinger > 0 {
		out.log.Info("serving final metrics; Ctrl-C ends it", zap.Duration("for", out.o.metricsLinger))
		select {
		case <-time.After(out.o.metricsLinger):
		case <-out.abort.Done():
		}
	}
}

// loopbackHostPort reports a scheme-less endpoint on this machine: a local
// collector speaks plaintext, so -otlp-endpoint 127.0.0.1:4317 works as
// typed. A URL's scheme (http or https) always decides.
func loopbackHostPort(endpoint string) bool {
	if endpoint == "" || strings.Contains(endpoint, "://") {
		return false
	}
	host, _, err := net.SplitHostPort(endpoint)
	if err != nil {
		return false
	}
	if host == "localhost" {
		return true
	}
	ip := net.ParseIP(host)
	return ip != nil && ip.IsLoopback()
}

// stepAnalysed takes each step the analysis sink has analysed: its
// wall-time split into the profile, its figures onto spans.
func (out *outputs) stepAnalysed(st *analysis.Step) {
	if out.profile != nil {
		out.profile.AddStep(st)
	}
	if sp := out.stepSpans.Load(); sp != nil {
		sp.AddStep(st)
	}
}

// liveCounts reads the running totals the progress line shows.
func (out *outputs) liveCounts() liveCounts {
	st := out.prof.Stats()
	c := liveCounts{ranges: st.Collected, drops: st.Dropped}
	if out.spans != nil {
		c.backlog = out.spans.Stats().Pending
	}
	return c
}

// writeJSONSummary writes the summary's figures for programs
// (summary.json in the run directory, beside report.txt) and says so.
func (out *outputs) writeJSONSummary(pipe *analysis.Summary) error {
	path := filepath.Join(out.runDir, "summary.json")
	f, err := createFile("summary", path)
	if err == nil {
		in := jsonsummary.Input{RunID: out.runID, Partial: out.partial, Command: out.o.args, Stats: out.prof.Stats(),
			Steps: out.steps.Ranks(), Groups: out.tables.Groups(), Pipeline: pipe}
		in.Cycle = out.cycleResult()
		if c := out.o.train; len(out.o.command) == 0 && out.o.importing == 0 {
			where := c.Backend.String()
			if pl, err := c.Placement(); err == nil {
				where = pl.String()
			}
			in.Trainer = &jsonsummary.Trainer{Placement: where, Stages: c.Stages, Chunks: c.Chunks, Replicas: c.Replicas,
				Microbatches: c.Microbatches, MicrobatchSize: c.MicrobatchSize, Layers: c.Layers, Width: c.Width,
				Precision: c.Precision.String(), Schedule: c.Schedule, Steps: c.Steps}
		}
		switch in.Environment = out.env; {
		case in.Environment != nil:
		case out.o.importing > 0: // the records come from elsewhere: only the build is this run's
			in.Environment = &jsonsummary.Environment{ProfileRun: thisBuild()}
		default:
			in.Environment = hostEnvironment()
		}
		err = jsonsummary.Write(f, in)
		if cerr := f.Close(); err == nil {
			err = cerr
		}
	}
	if err != nil {
		// Half a JSON document is none: it goes (when made).
		if f != nil {
			_ = os.Remove(path)
		}
		out.summary = append(out.summary, fmt.Sprintf("summary: not written: %v", err))
		return fmt.Errorf("summary.json: %w", err)
	}
	out.whole(path)
	out.summary = append(out.summary, "summary: "+path+" (the figures as JSON, docs/summary-json.md)")
	return nil
}
