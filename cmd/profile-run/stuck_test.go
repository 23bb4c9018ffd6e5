package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	goruntime "runtime"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
)

// stuckArgs is a run whose device never gets through its work: every
// forward and backward action holds its rank's stream still for an hour
// (a kernel that hangs), with -comm-timeout timeout. The test process
// keeps the streams' goroutines sleeping; nothing else stays.
func stuckArgs(t *testing.T, timeout time.Duration) []string {
	return append([]string{"-out", t.TempDir(), "-metrics-addr", "off", "-action-delay", "1h", "-comm-timeout", timeout.String()}, small...)
}

// ranksWaiting counts the trainer's ranks that wait for their step's
// device work (they have queued their whole step).
func ranksWaiting() int {
	buf := make([]byte, 1<<22)
	return strings.Count(string(buf[:goruntime.Stack(buf, true)]), "pipeline.(*rank).finish(")
}

// whenQueued calls send on a goroutine of its own once both ranks (pp 2)
// of a run starting now wait for their queued step, and delivers the time
// send returns; the zero time if they have not within a minute.
func whenQueued(send func() time.Time) <-chan time.Time {
	at := make(chan time.Time, 1)
	before := ranksWaiting()
	go func() {
		for deadline := time.Now().Add(time.Minute); ranksWaiting() < before+2; time.Sleep(10 * time.Millisecond) {
			if time.Now().After(deadline) {
				at <- time.Time{}
				return
			}
		}
		at <- send()
	}()
	return at
}

// runUntil runs profile-run with in and args on this goroutine's behalf
// and returns its exit status and when it returned; it fails t if it has
// not returned by limit (it is then left running).
func runUntil(t *testing.T, in *interrupt, args []string, stdout, stderr *syncBuffer, limit time.Time) (int, time.Time) {
	t.Helper()
	type result struct {
		code int
		at   time.Time
	}
	res := make(chan result, 1)
	go func() {
		code := runWith(in, args, stdout, stderr)
		res <- result{code, time.Now()}
	}()
	select {
	case r := <-res:
		return r.code, r.at
	case <-time.After(time.Until(limit)):
		t.Fatalf("profile-run still running %v past its limit\nstderr:\n%s", time.Since(limit), stderr)
		return 0, time.Time{}
	}
}

// The first signal with the ranks' whole step queued on a device that
// never gets through it: what they queued gets -comm-timeout from the
// signal, as profile-run says at once; then it writes what was recorded,
// marked partial, and exits with the signal's status, without a second
// signal. It used to wait -comm-timeout for the step, -comm-timeout again
// for the ranks' streams, then a minute per process group (two here) and
// 30 s for the device ranges, promising each wait at most -comm-timeout.
func TestStopOnAStuckDeviceWritesWithinCommTimeout(t *testing.T) {
	const timeout = 2 * time.Second
	args := stuckArgs(t, timeout)
	out := args[1]
	in := newInterrupt(context.Background())
	var stdout, stderr syncBuffer
	signalled := whenQueued(func() time.Time {
		in.deliver(os.Interrupt)
		return time.Now()
	})
	// The minute to get there, the timeout, and a margin for a loaded
	// machine; far below the minutes it took.
	code, ended := runUntil(t, in, args, &stdout, &stderr, time.Now().Add(time.Minute+timeout+30*time.Second))
	sent := <-signalled
	if sent.IsZero() {
		t.Fatalf("the ranks never waited for their device work; stderr:\n%s", stderr.String())
	}
	t.Logf("exit %d, %v after the signal", code, ended.Sub(sent))
	if code != 130 {
		t.Fatalf("exit %d, want 130\nstderr:\n%s", code, stderr.String())
	}
	if d := ended.Sub(sent); d > timeout+20*time.Second {
		t.Errorf("ended %v after the signal, with -comm-timeout %v", d, timeout)
	}
	errs := stderr.String()
	for _, want := range []string{
		"SIGINT: stopping training at the next pipeline action; device work already queued gets up to -comm-timeout 2s to finish",
		"device work the ranks had queued did not finish within -comm-timeout 2s: it is abandoned",
		"device work had not finished when training ended: ",
		"device ranges written with host times only, marked unfinished (counted as device work unfinished below)",
	} {
		if !strings.Contains(errs, want) {
			t.Errorf("stderr does not say %q:\n%s", want, errs)
		}
	}
	if strings.Contains(errs, "exiting without finishing") {
		t.Errorf("the outputs were not finished:\n%s", errs)
	}
	checkInterruptedOutputs(t, out, stdout.String())
}

// A second signal while the ranks' queued work waits for its
// -comm-timeout (a minute here) on a device that never gets through it:
// the work is given up at once and the outputs are written, whole, well
// within the grace after which profile-run exits whatever it is doing
// (abortGrace). It used to wait for the trainer, which did not see the
// second signal, until that grace ended the process with its outputs
// removed or cut off.
func TestSecondSignalGivesUpQueuedWork(t *testing.T) {
	const timeout = time.Minute
	args := stuckArgs(t, timeout)
	out := args[1]
	in := newInterrupt(context.Background())
	var stdout, stderr syncBuffer
	signalled := whenQueued(func() time.Time {
		in.deliver(os.Interrupt)
		// Past the 100 ms within which a copy of the first counts as
		// the same signal.
		time.Sleep(300 * time.Millisecond)
		second := time.Now()
		in.deliver(os.Interrupt)
		return second
	})
	code, ended := runUntil(t, in, args, &stdout, &stderr, time.Now().Add(time.Minute+timeout/2))
	sent := <-signalled
	if sent.IsZero() {
		t.Fatalf("the ranks never waited for their device work; stderr:\n%s", stderr.String())
	}
	t.Logf("exit %d, %v after the second signal", code, ended.Sub(sent))
	if code != 130 {
		t.Fatalf("exit %d, want 130\nstderr:\n%s", code, stderr.String())
	}
	if d := ended.Sub(sent); d > abortGrace {
		t.Errorf("ended %v after the second signal: past the %v after which profile-run exits without its outputs", d, abortGrace)
	}
	errs := stderr.String()
	for _, want := range []string{
		"another signal gives that work up and stops at once",
		"device work the ranks had queued was given up at the second signal",
		"device ranges written with host times only, marked unfinished",
	} {
		if !strings.Contains(errs, want) {
			t.Errorf("stderr does not say %q:\n%s", want, errs)
		}
	}
	if strings.Contains(errs, "within -comm-timeout") && strings.Contains(errs, "it is abandoned") {
		t.Errorf("the queued work was given its -comm-timeout:\n%s", errs)
	}
	checkInterruptedOutputs(t, out, stdout.String())
}

// checkInterruptedOutputs checks the one run under out: its report.txt
// says it was interrupted by SIGINT in step 0 of 2, and its hung actions
// are written (checkHungActions).
func checkInterruptedOutputs(t *testing.T, out, stdout string) {
	t.Helper()
	runs, _ := filepath.Glob(filepath.Join(out, "*", "report.txt"))
	if len(runs) != 1 {
		t.Fatalf("report files %v", runs)
	}
	b, err := os.ReadFile(runs[0])
	if err != nil {
		t.Fatal(err)
	}
	if want := "partial run: interrupted by SIGINT at step 0 (0 of 2 steps complete)"; !bytes.HasPrefix(b, []byte(want)) {
		t.Errorf("report.txt does not start with %q:\n%s", want, b)
	}
	checkHungActions(t, out, stdout)
}

// With no signal, a step whose device never gets through its work fails
// after -comm-timeout, which profile-run says at once; the ranks get
// -comm-timeout to stop, then the outputs are written and the error
// printed. It used to say nothing for minutes: the end of the run waited
// a minute per process group, and 30 s for the device ranges. The
// forward and backward actions that hung are in the trace and the
// per-call reports, marked unfinished, without device times, and the
// records line counts them; they were left out, counted as pending.
func TestCommTimeoutOnAStuckDeviceIsSaidAndEnds(t *testing.T) {
	const timeout = 2 * time.Second
	args := stuckArgs(t, timeout)
	out := args[1]
	var stdout, stderr syncBuffer
	start := time.Now()
	// The step's timeout, Close's, and a margin for a loaded machine.
	code, ended := runUntil(t, newInterrupt(context.Background()), args, &stdout, &stderr, start.Add(2*timeout+30*time.Second))
	t.Logf("exit %d after %v", code, ended.Sub(start))
	if code != exitFail {
		t.Fatalf("exit %d, want %d\nstderr:\n%s", code, exitFail, stderr.String())
	}
	errs := stderr.String()
	said := strings.Index(errs, "training failed at step 0: -comm-timeout 2s expired")
	last := strings.Index(errs, "ERROR")
	if said < 0 || last < said {
		t.Errorf("stderr does not say at once that the step failed, before the error in full:\n%s", errs)
	}
	if !strings.Contains(stdout.String(), "partial run: training failed at step 0") {
		t.Errorf("the summary is not marked partial:\n%s", stdout.String())
	}
	checkHungActions(t, out, stdout.String())
}

// checkHungActions checks, in the run under out whose summary is stdout,
// that every forward and backward action of step 0 — each queued behind
// the first, which holds its rank's stream for an hour — is in trace.json
// on its rank's host track with device_unfinished and no device time, and
// in report.rank<N> with "unfinished" for its device time; and that the
// records line counts as many unfinished ranges as the trace holds.
func checkHungActions(t *testing.T, out, stdout string) {
	t.Helper()
	// Each rank runs every microbatch through each of its chunks once
	// forward, once backward: vpp × microbatches actions of each.
	m := regexp.MustCompile(`pp=(\d+) vpp=(\d+) dp=(\d+), (\d+) microbatch`).FindStringSubmatch(stdout)
	if m == nil {
		t.Fatalf("no training line in the summary:\n%s", stdout)
	}
	atoi := func(s string) int { n, _ := strconv.Atoi(s); return n }
	ranks, perRank := atoi(m[1])*atoi(m[3]), atoi(m[2])*atoi(m[4])
	dirs, _ := filepath.Glob(filepath.Join(out, "*", "trace.json"))
	if len(dirs) != 1 {
		t.Fatalf("trace files %v", dirs)
	}
	run := filepath.Dir(dirs[0])
	b, err := os.ReadFile(dirs[0])
	if err != nil {
		t.Fatal(err)
	}
	var trace struct {
		TraceEvents []struct {
			Name string         `json:"name"`
			Ph   string         `json:"ph"`
			Pid  int            `json:"pid"`
			Args map[string]any `json:"args"`
		} `json:"traceEvents"`
	}
	if err := json.Unmarshal(b, &trace); err != nil {
		t.Fatal(err)
	}
	unfinished := 0
	hung := map[string]int{} // "pid name" → unfinished actions
	for _, ev := range trace.TraceEvents {
		if ev.Ph != "X" {
			continue
		}
		marked := ev.Args["device_unfinished"] == true
		if marked {
			unfinished++
		}
		if ev.Name != "forward" && ev.Name != "backward" {
			continue
		}
		if _, ok := ev.Args["device_us"]; ok || !marked {
			t.Errorf("trace: %s of process %d has args %v, want device_unfinished and no device time", ev.Name, ev.Pid, ev.Args)
			continue
		}
		hung[fmt.Sprint(ev.Pid, " ", ev.Name)]++
	}
	if len(hung) != 2*ranks {
		t.Errorf("trace: unfinished forward and backward actions %v, want both on each of %d ranks", hung, ranks)
	}
	for k, n := range hung {
		if n != perRank {
			t.Errorf("trace: %d unfinished actions %q, want %d", n, k, perRank)
		}
	}
	line := regexp.MustCompile(`records: .*, (\d+) written without device times \(device work unfinished\)`).FindStringSubmatch(stdout)
	if line == nil || atoi(line[1]) != unfinished {
		t.Errorf("the records line does not count the trace's %d unfinished ranges:\n%s", unfinished, stdout)
	}
	var sum struct {
		Records struct {
			Unfinished int `json:"device_unfinished"`
		} `json:"records"`
	}
	if b, err := os.ReadFile(filepath.Join(run, "summary.json")); err != nil || json.Unmarshal(b, &sum) != nil || sum.Records.Unfinished != unfinished {
		t.Errorf("summary.json: records.device_unfinished %d (%v); the trace has %d unfinished ranges", sum.Records.Unfinished, err, unfinished)
	}
	row := regexp.MustCompile(`(?m)^\s*\d+\s+[\d.]+\s+(forward|backward)\s+\S+\s+[\d.]+\s+(\S+)\s`)
	for rank := range ranks {
		b, err := os.ReadFile(filepath.Join(run, fmt.Sprintf("report.rank%d", rank)))
		if err != nil {
			t.Fatal(err)
		}
		got := map[string]int{}
		for _, r := range row.FindAllStringSubmatch(string(b), -1) {
			if r[2] != "unfinished" {
				t.Errorf("report.rank%d: %s with device time %s, want unfinished", rank, r[1], r[2])
			}
			got[r[1]]++
		}
		if got["forward"] != perRank || got["backward"] != perRank {
			t.Errorf("report.rank%d: %v calls, want %d forward and %d backward", rank, got, perRank, perRank)
		}
	}
}

// timeout(1) sends its signal to profile-run and to its process group:
// profile-run may get it twice at once. That is one signal, which stops
// training gracefully; the copy used to count as a second signal and cut
// the outputs short (profile-run exited 2 s later without them). The same
// signal later, or another signal, is a second one.
func TestSignalDeliveredTwiceIsOne(t *testing.T) {
	watchAll := func(sigs ...any) *interrupt {
		in := newInterrupt(context.Background())
		ch := make(chan os.Signal, len(sigs))
		done := make(chan struct{})
		go func() {
			defer close(done)
			in.watch(ch)
		}()
		for _, s := range sigs {
			switch v := s.(type) {
			case os.Signal:
				ch <- v
			case time.Duration:
				time.Sleep(v)
			}
		}
		close(ch)
		<-done
		return in
	}
	in := watchAll(syscall.SIGTERM, syscall.SIGTERM)
	if in.stop.Err() == nil || in.abort.Err() != nil {
		t.Errorf("SIGTERM twice at once: stop %v, abort %v; want a stop only", in.stop.Err(), in.abort.Err())
	}
	in = watchAll(syscall.SIGTERM, 2*repeatWindow, syscall.SIGTERM)
	if in.abort.Err() == nil {
		t.Errorf("SIGTERM, then SIGTERM %v later: abort not ended", 2*repeatWindow)
	}
	in = watchAll(syscall.SIGTERM, os.Interrupt)
	if in.abort.Err() == nil {
		t.Error("SIGTERM then SIGINT at once: abort not ended")
	}
	if c := in.exitCode(); c != 143 {
		t.Errorf("exit code %d, want 143 (the first signal)", c)
	}
}
