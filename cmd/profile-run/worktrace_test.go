package main

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

// -device-timing trace on the cpu backend: it says how ranges are timed
// and what the trace lost (nothing here), every kernel range gets device
// time from the stream's own record of its work, and training is the same
// as with events: the same losses.
func TestDeviceTimingTrace(t *testing.T) {
	args := append([]string{"-backend", "cpu", "-device-depth", "0", "-metrics-addr", "off", "-pprof", "off",
		"-trace", "off", "-call-log-size", "0", "-progress", "off", "-quiet"}, small...)
	out := t.TempDir()
	code, stdout, stderr := runMain(t, append([]string{"-out", out, "-device-timing", "trace"}, args...)...)
	if code != exitOK {
		t.Fatalf("exit %d; stderr %q", code, stderr)
	}
	for _, want := range []string{
		"device ranges timed from the cpu backend's record of what each stream ran (-device-timing trace)",
		"work trace: 0 device ranges written without device times (more waited for their work than the profiler holds), 0 pieces of work lost by the trace, 0 reported out of issue order",
	} {
		if !strings.Contains(stdout, want) {
			t.Errorf("stdout lacks %q:\n%s", want, stdout)
		}
	}
	files, _ := filepath.Glob(filepath.Join(out, "*", "summary.json"))
	if len(files) != 1 {
		t.Fatalf("summary files %v", files)
	}
	b, err := os.ReadFile(files[0])
	if err != nil {
		t.Fatal(err)
	}
	var sum struct {
		Ranges []struct {
			Name    string  `json:"name"`
			Count   int     `json:"count"`
			DeviceS float64 `json:"device_s"`
		} `json:"ranges"`
	}
	if err := json.Unmarshal(b, &sum); err != nil {
		t.Fatal(err)
	}
	timed := map[string]bool{}
	for _, r := range sum.Ranges {
		if r.DeviceS > 0 {
			timed[r.Name] = true
		}
	}
	for _, name := range []string{"linear", "linear_grad_input", "linear_grad_weight", "tanh", "tanh_backward", "load_batch", "sgd"} {
		if !timed[name] {
			t.Errorf("%s ranges have no device time", name)
		}
	}
	// The pipeline's transfers wait on the compute stream for the
	// communication stream's work, and run nothing on it themselves:
	// every one is counted as a range whose stream ran nothing.
	waits := 0
	for _, r := range sum.Ranges {
		switch r.Name {
		case "send", "recv", "send_grad", "recv_grad":
			if r.DeviceS != 0 {
				t.Errorf("%s ranges have device time %v s; their stream only waited", r.Name, r.DeviceS)
			}
			waits += r.Count
		}
	}
	if want := fmt.Sprintf("; %d device ranges ran nothing on their stream (it only waited for another stream's work) and have no device times", waits); waits == 0 || !strings.Contains(stdout, want) {
		t.Errorf("stdout lacks %q:\n%s", want, stdout)
	}
	_, eventsOut, _ := runMain(t, append([]string{"-out", t.TempDir(), "-device-timing", "events"}, args...)...)
	if a, b := lossLines(stdout), lossLines(eventsOut); len(a) == 0 || !slices.Equal(a, b) {
		t.Errorf("losses timed from the trace %q, with events %q", a, b)
	}
}

// A mode that does not exist, or the trace with -profile sync, is a usage
// error naming the flag.
func TestDeviceTimingUsage(t *testing.T) {
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"-device-timing", "cupti"}, `-device-timing: unknown mode "cupti" (one of: events, trace)`},
		{[]string{"-device-timing", "trace", "-profile", "sync"}, "-device-timing trace times ranges without synchronising: it does not go with -profile sync"},
	} {
		code, _, stderr := runMain(t, append(c.args, "-out", t.TempDir())...)
		if code != exitUsage || !strings.Contains(stderr, c.want) {
			t.Errorf("%q: exit %d, stderr %q; want %d and %q", c.args, code, stderr, exitUsage, c.want)
		}
	}
}
