package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"go.uber.org/zap"

	"github.com/trainscope/trainscope/internal/importer"
	"github.com/trainscope/trainscope/profiler"
	"github.com/trainscope/trainscope/profiler/analysis"
)

// importOptions are profile-run import's command line: the output flags
// of a training run, and the files.
type importOptions struct {
	options
	files []string
}

func parseImportFlags(args []string, stderr io.Writer) (*importOptions, error) {
	o := &importOptions{}
	o.args = append([]string{"import"}, args...)
	// What finish says about device timing: every device range an
	// imported profile holds was timed on the device.
	o.profile, o.depth = "on", 0
	fs := flag.NewFlagSet("profile-run import", flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	fs.StringVar(&o.outDir, "out", "trainscope-out", "directory for the outputs (a new subdirectory per import, named by its run ID)")
	sortBy := fs.String("sort", "host_total", "report sort column: "+strings.Join(profiler.SortKeys(), ", "))
	fs.StringVar(&o.report, "report", "", `summary report file (default <run dir>/report.txt, with report.rank<N> beside it; "off" to skip the files: the summary is still printed)`)
	fs.BoolVar(&o.quiet, "quiet", false, "do not print the summary tables on stdout")
	fs.StringVar(&o.pprofPath, "pprof", "", `pprof profile (default <run dir>/profile.pb.gz; "off" to skip)`)
	fs.StringVar(&o.tracePath, "trace", "", `Perfetto/Chrome trace JSON (default <run dir>/trace.json; "off" to skip)`)
	fs.StringVar(&o.metricsAddr, "metrics-addr", "off", "serve Prometheus /metrics here while importing (with -metrics-linger, so a scraper sees them)")
	fs.DurationVar(&o.metricsLinger, "metrics-linger", 0, "keep serving /metrics this long after the import")
	fs.BoolVar(&o.metricsDetail, "metrics-detail", false, "export per-name detail per rank (docs/metrics.md)")
	fs.StringVar(&o.pushgateway, "pushgateway", "", "push a final metrics summary to this Pushgateway URL")
	fs.StringVar(&o.otlpEndpoint, "otlp-endpoint", "", "send spans over OTLP to this endpoint (host:port or URL); OTEL_EXPORTER_OTLP_ENDPOINT also turns it on")
	fs.StringVar(&o.otlpProtocol, "otlp-protocol", "", "OTLP protocol: grpc or http/protobuf (default: OTEL_EXPORTER_OTLP_PROTOCOL, else http/protobuf)")
	fs.BoolVar(&o.otlpInsecure, "otlp-insecure", false, "plaintext OTLP to a host:port endpoint (implied for loopback; a URL's scheme decides)")
	fs.StringVar(&o.serviceName, "service-name", "", "service.name of the spans (default: OTEL_SERVICE_NAME, else profile-run)")
	detail := fs.String("trace-steps", "all", "steps the trace and the per-call logs in report.rank<N> cover (A-B, A, last:N or all); records outside ProfilerStep ranges are always kept")
	fs.StringVar(&o.pipelineSchedule, "pipeline-schedule", "", `the imported pipeline's schedule, "microbatches=M" or "microbatches=M,vpp=V", where its kernels carry no chunk or microbatch (PyTorch's Schedule1F1B): the ideal bubble (p−1)/(v·m+p−1) is then reported beside the measured one`)
	fs.IntVar(&o.callLogMiB, "call-log-size", 64, "cap, in MiB uncompressed, of each rank's call log (calls.rank<N>.gz); 0 writes none")
	fs.StringVar(&o.logFormat, "log-format", logConsole, "log format on stderr: console or json")
	fs.StringVar(&o.logLevel, "log-level", "info", "log level: debug, info, warn or error")
	fs.Usage = func() {}
	// Flags may come before or after the files (import a.json b.json -quiet).
	files, err := parseInterleaved(fs, args)
	if err != nil {
		if errors.Is(err, flag.ErrHelp) {
			fmt.Fprintf(stderr, "Usage: profile-run import [flags] FILE|DIR…\n\nLoads profiles written elsewhere — the C++ framework profiler's call log\n(\"=== Kernel Call Log for Rank N ===\", with its report beside it to check the\ntotals), torch.profiler's Chrome trace JSON (one file per rank), or the\ntrace.json of trainscope runs (one per host of a job) — gzipped or not —\nand writes the report, pprof profile and trace a training run writes.\nA directory stands for its *.json and *.json.gz files (torch.profiler's\ntensorboard_trace_handler output), a trainscope run directory for its\ntrace.json. Formats are told by content. Each\nfile is one clock; the files' clocks are aligned on the collectives they\nshare. See docs/import.md.\n\nFlags:\n")
			fs.SetOutput(stderr)
			fs.PrintDefaults()
			return nil, errHelp
		}
		return nil, flagError("import: ", fs, err, nil)
	}
	o.files = files
	normalizeKeywords(&o.options, sortBy, detail)
	if len(o.files) == 0 {
		return nil, usagef("import: no files to import")
	}
	if o.sortBy, err = profiler.ParseSortKey(*sortBy); err != nil {
		return nil, usagef("-sort: %v", err)
	}
	if o.detail, err = profiler.ParseStepWindow(*detail); err != nil {
		return nil, usagef("-trace-steps: %v", err)
	}
	if o.callLogMiB < 0 {
		return nil, usagef("-call-log-size %d: must not be negative", o.callLogMiB)
	}
	set := map[string]bool{}
	fs.Visit(func(f *flag.Flag) { set[f.Name] = true })
	if set["call-log-size"] && o.callLogMiB > 0 && o.report == "off" {
		// The call logs are written beside the report's files, as a
		// run's are.
		return nil, usagef("-call-log-size %d: the call logs go beside the report (calls.rank<N>.gz), but -report is off", o.callLogMiB)
	}
	if o.pipelineSchedule != "" {
		if o.schedChunks, o.schedMB, err = parseSchedule(o.pipelineSchedule); err != nil {
			return nil, usagef("-pipeline-schedule %q: %v", o.pipelineSchedule, err)
		}
	}
	if strings.TrimSpace(o.outDir) == "" {
		return nil, usagef("-out: empty directory name")
	}
	if err := checkOutputFlags(&o.options); err != nil {
		return nil, err
	}
	return o, nil
}

// runImport is `profile-run import`: exit 2 for a usage mistake, 1 for a
// file that cannot be read or parsed (named with its line or byte), 0 when
// the outputs are written.
func runImport(in *interrupt, args []string, stdout, stderr io.Writer) int {
	o, err := parseImportFlags(args, stderr)
	if code, failed := setupFailed(err, stderr, "profile-run import"); failed {
		return code
	}
	log, err := newLogger(stderr, o.logFormat, o.logLevel)
	if code, failed := setupFailed(err, stderr, "profile-run import"); failed {
		return code
	}
	defer func() { _ = log.Sync() }()
	// Nothing here is worth finishing after a signal: the files are still
	// there to import again. The first signal ends every wait.
	in.nothingToStop()
	if err := importFiles(in, o, log, stdout); err != nil {
		if in.signal() != nil {
			fmt.Fprintf(stderr, "profile-run: import: %v: nothing written\n", context.Cause(in.abort))
			return in.exitCode()
		}
		var ue *usageError
		if errors.As(err, &ue) {
			fmt.Fprintf(stderr, "profile-run: %s (see profile-run import -h)\n", ue.msg)
			return exitUsage
		}
		for _, line := range strings.Split(err.Error(), "\n") {
			if line != "" {
				fmt.Fprintf(stderr, "profile-run: import: %s\n", line)
			}
		}
		return exitFail
	}
	if in.signal() != nil {
		// A signal after the outputs were written (during -metrics-linger,
		// say) ended the import early all the same, as it does a run.
		return in.exitCode()
	}
	return exitOK
}

// loadProfile reads one file; its reading stops when ctx ends.
func loadProfile(ctx context.Context, path string) (*importer.Profile, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	return importer.Load(path, ctxReader{ctx, f})
}

// ctxReader reads from r until ctx ends, then fails with its cause: a
// parser of a large file stops at its next read.
type ctxReader struct {
	ctx context.Context
	r   io.Reader
}

func (c ctxReader) Read(p []byte) (int, error) {
	if c.ctx.Err() != nil {
		return 0, context.Cause(c.ctx)
	}
	return c.r.Read(p)
}

// sameFileTwice finds a file named twice among files (by any path: a
// link, ./a and a): importing it twice would count it twice.
func sameFileTwice(files []string) error {
	seen := make([]os.FileInfo, len(files))
	for i, path := range files {
		fi, err := os.Stat(path)
		if err != nil {
			continue // loading it says what is wrong
		}
		for j := range i {
			if seen[j] != nil && os.SameFile(seen[j], fi) {
				if files[j] == path {
					return usagef("import: %s is given twice: give each file once", path)
				}
				return usagef("import: %s and %s are the same file: give each file once", files[j], path)
			}
		}
		seen[i] = fi
	}
	return nil
}

// expandDirs replaces each directory among files with the traces in it:
// its files named *.json or *.json.gz, in name order (torch.profiler's
// tensorboard_trace_handler writes one per rank into a directory), or a
// trainscope run directory's trace.json alone. Subdirectories are not
// read.
func expandDirs(files []string) ([]string, error) {
	var out []string
	for _, path := range files {
		fi, err := os.Stat(path)
		if err != nil || !fi.IsDir() {
			out = append(out, path) // loading it says what is wrong
			continue
		}
		entries, err := os.ReadDir(path)
		if err != nil {
			return nil, err // "open DIR: …"; the caller says "import:"
		}
		n := len(out)
		type entry struct {
			file string
			fi   os.FileInfo
			link bool
		}
		var traces []entry
		for _, e := range entries {
			name := e.Name()
			if strings.HasPrefix(name, ".") || !(strings.HasSuffix(name, ".json") || strings.HasSuffix(name, ".json.gz")) {
				continue
			}
			file := filepath.Join(path, name)
			// A link to a trace is that trace (one gathered from another
			// host's directory, say).
			if fi, err := os.Stat(file); err == nil && fi.Mode().IsRegular() && (e.Type().IsRegular() || e.Type()&os.ModeSymlink != 0) {
				traces = append(traces, entry{file, fi, e.Type()&os.ModeSymlink != 0})
			}
		}
		// A trainscope run directory holds summary.json beside its
		// trace.json: the run's figures, for profile-run compare, which
		// no import reads. The directory stands for its trace alone.
		named := func(name string) func(entry) bool {
			return func(t entry) bool { return filepath.Base(t.file) == name }
		}
		if i := slices.IndexFunc(traces, named("trace.json")); i >= 0 && slices.ContainsFunc(traces, named("summary.json")) {
			traces = traces[i : i+1]
		}
		for _, t := range traces {
			// A link to another trace of the directory (latest.json, say)
			// is not one more file.
			if t.link && slices.ContainsFunc(traces, func(u entry) bool {
				return u.file != t.file && (!u.link || u.file < t.file) && os.SameFile(u.fi, t.fi)
			}) {
				continue
			}
			out = append(out, t.file)
		}
		if len(out) == n {
			if runs := runsUnder(path, "trace.json"); len(runs) > 0 {
				// An -out directory: its runs' traces (one job's hosts,
				// say) are imported by naming them.
				list := make([]string, len(runs))
				for i, r := range runs {
					list[i] = filepath.Join(path, r, "trace.json")
				}
				cmd := commandLine(list)
				if len(runs) > 4 {
					cmd = commandLine([]string{path}) + "/*/trace.json"
				}
				return nil, usagef("import: %s is an output directory holding %s, not a trace: name the traces to import (profile-run import %s)",
					path, count(len(runs), "run directory", "run directories"), cmd)
			}
			return nil, usagef("import: %s is a directory with no trace in it (no *.json or *.json.gz file): name the files to import", path)
		}
	}
	return out, nil
}

func importFiles(in *interrupt, o *importOptions, log *zap.Logger, stdout io.Writer) error {
	files, err := expandDirs(o.files)
	if err != nil {
		return err
	}
	o.files = files
	if err := sameFileTwice(o.files); err != nil {
		return err
	}
	var profiles []*importer.Profile
	for _, path := range o.files {
		p, err := loadProfile(in.abort, path)
		if err != nil {
			return err
		}
		for _, w := range p.Warnings {
			log.Warn(w)
		}
		profiles = append(profiles, p)
	}
	for _, w := range importer.AssignRanks(profiles) {
		log.Warn(w)
	}
	// A seed report holds totals: it checks the call log of its ranks,
	// and cannot stand in for one.
	var seedRecs []profiler.Record
	var tables []importer.Table
	for _, p := range profiles {
		if p.Format == importer.FormatSeed {
			seedRecs = append(seedRecs, p.Records...)
		}
		tables = append(tables, p.Tables...)
	}
	problems, uncovered := importer.CheckTables(tables, seedRecs)
	if len(uncovered) > 0 {
		t := uncovered[0]
		return fmt.Errorf("%s:%d: rank %d's summary report holds totals, not calls: there is nothing to place on a timeline or in a profile; "+
			"import the call log the same run wrote with PrintRecords (\"=== Kernel Call Log for Rank %d ===\"), with the report beside it to check the totals",
			t.Path, t.Line, t.Rank, t.Rank)
	}
	for _, pr := range problems {
		log.Warn("the report and the call log disagree: " + pr)
	}
	recs := importer.Combine(profiles)
	if len(recs) == 0 {
		return fmt.Errorf("no ranges in %s", strings.Join(o.files, ", "))
	}
	if err := windowKeepsAny(o.detail, recs); err != nil {
		return err
	}
	if o.schedMB > 0 && !slices.ContainsFunc(recs, func(r profiler.Record) bool { return r.Stage != profiler.None }) {
		log.Warn("-pipeline-schedule " + o.pipelineSchedule + " has no effect: no imported record carries a pipeline stage (docs/import.md, \"Stage\"), so there is no pipeline to give the schedule of")
	}
	prof, err := profiler.New(profiler.WithMaxRecords(0), profiler.WithConcurrentSinks())
	if err != nil {
		return err
	}
	defer func() {
		ctx, cancel := context.WithTimeout(in.abort, flushTimeout)
		defer cancel()
		_ = prof.Close(ctx)
	}()
	// Ranks' clocks are aligned when their records come from several
	// files: a report file, or one whose ranks were all left out, brings
	// no clock of its own.
	// The ranks of one file were recorded on one clock (one process, or
	// one host's profile-run): each file's ranks are given one offset, so
	// a host's ranks are aligned through whichever of them shares
	// collectives with the other hosts.
	o.clocks = map[int]int{}
	kineto := map[int]bool{}
	o.peaks.atLeast = map[int]int64{}
	clock := len(profiles) // the next clock of its own
	for i, p := range profiles {
		if len(p.Records) > 0 {
			o.importing++
		}
		// A trace an earlier import wrote with some ranks' clocks left as
		// recorded is not one clock: each of those ranks keeps a clock of
		// its own, to be aligned (or left as recorded) again.
		unaligned := unalignedRanks(p.OtherData["clocks"], p.Ranks())
		for _, r := range p.Ranks() {
			o.clocks[r] = i
			if slices.Contains(unaligned, r) {
				o.clocks[r] = clock
				clock++
				o.importing++
			}
			if p.MemoryEvents > 0 {
				kineto[r] = true
				o.peaks.atLeast[r] = max(o.peaks.atLeast[r], p.PeakMemory)
			}
		}
	}
	// A trace's memory events count PyTorch's allocated tensors; the
	// C++ framework's call logs give its own figure.
	o.peaks.note = func(rank int) string {
		if kineto[rank] {
			return importedPeakNote
		}
		return ""
	}
	if o.importing > 1 {
		// One estimate over every collective of the files is steadier
		// than one per step, and puts the trace's timelines on one clock.
		// A file's clock is aligned only through enough collectives
		// shared with the others; what is not aligned is left as
		// recorded, and the analyses say so rather than align it on a
		// step's one or two collectives.
		est := analysis.EstimateOffsets(recs, analysis.WithClockDomains(o.clocks), analysis.WithMinClockSamples(analysis.MinClockSamples))
		if est.Joined > 0 {
			est.Apply(recs)
		}
		o.applied = &est
	}
	if in.abort.Err() != nil {
		return context.Cause(in.abort)
	}
	// The ranks, and so the names of their files, are known now.
	seen := map[int]bool{}
	for i := range recs {
		if r := recs[i].Rank; !seen[r] {
			seen[r] = true
			o.ranks = append(o.ranks, r)
		}
	}
	slices.Sort(o.ranks)
	out, err := openOutputs(in.abort, &o.options, prof, log)
	if err != nil {
		return err
	}
	// A partial run's trace is still one: its import's outputs say so,
	// as the run's did.
	var partial []string
	for _, p := range profiles {
		if s := p.OtherData["partial"]; s != "" {
			if len(profiles) > 1 {
				s += " (" + p.Path + ")"
			}
			partial = append(partial, s)
		}
	}
	out.partial = strings.Join(partial, "; ")
	fmt.Fprintf(stdout, "profile-run: importing %d file(s), %s:\n", len(profiles), count(len(recs), "range", "ranges"))
	for _, p := range profiles {
		line := fmt.Sprintf("  %s: %s", p.Path, p.Format)
		if ranks := fileRanks(p); len(ranks) > 0 || len(p.LeftOut) == 0 {
			line += ", " + ranksText(ranks)
		}
		line += ", " + count(len(p.Records), "range", "ranges")
		line += pipelineText(p) + memoryText(p)
		line += clockText(o.applied, p, profiles)
		if len(p.Tables) > 0 {
			line += ", " + count(len(p.Tables), "report table", "report tables")
		}
		if len(p.LeftOut) > 0 {
			line += fmt.Sprintf(" (%s left out: an earlier file holds them; see the warnings)", ranksText(p.LeftOut))
		}
		fmt.Fprintln(stdout, line)
	}
	if len(tables) > 0 {
		if len(problems) == 0 {
			agree := fmt.Sprintf("the %d report tables agree", len(tables))
			if len(tables) == 1 {
				agree = "the report table agrees"
			}
			fmt.Fprintf(stdout, "  %s with the call log (counts and totals)\n", agree)
		} else {
			fmt.Fprintf(stdout, "  the report tables disagree with the call log in %s (see the warnings)\n", count(len(problems), "place", "places"))
		}
	}
	if err := prof.Ingest(in.abort, recs); err != nil {
		out.removeFiles()
		return err
	}
	fctx, cancel := context.WithTimeout(in.abort, flushTimeout)
	flushErr := prof.Flush(fctx)
	cancel()
	if in.abort.Err() != nil {
		// Half an import's outputs would pass for a whole one.
		if out.calls != nil {
			out.calls.Remove()
		}
		out.removeFiles()
		return context.Cause(in.abort)
	}
	// Without steps, the step the collectives' cycle suggests, as a
	// wrapped run's summary says it.
	if res := out.cycleResult(); res != nil && !anySteps(out.steps) {
		for line := range strings.Lines(res.Lines()) {
			fmt.Fprintf(stdout, "  %s\n", strings.TrimSuffix(line, "\n"))
		}
	}
	return errors.Join(flushErr, out.finish(stdout))
}

// anySteps reports whether s accounted a step on any rank; false for a
// nil s.
func anySteps(s *profiler.StepSummary) bool {
	if s == nil {
		return false
	}
	for _, r := range s.Ranks() {
		if r.Steps > 0 {
			return true
		}
	}
	return false
}

// windowKeepsAny checks -trace-steps against the steps the imported
// records carry, before any output is made: a window that keeps none of
// them would leave the trace and the per-step tables empty. Records
// without a step are always kept.
func windowKeepsAny(w profiler.StepWindow, recs []profiler.Record) error {
	seen := map[int]bool{}
	var steps []int
	for i := range recs {
		s := int(recs[i].Step)
		if s == profiler.None || w.KeepsAny(s, s) {
			return nil
		}
		if !seen[s] {
			seen[s] = true
			steps = append(steps, s)
		}
	}
	slices.Sort(steps)
	return fmt.Errorf("-trace-steps %s keeps none of the steps the files hold (%s): there would be nothing in the trace or the per-step tables", w, profiler.WindowStats{Steps: steps}.Covers())
}

// fileRanks are the ranks a file holds: those of its records and of its
// report tables (a seed report holds no records).
func fileRanks(p *importer.Profile) []int {
	ranks := p.Ranks()
	for _, t := range p.Tables {
		if !slices.Contains(ranks, t.Rank) {
			ranks = append(ranks, t.Rank)
		}
	}
	slices.Sort(ranks)
	return ranks
}

func ranksText(ranks []int) string {
	switch len(ranks) {
	case 0:
		return "rank unknown"
	case 1:
		return fmt.Sprintf("rank %d", ranks[0])
	}
	s := make([]string, len(ranks))
	for i, r := range ranks {
		s[i] = fmt.Sprint(r)
	}
	return "ranks " + strings.Join(s, ", ")
}

// importedPeakNote is what an imported torch.profiler trace's peak device
// memory is.
const importedPeakNote = "tensors allocated, as torch.cuda.max_memory_allocated gives it, from the trace's memory events"

// clockText says how import put file p's clock on the others': nothing
// for one clock.
func clockText(o *analysis.Offsets, p *importer.Profile, profiles []*importer.Profile) string {
	ranks := p.Ranks()
	if o == nil || len(ranks) == 0 {
		return ""
	}
	r := ranks[0]
	if slices.Contains(o.Unaligned, r) || o.Reference == profiler.None {
		if n := o.Samples[r]; n > 0 {
			return fmt.Sprintf(", clock left as recorded (only %s shared with the other files' ranks; alignment needs %d)", count(n, "collective or send", "collectives or sends"), o.MinSamples)
		}
		return ", clock left as recorded (no collective, send or receive shared with the other files' ranks)"
	}
	if slices.Contains(ranks, o.Reference) {
		// A trace an earlier import wrote may hold ranks left as recorded.
		var left []int
		for _, q := range ranks {
			if slices.Contains(o.Unaligned, q) {
				left = append(left, q)
			}
		}
		if len(left) > 0 {
			return ", the reference clock; " + ranksText(left) + " left as recorded (too few collectives or sends shared with the others)"
		}
		return ", the reference clock"
	}
	ref := ""
	for _, q := range profiles {
		if slices.Contains(q.Ranks(), o.Reference) {
			ref = q.Path
		}
	}
	var res time.Duration
	for _, q := range ranks {
		res = max(res, o.Residual[q])
	}
	from := "collectives"
	if slices.Contains(o.P2P, r) {
		from = "sends matched with their receives: no collective crossed"
	}
	return fmt.Sprintf(", clock %+.3f ms against %s's (from %d %s, residual %.3f ms)",
		float64(o.Offset[r])/1e6, ref, o.Samples[r], from, float64(res)/1e6)
}

// pipelineText says what a Kineto trace's names gave its records: the
// rank's pipeline stage and what staged it, and the kernels labelled with
// forward or backward work; "" where they gave nothing.
func pipelineText(p *importer.Profile) string {
	var s string
	if p.StagedBy != "" && len(p.Records) > 0 {
		s += fmt.Sprintf(", stage %d (from its %s)", p.Records[0].Stage, p.StagedBy)
	}
	if p.KernelsLabelled > 0 {
		s += fmt.Sprintf(", %s launched inside ranges named as forward or backward work", count(p.KernelsLabelled, "kernel", "kernels"))
	}
	return s
}

// memoryText says what a Kineto trace's "[memory]" events gave: the
// device allocator's peak, allocated and reserved; "" without them.
func memoryText(p *importer.Profile) string {
	if p.MemoryEvents == 0 {
		return ""
	}
	return fmt.Sprintf(", peak device memory %.2f MB allocated, %.2f MB reserved (from %s)",
		float64(p.PeakMemory)/(1<<20), float64(p.PeakReserved)/(1<<20), count(p.MemoryEvents, "memory event", "memory events"))
}
