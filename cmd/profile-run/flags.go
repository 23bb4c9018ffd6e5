package main

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"net/url"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/trainscope/trainscope/exporters/otel"
	"github.com/trainscope/trainscope/pipeline"
	"github.com/trainscope/trainscope/profiler"
	"github.com/trainscope/trainscope/profiler/analysis"
	"github.com/trainscope/trainscope/runtime"
)

// options are the parsed command line.
type options struct {
	// args is the command line after "profile-run" (the subcommand
	// included), as given: summary.json records it.
	args    []string
	train   pipeline.Config
	backend string // "auto", "cpu", "cuda"
	outDir  string
	sortBy  profiler.SortKey
	profile string // "on", "off", "sync"
	depth   int    // profiler.WithDeviceDepth
	timing  string // "events", "trace": how device ranges are timed
	// workTrace is the running trace under -device-timing trace.
	workTrace *runtime.WorkTrace
	quiet     bool // no summary tables on stdout
	command   []string
	// stepRange names a wrapped command's NVTX step range.
	stepRange string
	// pipelineGroup names a wrapped command's pipeline communicator; ""
	// finds it by name.
	pipelineGroup string
	// pipelineSchedule is a wrapped command's -pipeline-schedule as
	// given, and chunks and microbatches what it says (0 when not given).
	pipelineSchedule     string
	schedChunks, schedMB int
	// kernels has a wrapped command's kernels traced (CUPTI);
	// kernelLabels has them labelled by the NVTX ranges they were
	// launched in.
	kernels, kernelLabels bool
	// importing is the number of files profile-run import takes records
	// from (0 for a run): their ranks' clocks may differ.
	importing int
	// clocks maps each imported rank to the file it came from: the ranks
	// of one file share a clock (analysis.WithClockDomains).
	clocks map[int]int
	// applied is the clock alignment import applied to the records before
	// ingesting them (one estimate over all of them), nil for one clock.
	applied *analysis.Offsets
	// peaks says what the report's peak device memory measures, where
	// the records' source is not the built-in trainer.
	peaks peakSource
	// ranks are the ranks whose files (report.rank<N>, calls.rank<N>.gz)
	// the outputs will hold, where known before they start: none for a
	// wrapped command.
	ranks []int

	// Destinations. File outputs default to the run directory ("" there
	// means the default name; "off" turns one off); network ones are off
	// unless asked, except the loopback /metrics listener.
	report, pprofPath, tracePath string
	metricsAddr                  string
	metricsLinger                time.Duration
	metricsDetail                bool
	pushgateway                  string
	otlpEndpoint, otlpProtocol   string
	otlpInsecure                 bool
	serviceName                  string

	// What profile-run says while it runs.
	logFormat, logLevel string
	progress            string        // "auto", "bar", "log", "off"
	progressEvery       time.Duration // "log": one line this often
	quietSteps          bool          // no per-step loss lines
	deprecations        []string      // logged once the logger exists
	warnings            []string      // flags without effect, logged likewise

	// detail is the steps the trace and the per-call log cover.
	detail profiler.StepWindow
	// callLogMiB caps each rank's complete call log (0: none written).
	callLogMiB int
}

var errHelp = errors.New("help requested")

// usageError is a command-line mistake: one line, exit code 2.
type usageError struct{ msg string }

func (e *usageError) Error() string { return e.msg }

func usagef(format string, args ...any) error { return &usageError{fmt.Sprintf(format, args...)} }

// setupFailed says whether err, from reading a command line or setting up
// from it, ends the run, and with what status, having said on stderr what
// went wrong: nothing after -h (exit 0), the mistake and where help is
// (help, e.g. "profile-run import") for a usage error (exit 2), the error
// itself for anything else (exit 1).
func setupFailed(err error, stderr io.Writer, help string) (code int, failed bool) {
	var ue *usageError
	switch {
	case err == nil:
		return exitOK, false
	case errors.Is(err, errHelp):
		return exitOK, true
	case errors.As(err, &ue):
		fmt.Fprintf(stderr, "profile-run: %s (see %s -h)\n", ue.msg, help)
		return exitUsage, true
	}
	fmt.Fprintf(stderr, "profile-run: %v\n", err)
	return exitFail, true
}

func parseFlags(args []string, stderr io.Writer) (*options, error) {
	def := pipeline.DefaultConfig()
	o := &options{train: def, args: args}
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
	dtype := fs.String("dtype", "float32", "compute precision of the model's GEMMs: float32 (or fp32: full precision), tf32 or bf16 (tensor cores, accumulating in fp32; weights and activations stay float32); a backend without it runs in float32 and says so")
	fs.DurationVar(&c.CommTimeout, "comm-timeout", def.CommTimeout, "deadline for any one communication or device wait, and for the device work already queued once training stops (a signal, a failure)")
	fs.StringVar(&o.backend, "backend", "auto", "device backend: auto, cpu or cuda")
	fs.DurationVar(&c.ActionDelay, "action-delay", 0, "add this much device time to every forward and backward action (backends that can hold a stream still: cpu, cuda; for checking the pipeline analysis)")
	fs.IntVar(&c.StragglerRank, "straggler-rank", 0, "the rank -straggler-delay slows (only with -straggler-delay)")
	fs.DurationVar(&c.StragglerDelay, "straggler-delay", 0, "add this much device time per microbatch on -straggler-rank (cpu and cuda backends; for checking the straggler analysis, which measures waiting at collectives with -dp 2 or more, and without data parallelism the stage balance)")
	fs.IntVar(&c.Devices, "devices", 0, "use at most this many devices (0: all); with fewer devices than ranks (pp·dp), ranks share them and communicate in process")
	fs.StringVar(&o.outDir, "out", "trainscope-out", "directory for this run's outputs (a new subdirectory per run)")
	sortBy := fs.String("sort", "host_total", "report sort column: "+strings.Join(profiler.SortKeys(), ", "))
	fs.StringVar(&o.profile, "profile", "on", "profiling: on, off (train only: nothing recorded, so no files, /metrics or spans; flags that shape them are said to have no effect), or sync (synchronise the stream around every range, as simple event-based profilers do; to compare their cost)")
	fs.StringVar(&o.timing, "device-timing", "events", "how device ranges are timed: events (two event records in the stream per range, or one where neighbours share) or trace (from the backend's trace of its device work: CUPTI's activity records on cuda, nothing put in the streams; what -device-depth 0 costs least with)")
	fs.IntVar(&o.depth, "device-depth", 1, "time on the device only ranges nested at most this deep among device ranges (1: each action, not its kernels); collectives always; 0 times every kernel, at about one event record of host time each")
	fs.StringVar(&o.report, "report", "", `summary report file (default <run dir>/report.txt, with report.rank<N> beside it; "off" to skip the files: the summary is still printed)`)
	fs.BoolVar(&o.quiet, "quiet", false, "do not print the summary tables on stdout (the report files are still written)")
	fs.StringVar(&o.pprofPath, "pprof", "", `pprof profile (default <run dir>/profile.pb.gz; "off" to skip)`)
	fs.StringVar(&o.tracePath, "trace", "", `Perfetto/Chrome trace JSON (default <run dir>/trace.json; "off" to skip)`)
	fs.StringVar(&o.metricsAddr, "metrics-addr", "127.0.0.1:9464", `serve Prometheus /metrics here during the run ("off" to skip; a host other than loopback only when named)`)
	fs.DurationVar(&o.metricsLinger, "metrics-linger", 0, "keep serving /metrics this long after training, so a scraper sees the final values (not with -metrics-addr off or -profile off)")
	fs.BoolVar(&o.metricsDetail, "metrics-detail", false, "export per-name range histograms and record counts per rank, stage, chunk and phase, and collectives by message size (series grow with ranks × names; docs/metrics.md)")
	fs.StringVar(&o.pushgateway, "pushgateway", "", "push a final metrics summary to this Pushgateway URL (for batch jobs)")
	fs.StringVar(&o.otlpEndpoint, "otlp-endpoint", "", "send spans over OTLP to this endpoint (host:port or URL); OTEL_EXPORTER_OTLP_ENDPOINT also turns it on")
	fs.StringVar(&o.otlpProtocol, "otlp-protocol", "", "OTLP protocol: grpc or http/protobuf (default: OTEL_EXPORTER_OTLP_PROTOCOL, else http/protobuf)")
	fs.BoolVar(&o.otlpInsecure, "otlp-insecure", false, "plaintext OTLP to a host:port endpoint (implied for loopback; a URL's scheme decides)")
	fs.StringVar(&o.serviceName, "service-name", "", "service.name of the spans (default: OTEL_SERVICE_NAME, else profile-run)")
	detail := fs.String("trace-steps", "", "steps the trace and the per-call logs in report.rank<N> cover (calls.rank<N>.gz has every step), comma-separated: A-B, A, last:N (the run's last N steps) or all (default 1-5,last:5: the first steps after the warm-up step 0 and the run's last 5; step 0 only on a run of at most 5 steps)")
	fs.IntVar(&o.callLogMiB, "call-log-size", 64, "cap, in MiB uncompressed, of each rank's complete call log (calls.rank<N>.gz, written as ranges finish, beside the report: in the run directory unless -report names a file elsewhere; none with -report off); 0 writes none")
	fs.StringVar(&o.logFormat, "log-format", logConsole, "log format on stderr: console (human-readable) or json (for log collectors)")
	fs.StringVar(&o.logLevel, "log-level", "info", "log level: debug, info, warn or error")
	fs.StringVar(&o.progress, "progress", "auto", "progress while training: auto (a status line on a terminal, else a log line every -progress-every; a wrapped command's: nothing off a terminal), bar (the status line; off a terminal a log line), log or off")
	fs.DurationVar(&o.progressEvery, "progress-every", 10*time.Second, "how often -progress log writes a line")
	fs.StringVar(&o.pipelineGroup, "pipeline-group", "", `a wrapped command's communicator whose ranks are pipeline stages (default: the largest whose name holds "pipe" or the word "pp" and no other parallel dimension, as Megatron-LM's PIPELINE_MODEL_PARALLEL_GROUP; where none is so named, the communicators a process sends and receives over): each process's rank in it is its stage, for bubbles per stage; "none" stages no process (docs/wrap.md)`)
	fs.StringVar(&o.pipelineSchedule, "pipeline-schedule", "", `a wrapped pipeline's schedule, "microbatches=M" or "microbatches=M,vpp=V" (V virtual chunks per stage, default 1): the ideal bubble (p−1)/(v·m+p−1) is then reported beside the measured one (docs/wrap.md)`)
	fs.StringVar(&o.stepRange, "step-range", profiler.StepName, `a wrapped command's NVTX range that brackets one training step ("step 12", "step_12" count too; "" for none): its ranges and NCCL operations are then accounted per step (docs/wrap.md)`)
	fs.BoolVar(&o.kernels, "kernels", true, "trace a wrapped command's kernels, memory copies and memsets on the GPU (CUPTI, through the plugin as the command's CUDA injection library), for busy and idle time per step; false leaves CUPTI to the command (torch.profiler, Nsight) (docs/wrap.md)")
	fs.BoolVar(&o.kernelLabels, "kernel-labels", true, `label a wrapped command's kernels with the phase, chunk and microbatch of the NVTX range they were launched in, where its name says ("forward chunk 1 microbatch 3", "bwd_mb3"), for bubbles per chunk and the ideal bubble; costs a CUPTI callback at each launch once such a range is pushed (docs/wrap.md)`)
	fs.BoolVar(&o.quietSteps, "no-step-lines", false, "do not print each step's loss line (the progress line or log still shows it)")
	printUsage := func() {
		fmt.Fprint(stderr, `Usage:
  profile-run [flags]                 train the built-in pipelined model on the best
                                      available backend and report where each step's
                                      time went
  profile-run [flags] -- CMD ARGS…    run CMD (torchrun, python, mpirun, …) and record
                                      every NCCL collective and p2p of it and of the
                                      processes it starts (docs/wrap.md)
  profile-run import [flags] FILE…    load torch.profiler traces or the C++ framework
                                      profiler's call logs (profile-run import -h)
  profile-run report RUN_DIR          print a run's text report again
  profile-run report RUN_DIR --html   write RUN_DIR/report.html: the pipeline chart of
                                      the steps the run's trace kept, bubbles,
                                      stragglers, top ranges (profile-run report -h)
  profile-run compare BASE NEW        compare two runs' summaries: step time, bubble,
                                      waiting, the ranges that moved; -fail-above 5%
                                      gates a CI job on the step time (profile-run compare -h)
  profile-run version [-json]         this build, the host, and what each backend finds
                                      here: devices, library versions, or why not

Flags:
`)
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
		return nil, flagError("", fs, err, map[string]string{
			"html": "the HTML page comes from profile-run report RUN_DIR --html, after the run",
		})
	}
	// A flag whose value was left out before -- (-out -- CMD) takes --
	// as its value, and the flags end at CMD: it would run with that
	// flag set to "--", its outputs in a directory so named.
	var dashes string
	fs.Visit(func(f *flag.Flag) {
		if f.Value.String() == "--" && dashes == "" {
			dashes = f.Name
		}
	})
	if dashes != "" {
		return nil, usagef("-%s --: -%s needs a value before -- (which ends the flags); for a path named --, write ./--", dashes, dashes)
	}
	o.command = fs.Args()
	rest := len(args) - len(o.command)
	wrapping := rest > 0 && args[rest-1] == "--"
	switch {
	case wrapping && len(o.command) == 0:
		return nil, usagef("nothing after --: name the command to profile (profile-run [flags] -- CMD ARGS…)")
	case !wrapping && len(o.command) > 0 && o.command[0] == "import":
		// import takes the flags of a run's outputs.
		return nil, usagef("import is a subcommand and comes first, before any flag: profile-run import %s", commandLine(append(args[:rest:rest], o.command[1:]...)))
	case !wrapping && len(o.command) > 0 && (o.command[0] == "report" || o.command[0] == "compare"):
		// Flags of their own, none of a run's.
		return nil, usagef("%s is a subcommand and comes first, before any flag, and takes flags of its own (profile-run %s -h): profile-run %s %s",
			o.command[0], o.command[0], o.command[0], commandLine(o.command[1:]))
	case wrapping && o.command[0] == "":
		return nil, usagef("an empty command after --: name the command to profile (profile-run [flags] -- CMD ARGS…)")
	case !wrapping && len(o.command) > 0:
		for _, sub := range []string{"import", "report", "compare", "help"} {
			if d := editDistance(o.command[0], sub); d > 0 && d <= 2 {
				return nil, usagef("unexpected arguments %q: did you mean the subcommand %s (profile-run %s)? To profile a command, put it after --: profile-run [flags] -- %s",
					o.command, sub, commandLine(append([]string{sub}, o.command[1:]...)), commandLine(o.command))
			}
		}
		return nil, usagef("unexpected arguments %q: to profile a command, put it after --: profile-run [flags] -- %s", o.command, commandLine(o.command))
	}
	if wrapping {
		var misplaced []string
		fs.Visit(func(f *flag.Flag) {
			if trainerFlags[f.Name] {
				misplaced = append(misplaced, "-"+f.Name)
			}
		})
		if len(misplaced) > 0 {
			verb := "sets up the built-in trainer and means"
			if len(misplaced) > 1 {
				verb = "set up the built-in trainer and mean"
			}
			return nil, usagef("%s %s nothing to a wrapped command", strings.Join(misplaced, ", "), verb)
		}
		if o.profile != "on" {
			return nil, usagef("-profile %s: a wrapped command is profiled through its NCCL calls; to run it unprofiled, run it without profile-run", o.profile)
		}
	}
	set := map[string]bool{}
	fs.Visit(func(f *flag.Flag) { set[f.Name] = true })
	if set["kernels"] && !wrapping {
		return nil, usagef("-kernels traces a wrapped command's kernels: the built-in trainer times its own (-device-depth) (profile-run [flags] -- CMD ARGS…)")
	}
	if set["kernel-labels"] && !wrapping {
		return nil, usagef("-kernel-labels labels a wrapped command's kernels: the built-in trainer labels its own work (profile-run [flags] -- CMD ARGS…)")
	}
	if set["pipeline-schedule"] {
		if !wrapping {
			return nil, usagef("-pipeline-schedule %q describes a wrapped command's pipeline: the built-in trainer knows its own (-vpp, -microbatches) (profile-run [flags] -- CMD ARGS…)", o.pipelineSchedule)
		}
		var err error
		if o.schedChunks, o.schedMB, err = parseSchedule(o.pipelineSchedule); err != nil {
			return nil, usagef("-pipeline-schedule %q: %v", o.pipelineSchedule, err)
		}
	}
	if set["pipeline-group"] && !wrapping {
		return nil, usagef("-pipeline-group %q names a wrapped command's pipeline communicator: the built-in trainer knows its stages (profile-run [flags] -- CMD ARGS…)", o.pipelineGroup)
	}
	if set["step-range"] && !wrapping {
		return nil, usagef("-step-range %q names a wrapped command's NVTX step range: it means nothing to the built-in trainer (profile-run [flags] -- CMD ARGS…)", o.stepRange)
	}
	if set["straggler-rank"] && c.StragglerDelay == 0 {
		// The rank alone slows nothing; with the delay, the configuration
		// check refuses a rank beyond the job.
		return nil, usagef("-straggler-rank %d needs -straggler-delay: the rank alone slows nothing", c.StragglerRank)
	}
	normalizeKeywords(o, sortBy, detail)
	c.LearningRate = *lr
	var err error
	if c.Precision, err = runtime.ParseMathMode(*dtype); err != nil {
		var re *runtime.Error
		if errors.As(err, &re) {
			return nil, usagef("-dtype: %s", re.Detail)
		}
		return nil, usagef("-dtype: %v", err)
	}
	if o.sortBy, err = profiler.ParseSortKey(*sortBy); err != nil {
		return nil, usagef("-sort: %v", err)
	}
	switch o.profile {
	case "on", "off", "sync":
	case "seed-sync":
		// The former name of sync, accepted for one release.
		o.deprecations = append(o.deprecations, "-profile seed-sync is deprecated; use -profile sync")
		o.profile = "sync"
	default:
		return nil, usagef("-profile: unknown mode %q (one of: on, off, sync)", o.profile)
	}
	if o.detail, err = profiler.ParseStepWindow(*detail); err != nil {
		return nil, usagef("-trace-steps: %v", err)
	}
	// The built-in trainer's steps are known now: a window that keeps none
	// of them would leave the trace and the per-step tables empty.
	if len(o.command) == 0 && c.Steps > 0 && !o.detail.KeepsAny(0, c.Steps-1) {
		runs := fmt.Sprintf("steps 0–%d", c.Steps-1)
		if c.Steps == 1 {
			runs = "step 0"
		}
		return nil, usagef("-trace-steps %s keeps none of the steps -steps %d runs (%s)", o.detail, c.Steps, runs)
	}
	if o.callLogMiB < 0 {
		return nil, usagef("-call-log-size %d: must not be negative", o.callLogMiB)
	}
	switch o.progress {
	case "auto", "bar", "log", "off":
	default:
		return nil, usagef("-progress: unknown mode %q (one of: auto, bar, log, off)", o.progress)
	}
	if o.progressEvery <= 0 {
		return nil, usagef("-progress-every %v: must be positive", o.progressEvery)
	}
	if o.depth < 0 {
		return nil, usagef("-device-depth %d: must not be negative", o.depth)
	}
	switch o.timing {
	case "events":
	case "trace":
		if o.profile == "sync" {
			return nil, usagef("-device-timing trace times ranges without synchronising: it does not go with -profile sync")
		}
	default:
		return nil, usagef("-device-timing: unknown mode %q (one of: events, trace)", o.timing)
	}
	if c.CommTimeout <= 0 {
		return nil, usagef("-comm-timeout %v: must be positive", c.CommTimeout)
	}
	if strings.TrimSpace(o.outDir) == "" {
		return nil, usagef("-out: empty directory name")
	}
	if err := checkOutputFlags(o); err != nil {
		return nil, err
	}
	if o.profile == "off" {
		for name, v := range map[string]string{"-pprof": o.pprofPath, "-trace": o.tracePath, "-report": o.report, "-pushgateway": o.pushgateway, "-otlp-endpoint": o.otlpEndpoint} {
			if v != "" && v != "off" {
				return nil, usagef("%s needs profiling, but -profile is off", name)
			}
		}
		// Without profiling nothing is recorded, so /metrics is not
		// served: asked for, it is a mistake (as with -metrics-addr off).
		for _, name := range []string{"metrics-addr", "metrics-linger", "metrics-detail"} {
			if set[name] && !(name == "metrics-addr" && o.metricsAddr == "off") {
				return nil, usagef("-%s: /metrics needs profiling, but -profile is off", name)
			}
		}
		// Flags that only shape what profiling records have nothing to
		// shape: said, not refused, so that one command line compares
		// -profile on and off.
		for _, name := range []string{"trace-steps", "call-log-size", "device-depth", "device-timing", "sort", "otlp-protocol", "service-name"} {
			if set[name] {
				o.warnings = append(o.warnings, fmt.Sprintf("-%s has no effect: -profile is off, so nothing is recorded", name))
			}
		}
		// The standard variable asks for spans as -otlp-endpoint does;
		// a wrapped command may use it for its own, so only the
		// built-in trainer's run says so.
		if ep := otel.EnvEndpoint(); ep != "" && len(o.command) == 0 {
			o.warnings = append(o.warnings, fmt.Sprintf("the OTLP endpoint of the environment (%s) has no effect: -profile is off, so no spans are sent", ep))
		}
	}
	if set["call-log-size"] && o.callLogMiB > 0 && o.report == "off" {
		// The call logs are written beside the report's files.
		return nil, usagef("-call-log-size %d: the call logs go beside the report (calls.rank<N>.gz), but -report is off", o.callLogMiB)
	}
	return o, nil
}

// normalizeKeywords writes the flags' keywords as they are defined
// (-schedule GPIPE as gpipe, -report OFF as off), so that the case a
// user typed them in changes nothing: not whether they are taken, nor
// what the first line, the report and summary.json say. A value that is
// no keyword (a path, an address) is left as given.
func normalizeKeywords(o *options, sortBy, traceSteps *string) {
	keyword := func(v *string, words ...string) {
		for _, w := range words {
			if strings.EqualFold(*v, w) {
				*v = w
				return
			}
		}
	}
	keyword(&o.train.Schedule, pipeline.Schedule1F1B, pipeline.ScheduleGPipe)
	keyword(&o.backend, "auto", "cpu", "cuda")
	keyword(&o.profile, "on", "off", "sync", "seed-sync")
	keyword(&o.timing, "events", "trace")
	keyword(&o.progress, "auto", "bar", "log", "off")
	keyword(&o.logFormat, logConsole, logJSON)
	keyword(&o.otlpProtocol, otel.ProtocolGRPC, otel.ProtocolHTTP)
	for _, v := range []*string{&o.report, &o.pprofPath, &o.tracePath, &o.metricsAddr} {
		keyword(v, "off")
	}
	if sortBy != nil {
		keyword(sortBy, profiler.SortKeys()...)
	}
	if traceSteps != nil {
		// "all", "last:5": keywords and numbers only.
		*traceSteps = strings.ToLower(*traceSteps)
	}
}

// checkOutputFlags checks the output flags a run and an import share: a
// value no destination accepts, or one that cannot take effect with the
// others, is a usage error before anything starts.
func checkOutputFlags(o *options) error {
	switch o.otlpProtocol {
	case "", otel.ProtocolGRPC, otel.ProtocolHTTP:
	default:
		return usagef("-otlp-protocol: unknown protocol %q (one of: %s, %s)", o.otlpProtocol, otel.ProtocolGRPC, otel.ProtocolHTTP)
	}
	if o.otlpEndpoint != "" {
		if err := checkOTLPEndpoint(o.otlpEndpoint); err != nil {
			return usagef("-otlp-endpoint %q: %v (HOST:PORT, or an http:// or https:// URL)", o.otlpEndpoint, err)
		}
	}
	if o.metricsAddr != "off" {
		if err := checkListenAddr(o.metricsAddr); err != nil {
			return usagef("-metrics-addr %q: %v (HOST:PORT, :PORT for loopback, or off)", o.metricsAddr, err)
		}
	}
	if o.metricsLinger < 0 {
		return usagef("-metrics-linger %v: must not be negative", o.metricsLinger)
	}
	if o.metricsLinger > 0 && o.metricsAddr == "off" {
		return usagef("-metrics-linger %v keeps /metrics up, but -metrics-addr is off", o.metricsLinger)
	}
	if o.metricsDetail && o.metricsAddr == "off" && o.pushgateway == "" {
		return usagef("-metrics-detail shapes the metrics served or pushed, but -metrics-addr is off and there is no -pushgateway")
	}
	if o.pushgateway != "" {
		u, err := url.Parse(o.pushgateway)
		if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
			return usagef("-pushgateway: %q is not an http(s) URL", o.pushgateway)
		}
	}
	return nil
}

// checkOTLPEndpoint checks the form of -otlp-endpoint as the exporter
// reads it: a URL when it has a scheme (http or https, with a host), else
// HOST:PORT. Whether anything listens there is found when sending, and
// is no usage error.
func checkOTLPEndpoint(endpoint string) error {
	if strings.Contains(endpoint, "://") {
		u, err := url.Parse(endpoint)
		switch {
		case err != nil:
			return err
		case u.Scheme != "http" && u.Scheme != "https":
			return fmt.Errorf("scheme %q is not http or https", u.Scheme)
		case u.Host == "":
			return errors.New("no host")
		}
		return nil
	}
	_, port, err := net.SplitHostPort(endpoint)
	if err != nil {
		if ae := (*net.AddrError)(nil); errors.As(err, &ae) {
			return errors.New(ae.Err)
		}
		return err
	}
	if port == "" {
		return errors.New("no port")
	}
	return nil
}

// checkListenAddr checks the form of an address to serve on: HOST:PORT
// with a port number (or a service name the system knows). Whether it can
// be listened on — a port in use — is found when serving, and is no
// usage error.
func checkListenAddr(addr string) error {
	_, port, err := net.SplitHostPort(addr)
	if err != nil {
		if ae := (*net.AddrError)(nil); errors.As(err, &ae) {
			return errors.New(ae.Err)
		}
		return err
	}
	if _, err := net.LookupPort("tcp", port); err != nil {
		return fmt.Errorf("port %q is not a port number", port)
	}
	return nil
}

// trainerFlags set up the built-in trainer; a wrapped command has no use
// for them. Every flag of configFlags is one (a test checks).
var trainerFlags = map[string]bool{
	"pp": true, "vpp": true, "dp": true, "microbatches": true, "microbatch-size": true, "steps": true,
	"width": true, "layers": true, "schedule": true, "seed": true, "lr": true, "dtype": true,
	"comm-timeout": true, "backend": true, "devices": true, "device-depth": true, "device-timing": true, "no-step-lines": true,
	"action-delay": true, "straggler-rank": true, "straggler-delay": true,
}

// configFlags names the flag that sets each pipeline.Config field, so that
// a configuration error names what the user typed (-pp 0), not the field
// (Stages=0).
var configFlags = map[string]string{
	"Backend":        "-backend",
	"Stages":         "-pp",
	"Chunks":         "-vpp",
	"Replicas":       "-dp",
	"Devices":        "-devices",
	"Microbatches":   "-microbatches",
	"MicrobatchSize": "-microbatch-size",
	"Width":          "-width",
	"Layers":         "-layers",
	"Steps":          "-steps",
	"Schedule":       "-schedule",
	"LearningRate":   "-lr",
	"Seed":           "-seed",
	"CommTimeout":    "-comm-timeout",
	"Precision":      "-dtype",
	"ActionDelay":    "-action-delay",
	"StragglerRank":  "-straggler-rank",
	"StragglerDelay": "-straggler-delay",
}

// asFlag names a Config field as its flag, followed by the value where
// there is one: pipeline.ConfigError.Explain's namer for the command line.
func asFlag(field string, value any) string {
	name, ok := configFlags[field]
	if !ok {
		name = field // not set from a flag; the library's name is all there is
	}
	switch v := value.(type) {
	case nil:
		return name
	case string:
		if v == "" || strings.ContainsAny(v, " \t\"") {
			return fmt.Sprintf("%s %q", name, v)
		}
	}
	return fmt.Sprintf("%s %v", name, value)
}

// parseSchedule reads -pipeline-schedule: "microbatches=M" and optionally
// ",vpp=V", in any order.
func parseSchedule(s string) (chunks, microbatches int, err error) {
	chunks = 1
	seen := map[string]bool{}
	for _, part := range strings.Split(s, ",") {
		key, val, ok := strings.Cut(strings.TrimSpace(part), "=")
		n, perr := strconv.Atoi(strings.TrimSpace(val))
		switch {
		case !ok:
			return 0, 0, fmt.Errorf("%q is not key=value (want microbatches=M, and vpp=V if the schedule interleaves)", part)
		case key != "microbatches" && key != "vpp":
			return 0, 0, fmt.Errorf("unknown key %q (want microbatches and vpp)", key)
		case seen[key]:
			return 0, 0, fmt.Errorf("%s given twice", key)
		case perr != nil || n < 1:
			return 0, 0, fmt.Errorf("%s=%s is not a count of at least 1", key, val)
		}
		seen[key] = true
		if key == "vpp" {
			chunks = n
		} else {
			microbatches = n
		}
	}
	if microbatches == 0 {
		return 0, 0, errors.New("microbatches=M is missing")
	}
	return chunks, microbatches, nil
}

// flagError is the usage error for a command line fs refused, led by
// prefix. The flag package names a flag it does not know and no more: the
// message adds the flags of fs nearest to it as typed (-step: -steps), or
// what elsewhere says of that name, a flag of another command.
func flagError(prefix string, fs *flag.FlagSet, err error, elsewhere map[string]string) error {
	msg := err.Error()
	if name, ok := strings.CutPrefix(msg, "flag provided but not defined: -"); ok {
		if hint, ok := elsewhere[name]; ok {
			msg += ": " + hint
		} else if near := nearFlags(fs, name); len(near) > 0 {
			list := near[len(near)-1]
			if len(near) > 1 {
				list = strings.Join(near[:len(near)-1], ", ") + " or " + list
			}
			msg += ": did you mean " + list + "?"
		}
	}
	if m := invalidValue.FindStringSubmatch(msg); m != nil && m[3] == "parse error" {
		if want := wantedValue(fs.Lookup(m[2])); want != "" {
			msg = fmt.Sprintf("invalid value %q for flag -%s: want %s", m[1], m[2], want)
		}
	}
	if m := invalidBool.FindStringSubmatch(msg); m != nil {
		msg = fmt.Sprintf("invalid value %q for flag -%s: want %s", m[1], m[2], wantedValue(fs.Lookup(m[2])))
	}
	return usagef("%s%v", prefix, msg)
}

// invalidValue is the flag package's message for a value its flag's type
// does not parse: the value, the flag, the parser's error.
var invalidValue = regexp.MustCompile(`^invalid value "(.*)" for flag -([^:]+): (.*)$`)

// invalidBool is its message for a boolean flag's value (-quiet=maybe).
var invalidBool = regexp.MustCompile(`^invalid boolean value "(.*)" for -([^:]+): parse error$`)

// wantedValue says what a value of f's type looks like, where the flag
// package says only "parse error"; "" for a type of its own, whose
// error says more.
func wantedValue(f *flag.Flag) string {
	if f == nil {
		return ""
	}
	g, ok := f.Value.(flag.Getter)
	if !ok {
		return ""
	}
	switch g.Get().(type) {
	case time.Duration:
		return "a duration with its unit, such as 30s, 500ms or 2m"
	case int, int64, uint, uint64:
		return "a whole number"
	case float64:
		return "a number"
	case bool:
		return "true or false (-" + f.Name + " alone is true)"
	}
	return ""
}

// nearFlags names at most three flags of fs that name may be a typo of,
// nearest first: within one edit of it (two for a name longer than four
// letters; a swap of two letters is two), or beginning with it where it
// has three letters or more.
func nearFlags(fs *flag.FlagSet, name string) []string {
	type near struct {
		name string
		dist int
	}
	var found []near
	most := 1
	if len([]rune(name)) > 4 {
		most = 2
	}
	fs.VisitAll(func(f *flag.Flag) {
		d := editDistance(name, f.Name)
		if d <= most || (len(name) >= 3 && strings.HasPrefix(f.Name, name)) {
			found = append(found, near{f.Name, d})
		}
	})
	slices.SortStableFunc(found, func(a, b near) int { return a.dist - b.dist })
	var out []string
	for i := 0; i < len(found) && i < 3; i++ {
		out = append(out, "-"+found[i].name)
	}
	return out
}

// editDistance is the Levenshtein distance between a and b, in runes.
func editDistance(a, b string) int {
	ra, rb := []rune(a), []rune(b)
	prev := make([]int, len(rb)+1)
	cur := make([]int, len(rb)+1)
	for j := range prev {
		prev[j] = j
	}
	for i := 1; i <= len(ra); i++ {
		cur[0] = i
		for j := 1; j <= len(rb); j++ {
			cost := 1
			if ra[i-1] == rb[j-1] {
				cost = 0
			}
			cur[j] = min(prev[j]+1, cur[j-1]+1, prev[j-1]+cost)
		}
		prev, cur = cur, prev
	}
	return prev[len(rb)]
}
