package main

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"go.uber.org/zap"
	"golang.org/x/sys/unix"

	"github.com/trainscope/trainscope/ccl/nccl"
	"github.com/trainscope/trainscope/internal/ncclplugin"
	"github.com/trainscope/trainscope/profiler"
	"github.com/trainscope/trainscope/profiler/analysis"
	"github.com/trainscope/trainscope/runtime"
)

// Exit statuses of a command that could not be run, as shells give them.
const (
	exitCannotExecute = 126
	exitNotFound      = 127
)

const (
	// envNCCLPlugin is where NCCL looks for a profiler plugin.
	envNCCLPlugin = "NCCL_PROFILER_PLUGIN"
	// envNVTXInjection is where NVTX looks for a tool to hand the
	// application's ranges to; the plugin is one.
	envNVTXInjection = "NVTX_INJECTION64_PATH"
	// envCUDAInjection is where the CUDA driver looks for a library to
	// load at cuInit; the plugin is one, and traces kernels through
	// CUPTI.
	envCUDAInjection = "CUDA_INJECTION64_PATH"
	// envCUPTI turns the plugin's kernel tracing off ("0").
	envCUPTI = "TRAINSCOPE_CUPTI"
	// envCUPTILabels turns the plugin's kernel labels off ("0").
	envCUPTILabels = "TRAINSCOPE_CUPTI_LABELS"
	// locateTimeout bounds building the plugin on first use.
	locateTimeout = 2 * time.Minute
	// collectorCloseTimeout bounds the wait, once the command has ended,
	// for plugin connections its leftover processes still hold.
	collectorCloseTimeout = 10 * time.Second
	// waitDelay bounds the wait for the command's output once it has
	// exited, should a process it left behind hold the pipes.
	waitDelay = 5 * time.Second
)

// leftoverGrace is how long processes the command left behind have
// between SIGTERM and SIGKILL (a variable for tests).
var leftoverGrace = 5 * time.Second

// leftoverSettle is how long processes that die with the command (killed
// with its process group) are given to become zombies and be reaped
// before those still there are reported as left behind.
const leftoverSettle = 100 * time.Millisecond

// wrapper is one run of `profile-run [flags] -- CMD ARGS…`.
type wrapper struct {
	in             *interrupt
	o              *options
	log            *zap.Logger
	stdout, stderr io.Writer

	prof   *profiler.Profiler
	out    *outputs
	plugin ncclplugin.Located
	col    *ncclplugin.Collector
	noNCCL string // why no collective can be recorded, when none can
	// nvtxElsewhere is the NVTX tool the command's environment already
	// named, which keeps its ranges.
	nvtxElsewhere string
	// cudaElsewhere is the CUDA injection library the command's
	// environment already named (Nsight Systems'): kept, so kernels are
	// not traced.
	cudaElsewhere string
	started       time.Time
	cpuAtStart    time.Duration // profile-run's own CPU time when the command started
	// The progress line's latest word on the collectives' cycle, when
	// it was searched for and how long that took (progressCycle; the
	// progress goroutine's).
	cycleAt   time.Time
	cycleTook time.Duration
	cycleText string
}

// wrappedPeakNote is what a wrapped process's peak device memory is.
const wrappedPeakNote = "held through CUDA allocation calls: the framework's cached pool and NCCL's and libraries' buffers, not only tensors"

// runWrapped runs o.command under the profiler and returns the command's
// exit status (128+N when signal N ended it); what happens to the
// telemetry never changes it.
func runWrapped(in *interrupt, o *options, log *zap.Logger, stdout, stderr io.Writer) int {
	in.wrapping()
	w := &wrapper{in: in, o: o, log: log, stdout: stdout, stderr: stderr}
	// CUPTI's memory records count what each process obtained from CUDA,
	// not its tensors: say so beside the figure.
	o.peaks.note = func(int) string { return wrappedPeakNote }
	// The outputs take the records in at once, each on a core of its own
	// where there are cores: at the rates of a launch-bound job on eight
	// GPUs, one after another they were the collector's bound.
	prof, err := profiler.New(profiler.WithMaxRecords(0), profiler.WithConcurrentSinks())
	if err != nil {
		log.Error(err.Error())
		return exitFail
	}
	w.prof = prof
	defer func() {
		ctx, cancel := context.WithTimeout(in.abort, flushTimeout)
		defer cancel()
		_ = prof.Close(ctx)
	}()
	if w.out, err = openOutputs(in.abort, o, prof, log); err != nil {
		// Nothing has run yet: an output that cannot be written is the
		// user's to fix before the job starts, not hours into it.
		var ue *usageError
		if errors.As(err, &ue) {
			fmt.Fprintf(stderr, "profile-run: %s (see profile-run -h)\n", ue.msg)
			return exitUsage
		}
		log.Error(err.Error())
		return exitFail
	}
	w.startCollector()
	// Should a wait that no signal reaches (a killed process slow to go,
	// a GPU's teardown) keep profile-run past a second signal's grace, it
	// ends without finishing: it says so, as a run of the built-in
	// trainer does, and leaves neither empty files nor the collector's
	// socket directory behind. (The plugin's build, before, ends with
	// the first signal.)
	col := w.col
	in.onHardExit(func() {
		if col != nil {
			_ = os.RemoveAll(filepath.Dir(col.SocketPath()))
		}
		if msg := w.out.abandon(context.Cause(in.abort)); msg != "" {
			log.Warn(msg)
			_ = log.Sync()
		}
	})
	defer in.onHardExit(nil)
	code, ran := w.runCommand()
	in.trainingDone()
	if !ran {
		// The command never started: there is nothing to write.
		if w.col != nil {
			ctx, cancel := context.WithTimeout(in.abort, collectorCloseTimeout)
			_ = w.col.Close(ctx)
			cancel()
		}
		w.out.removeFiles()
		return code
	}
	w.finish(code)
	return code
}

// startCollector finds the plugin and listens for the command's
// processes. Neither is allowed to stop the command from running: when
// one fails, noNCCL says why, and the command runs unprofiled.
func (w *wrapper) startCollector() {
	ctx, cancel := context.WithTimeout(w.in.stop, locateTimeout)
	defer cancel()
	loc, err := ncclplugin.Locate(ctx, "")
	if err != nil {
		w.noNCCL = err.Error()
		w.log.Warn("NCCL collectives will not be recorded; the command runs all the same", zap.Error(err))
		return
	}
	w.plugin = loc
	if loc.How == "built" {
		w.log.Info("built the NCCL profiler plugin", zap.String("path", loc.Path))
	}
	col, err := ncclplugin.NewCollector(w.prof, ncclplugin.WithStepRange(w.o.stepRange), ncclplugin.WithPipelineGroup(w.o.pipelineGroup), ncclplugin.WithLocalSize(w.out.expectRanks))
	if err != nil {
		w.noNCCL = err.Error()
		w.log.Warn("NCCL collectives will not be recorded; the command runs all the same", zap.Error(err))
		return
	}
	w.col = col
}

// environ is the command's environment: profile-run's, with the plugin
// and the collector's socket when there is a collector.
func (w *wrapper) environ() []string {
	env := os.Environ()
	if w.col == nil {
		return env
	}
	out := env[:0:0]
	for _, kv := range env {
		name, value, _ := strings.Cut(kv, "=")
		switch name {
		case envNCCLPlugin:
			if value != w.plugin.Path {
				w.log.Warn(fmt.Sprintf("%s was set to %q; the command gets trainscope's plugin in its place", envNCCLPlugin, value))
			}
			continue
		case ncclplugin.EnvSocket:
			continue
		case envCUDAInjection:
			if value != w.plugin.Path && value != "" {
				if w.o.kernels {
					w.cudaElsewhere = value
					w.log.Warn(fmt.Sprintf("%s is set to %q, so that library, not trainscope, is the command's CUDA tool: kernels will not be traced", envCUDAInjection, value))
				}
				out = append(out, kv)
			}
			continue
		case envCUPTI, envCUPTILabels:
			continue
		case envNVTXInjection:
			if value != w.plugin.Path && value != "" {
				// Another tool (Nsight Systems) takes the ranges: it is the
				// user's, and there is only one.
				w.nvtxElsewhere = value
				w.log.Warn(fmt.Sprintf("%s is set to %q, so NVTX ranges go to that tool, not to trainscope: no steps will be accounted", envNVTXInjection, value))
				out = append(out, kv)
			}
			continue
		}
		out = append(out, kv)
	}
	out = append(out, envNCCLPlugin+"="+w.plugin.Path, w.col.Env())
	if w.nvtxElsewhere == "" {
		out = append(out, envNVTXInjection+"="+w.plugin.Path)
	}
	switch {
	case !w.o.kernels:
		out = append(out, envCUPTI+"=0")
	case w.cudaElsewhere == "":
		out = append(out, envCUDAInjection+"="+w.plugin.Path)
	}
	if w.o.kernels && !w.o.kernelLabels {
		out = append(out, envCUPTILabels+"=0")
	}
	return out
}

// runCommand starts the command in a process group of its own, forwards
// signals to that group, reports progress, and waits for it. ran is
// false when it could not be started.
func (w *wrapper) runCommand() (code int, ran bool) {
	env := w.environ()
	newCmd := func(name string, args ...string) *exec.Cmd {
		cmd := exec.Command(name, args...)
		cmd.Env = env
		cmd.Stdout, cmd.Stderr = childOutput(w.stdout), childOutput(w.stderr)
		// A terminal stays profile-run's: the command's group is not in
		// the foreground, and reading the terminal would stop it.
		if !isTerminal(os.Stdin) {
			cmd.Stdin = os.Stdin
		}
		cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
		cmd.WaitDelay = waitDelay
		return cmd
	}
	cmd := newCmd(w.o.command[0], w.o.command[1:]...)
	if err := becomeSubreaper(); err != nil {
		w.log.Warn("processes the command orphans will not be ended with it", zap.Error(err))
	}
	// Caught before the command starts, so that no Ctrl-Z stops
	// profile-run alone (forwardStops).
	stops := make(chan os.Signal, 4)
	signal.Notify(stops, syscall.SIGTSTP, syscall.SIGCONT)
	defer signal.Stop(stops)
	// Caught before the command starts, so that no orphan's exit is
	// missed (reapOrphans).
	chld := make(chan os.Signal, 1)
	signal.Notify(chld, syscall.SIGCHLD)
	defer signal.Stop(chld)
	if w.in.stop.Err() != nil {
		// A signal before the start (while the plugin was built, say):
		// the user no longer wants the command run.
		fmt.Fprintf(w.stderr, "profile-run: %v before %s started: not running it\n", context.Cause(w.in.stop), w.o.command[0])
		return w.in.exitCode(), false
	}
	err := cmd.Start()
	if errors.Is(err, syscall.ENOEXEC) {
		// A script without a #! line: /bin/sh runs it, as a shell or
		// execvp would.
		cmd = newCmd("/bin/sh", append([]string{cmd.Path}, w.o.command[1:]...)...)
		err = cmd.Start()
	}
	if err != nil {
		code := exitCannotExecute
		if errors.Is(err, exec.ErrNotFound) || errors.Is(err, os.ErrNotExist) {
			code = exitNotFound
		}
		if fi, serr := os.Stat(cmd.Path); serr == nil && fi.IsDir() {
			err = errors.New("it is a directory")
		}
		hint := ""
		if code == exitNotFound && strings.HasPrefix(w.o.command[0], "-") {
			// profile-run -- -steps 3: flags of profile-run's own go
			// before the --, the command after it.
			hint = " (everything after -- is the command to run; profile-run's own flags go before the --)"
		}
		fmt.Fprintf(w.stderr, "profile-run: cannot run %s: %v%s\n", w.o.command[0], err, hint)
		return code, false
	}
	w.started = time.Now()
	w.cpuAtStart, _, _ = cpuTime()
	fields := []zap.Field{zap.Int("pid", cmd.Process.Pid)}
	if w.col != nil {
		fields = append(fields, zap.String("nccl_plugin", w.plugin.Path))
	}
	if w.out.runDir != "" {
		fields = append(fields, zap.String("outputs", w.out.runDir))
	}
	w.log.Info("profiling "+commandLine(w.o.command), fields...)

	exited := make(chan struct{})
	var wg sync.WaitGroup
	wg.Add(4)
	go func() { defer wg.Done(); w.forwardSignals(cmd.Process.Pid, exited) }()
	go func() { defer wg.Done(); w.forwardStops(cmd.Process.Pid, stops, exited) }()
	go func() { defer wg.Done(); reapOrphans(cmd.Process.Pid, chld, exited) }()
	go func() { defer wg.Done(); w.progress(exited) }()
	err = cmd.Wait()
	close(exited)
	wg.Wait()
	w.endLeftovers(cmd.Process.Pid)
	return exitStatus(cmd, err, w.stderr), true
}

// endLeftovers ends what the command left running once it has exited:
// the rest of its process group, and the processes orphaned under
// profile-run (a subreaper, see runCommand) — torchrun starts each worker
// in a session of its own, and when torchrun is killed by SIGKILL they
// would go on holding their GPUs with nobody to wait for them. They get
// SIGTERM, then SIGKILL after leftoverGrace (at once after a second
// signal), and are reaped.
func (w *wrapper) endLeftovers(pgid int) {
	groupAlive := func() bool { return syscall.Kill(-pgid, 0) == nil }
	// Processes that ended with the command (its group killed by a second
	// signal, or a child exiting as it exited) are zombies until reaped,
	// and answer as alive: reaped first, and given leftoverSettle to
	// finish dying, they are not reported as left behind.
	var orphans []int
	for settle := time.Now().Add(leftoverSettle); ; time.Sleep(5 * time.Millisecond) {
		reapExited()
		orphans = children()
		if !groupAlive() && len(orphans) == 0 {
			return
		}
		if time.Now().After(settle) {
			break
		}
	}
	then := fmt.Sprintf("sending them SIGTERM, and SIGKILL after %v", leftoverGrace)
	if w.in.abort.Err() != nil {
		then = "killing them (SIGKILL): a signal cut the grace short"
	}
	w.log.Warn(fmt.Sprintf("the command exited and left processes behind (%d orphaned, its process group %d %s); %s",
		len(orphans), pgid, map[bool]string{true: "still has members", false: "is empty"}[groupAlive()], then))
	signalAll := func(sig syscall.Signal) {
		_ = syscall.Kill(-pgid, sig)
		for _, pid := range children() {
			_ = syscall.Kill(pid, sig)
		}
	}
	signalAll(syscall.SIGTERM)
	deadline := time.Now().Add(leftoverGrace)
	killed := false
	for {
		reapExited()
		if len(children()) == 0 && !groupAlive() {
			return
		}
		// A second signal (abort) cuts the grace short: profile-run exits
		// soon after it, and must not leave them running.
		if time.Now().After(deadline) || (!killed && w.in.abort.Err() != nil) {
			if killed {
				w.log.Warn("processes the command left behind did not end after SIGKILL", zap.Ints("pids", children()))
				return
			}
			signalAll(syscall.SIGKILL)
			killed, deadline = true, time.Now().Add(leftoverGrace)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// reapOrphans reaps, while the command runs, the processes it orphaned
// that have exited: profile-run is their subreaper (becomeSubreaper), and
// nobody else waits for them. Each exit of a child of profile-run comes
// as a SIGCHLD on chld; the command itself, pid, is left to its Wait.
func reapOrphans(pid int, chld <-chan os.Signal, exited <-chan struct{}) {
	for {
		select {
		case <-exited:
			return
		case <-chld:
		}
		for _, c := range children() {
			if c != pid {
				var ws syscall.WaitStatus
				_, _ = syscall.Wait4(c, &ws, syscall.WNOHANG, nil)
			}
		}
	}
}

// reapExited reaps the children of profile-run that have exited.
func reapExited() {
	for _, pid := range children() {
		var ws syscall.WaitStatus
		_, _ = syscall.Wait4(pid, &ws, syscall.WNOHANG, nil)
	}
}

// becomeSubreaper makes profile-run the parent of every process orphaned
// below it, so that none of a wrapped job's processes escapes it.
func becomeSubreaper() error {
	return unix.Prctl(unix.PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0)
}

// children lists this process's children, zombies included.
func children() []int {
	self := os.Getpid()
	ents, err := os.ReadDir("/proc")
	if err != nil {
		return nil
	}
	var out []int
	for _, e := range ents {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		b, err := os.ReadFile("/proc/" + e.Name() + "/stat")
		if err != nil {
			continue
		}
		// pid (comm) state ppid …; comm may hold spaces and parentheses.
		i := bytes.LastIndexByte(b, ')')
		if i < 0 {
			continue
		}
		f := strings.Fields(string(b[i+1:]))
		if len(f) >= 2 {
			if ppid, err := strconv.Atoi(f[1]); err == nil && ppid == self {
				out = append(out, pid)
			}
		}
	}
	return out
}

// forwardSignals passes the first signal (or the end of the run's
// context) to the command's process group, and kills the group on a
// second one.
func (w *wrapper) forwardSignals(pid int, exited <-chan struct{}) {
	select {
	case <-exited:
		return
	case <-w.in.stop.Done():
	}
	sig := syscall.SIGTERM
	if s, ok := w.in.signal().(syscall.Signal); ok {
		sig = s
	}
	w.log.Warn(fmt.Sprintf("passing %s on to the command (another signal kills it)", signalName(sig)))
	_ = syscall.Kill(-pid, sig)
	select {
	case <-exited:
		return
	case <-w.in.abort.Done():
	}
	w.log.Warn("killing the command's process group")
	_ = syscall.Kill(-pid, syscall.SIGKILL)
}

// forwardStops makes Ctrl-Z stop the command with profile-run, and fg or
// bg continue both. The command runs in a process group of its own, which
// the terminal's SIGTSTP does not reach: without this, profile-run would
// stop alone while the command ran on, its records piling up unread. On
// SIGTSTP the command's group gets SIGTSTP (its own handlers run, as they
// would unwrapped) and profile-run stops itself; the SIGCONT that
// continues profile-run is passed on to the group.
func (w *wrapper) forwardStops(pid int, stops <-chan os.Signal, exited <-chan struct{}) {
	for {
		select {
		case <-exited:
			return
		case s := <-stops:
			switch s {
			case syscall.SIGTSTP:
				_ = syscall.Kill(-pid, syscall.SIGTSTP)
				_ = syscall.Kill(os.Getpid(), syscall.SIGSTOP)
			case syscall.SIGCONT:
				_ = syscall.Kill(-pid, syscall.SIGCONT)
			}
		}
	}
}

// progress writes a line now and then while the command runs: on a
// terminal by default, always with -progress log or bar, never with off.
func (w *wrapper) progress(exited <-chan struct{}) {
	switch w.o.progress {
	case "off":
		return
	case "auto":
		if !isTerminal(w.stderr) {
			return
		}
	}
	t := time.NewTicker(w.o.progressEvery)
	defer t.Stop()
	for {
		select {
		case <-exited:
			return
		case <-t.C:
			fmt.Fprintln(w.stderr, w.progressLine())
		}
	}
}

func (w *wrapper) progressLine() string {
	elapsed := elapsedText(time.Since(w.started), w.o.progressEvery)
	if w.col == nil {
		return fmt.Sprintf("profile-run: %v: not recording NCCL (%s)", elapsed, w.noNCCL)
	}
	st := w.col.Stats()
	ps := w.prof.Stats()
	line := fmt.Sprintf("profile-run: %v: %s from %s, %d dropped", elapsed, ncclOps(st.Records), count(st.Communicating, "process", "processes"), st.PluginDrops()+ps.Dropped)
	steps := ""
	if w.out != nil && w.out.steps != nil {
		steps = progressSteps(w.out.steps.Ranks())
	}
	line += steps
	if steps == "" {
		line += w.progressCycle()
	}
	if w.out != nil && w.out.pipe != nil {
		line += stragglerText(w.out.pipe.Summary())
	}
	return line
}

// How often the progress line searches for the cycle of the collectives
// again, once one is found and before (each search reads every process's
// window: a few milliseconds a process).
const (
	cycleEvery   = 5 * time.Second
	cycleUnfound = time.Second
	// cycleShare bounds the time the progress line's searches take: the
	// next waits at least cycleShare times the last one's duration (2 %
	// of a core), whatever the intervals above.
	cycleShare = 50
)

// progressCycle is what the progress line says, while no step has been
// accounted, of the cycle the command's collectives repeat: its time and
// length, how much of it the GPU was busy where kernels were traced, and
// the longest stall of the run so far (cycle.Job.Stalls), searched again at most every cycleEvery (cycleUnfound while none is
// found, and never sooner than cycleShare times the last search took);
// "" before one is found.
func (w *wrapper) progressCycle() string {
	if w.out == nil || w.out.cycles == nil {
		return ""
	}
	every := cycleEvery
	if w.cycleText == "" {
		every = cycleUnfound
	}
	every = max(every, cycleShare*w.cycleTook)
	if now := time.Now(); now.Sub(w.cycleAt) >= every {
		w.cycleAt = now
		w.cycleText = ""
		j, ok := w.out.cycles.Result().Job()
		w.cycleTook = time.Since(now)
		if ok {
			w.cycleText = fmt.Sprintf(", no steps marked: a cycle of %d collectives every %.1f ms", j.Length, float64(j.Median)/float64(time.Millisecond))
			if j.BusyKnown && j.Median > 0 {
				w.cycleText += fmt.Sprintf(", the GPU busy %.0f%% of it", 100*float64(j.Busy)/float64(j.Median))
			}
			if st := j.Stalls(); len(st) > 0 {
				w.cycleText += fmt.Sprintf(", the longest %v (at %v)", st[0].Duration.Round(time.Millisecond), st[0].Start.Round(time.Second))
			}
		}
	}
	return w.cycleText
}

// ncclOps counts a wrapped command's NCCL operations, collectives and p2p
// alike.
func ncclOps(n uint64) string {
	return count(n, "collective or p2p operation", "collectives and p2p")
}

// elapsedText is the progress line's elapsed time: whole seconds, or
// tenths where lines come more often than once a second (they would all
// say 0s).
func elapsedText(d, every time.Duration) time.Duration {
	if every > 0 && every < time.Second {
		return d.Truncate(100 * time.Millisecond)
	}
	return d.Truncate(time.Second)
}

// progressSteps is what the progress line says of the job's NVTX steps
// accounted so far: how many the furthest rank has, and their mean time
// over the ranks; "" before any.
func progressSteps(ranks []profiler.StepStats) string {
	most, n := 0, 0
	var wall time.Duration
	for _, r := range ranks {
		most = max(most, r.Steps)
		n += r.Steps
		wall += r.Wall
	}
	if n == 0 {
		return ""
	}
	return fmt.Sprintf(", %s (mean %.1f ms)", count(most, "step", "steps"), float64(wall)/float64(n)/float64(time.Millisecond))
}

// stragglerText is what the progress line says of the collectives matched
// so far: the straggler where one stands out.
func stragglerText(s analysis.Summary) string {
	if s.Collectives.Matched == 0 {
		return ""
	}
	text := fmt.Sprintf(", %d matched across ranks", s.Collectives.Matched)
	for _, r := range s.Ranks {
		if r.Rank == s.Straggler {
			text += fmt.Sprintf(", straggler rank %d (caused %.0f%% of the waiting)", r.Rank, 100*r.Score)
		}
	}
	return text
}

// exitStatus is the command's status as a shell gives it.
func exitStatus(cmd *exec.Cmd, err error, stderr io.Writer) int {
	if ws, ok := cmd.ProcessState.Sys().(syscall.WaitStatus); ok && ws.Signaled() {
		return 128 + int(ws.Signal())
	}
	if code := cmd.ProcessState.ExitCode(); code >= 0 {
		if err != nil && errors.Is(err, exec.ErrWaitDelay) {
			fmt.Fprintf(stderr, "profile-run: the command exited, but processes it left behind kept its output open; stopped waiting for them after %v\n", waitDelay)
		}
		return code
	}
	if err != nil {
		fmt.Fprintf(stderr, "profile-run: waiting for the command: %v\n", err)
	}
	return exitFail
}

// finish collects what the command's processes left, flushes and writes
// every output within bounded deadlines, and prints where they went.
func (w *wrapper) finish(code int) {
	if code != 0 {
		w.out.partial = "the wrapped command " + describeExit(code)
	}
	if w.col != nil {
		ctx, cancel := context.WithTimeout(w.in.abort, collectorCloseTimeout)
		if err := w.col.Close(ctx); err != nil {
			w.log.Warn("collecting the command's last records", zap.Error(err))
		}
		cancel()
	}
	w.out.summary = append(w.out.summary, w.ncclSummary())
	if w.col != nil {
		st := w.col.Stats()
		w.out.env = wrappedEnvironment(st, func() (runtime.Impl, error) { return runtime.Available(runtime.CUDA) })
		w.out.shared = sharedGPUs(st)
	}
	if line := w.kernelSummary(); line != "" {
		w.out.summary = append(w.out.summary, line)
	}
	if line := w.pipelineSummary(); line != "" {
		w.out.summary = append(w.out.summary, line)
	}
	if line := w.nvtxSummary(); line != "" {
		w.out.summary = append(w.out.summary, line)
	}
	cycleAt := len(w.out.summary)
	if line := costSummary(time.Since(w.started), w.cpuAtStart); line != "" {
		w.out.summary = append(w.out.summary, line)
	}
	fctx, cancel := context.WithTimeout(w.in.abort, flushTimeout)
	if err := w.prof.Flush(fctx); err != nil {
		w.log.Warn("flushing the profiler", zap.Error(err))
	}
	cancel()
	// Every record has reached the sinks: the collectives' cycle, after
	// what the NVTX ranges said.
	if lines := w.cycleSummary(); lines != "" {
		w.out.summary = slices.Insert(w.out.summary, cycleAt, strings.Split(lines, "\n")...)
	}
	if err := w.out.finish(w.stdout); err != nil {
		// Telemetry's trouble is reported, never the command's status.
		w.log.Warn("writing the outputs", zap.Error(err))
	}
}

// cpuTime is the CPU time profile-run has used so far (its own, not its
// children's), and its peak resident memory in KiB; ok false when the
// system does not say.
func cpuTime() (cpu time.Duration, maxRSS int64, ok bool) {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0, 0, false
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano()), ru.Maxrss, true // Maxrss: KiB on Linux
}

// costSummary says what profile-run itself took of the machine while the
// command ran for wall, having used cpu0 of CPU before it started: its
// collector and every output it fed, not the command's processes. ""
// when the system does not say.
func costSummary(wall, cpu0 time.Duration) string {
	cpu, rss, ok := cpuTime()
	if !ok || wall <= 0 {
		return ""
	}
	cpu -= cpu0
	share := ""
	if wall >= time.Second { // a share of a moment says nothing
		share = fmt.Sprintf(" (%.1f%% of one core)", 100*cpu.Seconds()/wall.Seconds())
	}
	used := fmt.Sprintf("%.1f s", cpu.Seconds())
	if cpu < 100*time.Millisecond {
		// 0.0 s beside a share of a core reads as a contradiction.
		used = fmt.Sprintf("%.0f ms", float64(cpu)/float64(time.Millisecond))
	}
	return fmt.Sprintf("cost: profile-run used %s of CPU while the command ran for %.1f s%s, at most %d MB of memory",
		used, wall.Seconds(), share, rss>>10)
}

// ncclSummary says what the plugin delivered or, when nothing, why not.
func (w *wrapper) ncclSummary() string {
	if w.col == nil {
		return "nccl: not recorded: " + w.noNCCL
	}
	return ncclLine(w.col.Stats(), w.plugin.Path)
}

// ncclLine is ncclSummary's line for the collector's stats, plugin the
// path of the plugin the command was given.
func ncclLine(st ncclplugin.Stats, plugin string) string {
	switch {
	case st.Processes == 0:
		return fmt.Sprintf("nccl: no collectives seen: no process loaded the plugin (%s). Either the command did not use NCCL (CPU only, gloo, or it failed first), "+
			"its NCCL is older than 2.25 (the plugin speaks profiler interfaces v4 and v5), a launcher did not pass %s and %s on (mpirun needs -x for each), "+
			"or its processes run on another host (the collector listens on a local socket)", plugin, envNCCLPlugin, ncclplugin.EnvSocket)
	case st.Records == 0:
		// A job without NCCL (one GPU) wrapped for its kernels and
		// ranges: what its plugin could not send still counts.
		return fmt.Sprintf("nccl: no collectives seen: %d process(es) loaded the plugin but issued no collective or p2p operation", st.Processes) + lossText(st)
	}
	line := fmt.Sprintf("nccl: %s from %d process(es)%s, %d timed on the device", ncclOps(st.Records), st.Communicating, ncclVersions(st), st.Records-st.HostOnly)
	if n := st.Processes - st.Communicating; n > 0 {
		// A launcher that touched CUDA loads the plugin too.
		line = fmt.Sprintf("nccl: %s from %d process(es)%s (%d more loaded the plugin and issued none), %d timed on the device", ncclOps(st.Records), st.Communicating, ncclVersions(st), n, st.Records-st.HostOnly)
	}
	if st.ProxyTimed > 0 {
		line += fmt.Sprintf(", %d p2p with their network transfer's end", st.ProxyTimed)
	}
	if shared := sharedGPUs(st); shared != "" {
		line += fmt.Sprintf("; %s (MPS, or taking turns): each one's device times include waits for the others' work", shared)
	}
	if st.AllToAlls > 0 {
		line += fmt.Sprintf(", %s gathered from %d sends and receives", count(st.AllToAlls, "all-to-all", "all-to-alls"), st.AllToAllParts)
	}
	if st.StaleChannels > 0 {
		line += fmt.Sprintf("; %s left out: NCCL's timers of %d communicator(s) ran before their operations were enqueued, so their operations are host-only from the first such", count(st.StaleChannels, "kernel channel", "kernel channels"), st.StaleComms)
	}
	if st.ClockSteps > 0 {
		line += fmt.Sprintf("; GPU timer: stepped %d time(s) against the host clock, the device times after each placed with the new offset", st.ClockSteps)
	}
	if st.ClockConflicts > 0 {
		line += fmt.Sprintf("; GPU timer: %d GPU(s) whose clock bounds crossed, device times may be late (first: %s)", st.ClockConflicts, st.ClockConflict)
	}
	if st.Orphans > 0 {
		line += fmt.Sprintf("; %d kernel-channel and proxy records found no operation (its record lost, or delivered before them) and are left out", st.Orphans)
	}
	return line + lossText(st)
}

// sharedGPUs says how the command's processes shared GPUs, "2 processes
// sharing 1 GPU", for the report's stage balance; "" where none did.
func sharedGPUs(st ncclplugin.Stats) string {
	if st.SharedGPUs == 0 {
		return ""
	}
	return fmt.Sprintf("%d processes sharing %s", st.SharingProcesses, count(st.SharedGPUs, "GPU", "GPUs"))
}

// ncclVersions is " of NCCL 2.28.9" for the versions the processes'
// NCCL reported ("2.28.3 and 2.28.9" where they differ), "" where none
// did.
func ncclVersions(st ncclplugin.Stats) string {
	if len(st.NCCLVersions) == 0 {
		return ""
	}
	var v []string
	for _, code := range st.NCCLVersions {
		v = append(v, nccl.VersionString(int(code)))
	}
	return " of NCCL " + strings.Join(v, " and ")
}

// lossText says what the plugin dropped and the collector could not
// take, "" for nothing: records of every kind (operations, NVTX ranges,
// kernels) share the plugin's rings.
func lossText(st ncclplugin.Stats) string {
	var s string
	if d := st.PluginDrops(); d > 0 {
		s += fmt.Sprintf("; %d dropped in the plugin (%d ring full, %d refused, %d unsent, %s by CUPTI)", d, st.PluginRingFull, st.PluginRefused, st.PluginUnsent, count(st.PluginActivityDropped, "kernel record", "kernel records"))
	}
	if st.PluginBuffersUnreturned > 0 {
		s += fmt.Sprintf("; %s still out as their processes exited (the kernels in them, up to a few hundred each, never came and are not counted)", count(st.PluginBuffersUnreturned, "CUPTI activity buffer", "CUPTI activity buffers"))
	}
	if st.PluginForeignProxyOps > 0 {
		s += fmt.Sprintf("; %s of other processes (PXN) ran on these processes' proxy threads and are not recorded (NCCL reports them only there; their own processes' p2p have no transfer end for them)", count(st.PluginForeignProxyOps, "proxy operation", "proxy operations"))
	}
	if st.CutShort > 0 {
		s += fmt.Sprintf("; %d stream(s) ended inside a record, their process exiting or killed mid-send (a plugin that cut its stream at exit counted the record as unsent)", st.CutShort)
	}
	if st.DecodeErrors+st.IngestErrors > 0 {
		s += fmt.Sprintf("; %s, %s refused (last: %s)", count(st.DecodeErrors, "bad stream", "bad streams"), count(st.IngestErrors, "record", "records"), st.LastError)
	}
	if st.Cut > 0 {
		s += fmt.Sprintf("; %d connection(s) still sending were cut when profile-run stopped waiting for them (%v after the command ended): what they still held is lost, and not counted", st.Cut, collectorCloseTimeout)
	}
	return s
}

// kernelSummary says what the command's kernel tracing delivered, or why
// there was none; "" when no process loaded the plugin.
func (w *wrapper) kernelSummary() string {
	if w.col == nil {
		return ""
	}
	st := w.col.Stats()
	switch {
	case st.Processes == 0:
		return ""
	case !w.o.kernels:
		return "kernels: not traced (-kernels=false), so busy and idle time are unknown"
	case w.cudaElsewhere != "":
		return fmt.Sprintf("kernels: not traced: %s was set to %s, which kept the command's CUDA tool; busy and idle time are unknown", envCUDAInjection, w.cudaElsewhere)
	case st.Traced == 0 && st.Untraced > 0:
		return fmt.Sprintf("kernels: not traced: %s (%d process(es)); busy and idle time are unknown", st.UntracedWhy, st.Untraced)
	case st.Traced == 0:
		return "kernels: not traced: no process initialised CUDA with the plugin as its injection library (no GPU work, or a CUDA older than injection); busy and idle time are unknown"
	}
	line := fmt.Sprintf("kernels: %s and %s traced in %d process(es)", count(st.Kernels, "kernel", "kernels"), count(st.Copies, "copy or memset", "copies and memsets"), st.Traced)
	if st.KernelsLabelled > 0 {
		line += fmt.Sprintf(", %s launched inside NVTX ranges named as forward or backward work (their phase, chunk and microbatch)", count(st.KernelsLabelled, "kernel", "kernels"))
	}
	if st.MemoryOps > 0 {
		// The peaks per rank are the report's: memory each process held
		// through CUDA's allocations (a framework's reserved segments,
		// NCCL's buffers, libraries' workspaces), not its tensors alone.
		line += fmt.Sprintf(", %d device memory allocations and releases (the report's peak device memory: what each process held through them)", st.MemoryOps)
	}
	if st.Untraced > 0 {
		line += fmt.Sprintf("; %d process(es) not traced: %s", st.Untraced, st.UntracedWhy)
	}
	if st.PluginActivityDropped+st.ActivityDropped > 0 {
		line += fmt.Sprintf("; %d dropped (%d by CUPTI: its buffers full, or records it could not time; %d before their process had a rank)", st.PluginActivityDropped+st.ActivityDropped, st.PluginActivityDropped, st.ActivityDropped)
	}
	return line
}

// pipelineSummary says how the processes got their pipeline stage (a
// communicator's name, or their sends and receives), and which got none;
// "" when none did and none was named.
func (w *wrapper) pipelineSummary() string {
	if w.col == nil {
		return ""
	}
	st := w.col.Stats()
	switch {
	case st.Processes == 0:
		return ""
	case w.o.pipelineGroup == ncclplugin.NoPipelineGroup:
		return "pipeline: not staged (-pipeline-group none)"
	case st.Staged > 0 && st.StagedBySends == st.Staged:
		line := fmt.Sprintf("pipeline: %d process(es) staged by their sends and receives (%d stages), no communicator's name saying which is the pipeline's: bubbles per stage from their kernels; -pipeline-group none if those sends are not a pipeline's", st.Staged, st.Stages)
		if st.NamedPairs == st.Staged {
			line = fmt.Sprintf("pipeline: %d process(es) staged by their sends and receives over communicators of two ranks named as the pipeline's (%q) (%d stages): bubbles per stage from their kernels", st.Staged, st.PairName, st.Stages)
		}
		return line + stagingCaveats(st)
	case st.Staged > 0:
		line := fmt.Sprintf("pipeline: %d process(es) staged by their rank in communicator %q (%s): bubbles per stage from their kernels", st.Staged, st.PipelineGroup, count(st.Stages, "stage", "stages"))
		if st.StagedBySends > 0 {
			line += fmt.Sprintf("; %d of them by their sends and receives, none of their communicators named as a pipeline's", st.StagedBySends)
		}
		return line + stagingCaveats(st)
	case st.Unstaged > 0:
		return fmt.Sprintf("pipeline: %d process(es) not staged: no communicator's name says which is the pipeline's, and %s", st.Unstaged, unstagedWhy)
	case w.o.pipelineGroup != "":
		return fmt.Sprintf("pipeline: no process made a communicator named %q (-pipeline-group), so no stages", w.o.pipelineGroup)
	}
	return ""
}

// stagingCaveats is what the pipeline line adds for processes staged
// provisionally or not at all.
func stagingCaveats(st ncclplugin.Stats) string {
	var s string
	if st.Provisional > 0 {
		s += fmt.Sprintf("; %d of them provisionally: %s", st.Provisional, provisionalWhy)
	}
	if st.Unstaged > 0 {
		s += fmt.Sprintf("; %d process(es) not staged: %s", st.Unstaged, unstagedWhy)
	}
	return s
}

// provisionalWhy says why a process's stage from its sends may be wrong.
const provisionalWhy = "some process they sent to or received from never did so here (on another host?), so their stage is their rank in the largest communicator they sent over, or a lower bound where that has two ranks"

// unstagedWhy says why processes that sent and received got no stage.
const unstagedWhy = "their sends and receives went over communicators of two ranks (PyTorch's, for a send outside a batch) joining more than two processes, and not every one had a launcher rank (RANK) to order them by"

// nvtxSummary says which of the command's NVTX ranges arrived and how
// many were steps, or how to have steps; "" when nothing was recorded.
func (w *wrapper) nvtxSummary() string {
	if w.col == nil {
		return ""
	}
	st := w.col.Stats()
	if st.Processes == 0 {
		return ""
	}
	lost := ""
	if st.RangesLost > 0 {
		lost = fmt.Sprintf(" (%d more, nested too deeply, not recorded)", st.RangesLost)
	}
	if st.RangesDropped > 0 {
		lost += fmt.Sprintf(" (%d more dropped: sent before their process had a rank)", st.RangesDropped)
	}
	switch {
	case w.nvtxElsewhere != "":
		return fmt.Sprintf("nvtx: ranges went to %s (%s was set), so no steps were accounted", w.nvtxElsewhere, envNVTXInjection)
	case st.Ranges == 0:
		return "nvtx: no ranges seen, so no steps: to have the report account each training step, " +
			`mark it as an NVTX range named "step" (torch.cuda.nvtx.range_push("step") … range_pop(), or -step-range NAME for the name the job uses; docs/wrap.md)`
	case w.o.stepRange == "":
		return fmt.Sprintf("nvtx: %s%s (steps not accounted: -step-range is empty)", count(st.Ranges, "range", "ranges"), lost)
	case st.Steps == 0:
		return fmt.Sprintf("nvtx: %s%s, none of them a step: no top-level range was named %q (-step-range NAME names the job's)", count(st.Ranges, "range", "ranges"), lost, w.o.stepRange)
	}
	steps := fmt.Sprintf("%d of them steps", st.Steps)
	if st.Steps == 1 {
		steps = "1 of them a step"
	}
	return fmt.Sprintf("nvtx: %s%s, %s (%q)", count(st.Ranges, "range", "ranges"), lost, steps, w.o.stepRange)
}

// cycleSummary says what cycle the command's collectives repeat, the
// step most likely, where the command marked no steps; "" where it did,
// or issued no collectives.
func (w *wrapper) cycleSummary() string {
	if w.out.cycles == nil || w.col == nil || w.col.Stats().Steps > 0 {
		return ""
	}
	return w.out.cycleResult().Lines()
}

// describeExit puts a shell status into words.
func describeExit(code int) string {
	if code > 128 && code < 128+65 {
		return "was killed by " + signalName(syscall.Signal(code-128)) + fmt.Sprintf(" (status %d)", code)
	}
	return fmt.Sprintf("exited with status %d", code)
}

// commandLine is the command as a shell would show it, for messages:
// an argument with anything a shell reads apart (a space, a quote, ( & ;
// | < > * ? [ # ~ { }) is quoted, so that the line can be pasted.
func commandLine(args []string) string {
	q := make([]string, len(args))
	for i, a := range args {
		if a == "" || strings.ContainsAny(a, " \t\n\"'\\$`()&;|<>*?[#~{}!") {
			a = "'" + strings.ReplaceAll(a, "'", `'\''`) + "'"
		}
		q[i] = a
	}
	return strings.Join(q, " ")
}
