package htmlreport_test

import (
	"bytes"
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/trainscope/trainscope/exporters/htmlreport"
	"github.com/trainscope/trainscope/profiler"
)

// inChromium writes the page of in, opens it in headless Chromium and
// returns the DOM after the page's script ran and the console messages
// (the page logs none). Without Chromium the test is skipped, saying so.
func inChromium(t *testing.T, in htmlreport.Input) (htmlreport.Stats, string, []string) {
	t.Helper()
	var browser string
	for _, name := range []string{"chromium", "chromium-browser"} {
		if p, err := exec.LookPath(name); err == nil {
			browser = p
			break
		}
	}
	if browser == "" {
		t.Skip("chromium is not installed (Debian: apt-get install chromium): the page is not checked in a browser")
	}
	var buf bytes.Buffer
	st, err := htmlreport.Write(&buf, in)
	if err != nil {
		t.Fatal(err)
	}
	page := filepath.Join(t.TempDir(), "report.html")
	if err := os.WriteFile(page, buf.Bytes(), 0o644); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, browser, "--headless", "--no-sandbox", "--disable-gpu", "--enable-logging=stderr", "--v=0",
		"--user-data-dir="+t.TempDir(), "--dump-dom", "file://"+page)
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	if err := cmd.Run(); err != nil {
		t.Fatalf("%s: %v\n%s", browser, err, errb.String())
	}
	var console []string
	for _, line := range strings.Split(errb.String(), "\n") {
		if strings.Contains(line, ":CONSOLE") {
			console = append(console, line)
		}
	}
	return st, out.String(), console
}

// drawnCounts is what the page's script counted: the forward and
// backward blocks the browser laid out with a width.
func drawnCounts(t *testing.T, dom string) (fwd, bwd int) {
	t.Helper()
	m := regexp.MustCompile(`<output id="drawn" data-forward="(\d+)" data-backward="(\d+)"`).FindStringSubmatch(dom)
	if m == nil {
		t.Fatalf("the page's script did not count the blocks:\n%.2000s", dom)
	}
	fwd, _ = strconv.Atoi(m[1])
	bwd, _ = strconv.Atoi(m[2])
	return fwd, bwd
}

// In a browser: nested actions (inside a device-timed range of no phase,
// and inside an action with other labels) are laid out, as many as the
// page says it drew, and the console stays empty.
func TestNestedActionsInChromium(t *testing.T) {
	for name, in := range map[string]htmlreport.Input{
		"inside a range of no phase": {Records: wrapped()},
		"inside another action":      {Records: insideAnother()},
	} {
		st, dom, console := inChromium(t, in)
		if len(console) > 0 {
			t.Errorf("%s: console messages:\n%s", name, strings.Join(console, "\n"))
		}
		fwd, bwd := drawnCounts(t, dom)
		// twoStages' 4 forward and 4 backward blocks; inside another
		// action, rank 0's outer forward too.
		want := 4
		if name == "inside another action" {
			want = 5
		}
		if fwd != want || bwd != 4 || st.Forward != fwd || st.Backward != bwd {
			t.Errorf("%s: the browser laid out %d forward and %d backward blocks, the page drew %d and %d; want %d and 4", name, fwd, bwd, st.Forward, st.Backward, want)
		}
	}
}

// In a browser: times far apart, and names that try to inject script,
// leave the console empty — no attribute the browser refuses, no script
// of a name run.
func TestBadInputInChromium(t *testing.T) {
	const year = 365 * 24 * time.Hour
	recs := twoStages()
	for i := range recs {
		r := &recs[i]
		if r.Rank == 1 && r.Name == profiler.StepName {
			r.HostStart = -150 * year
		}
		if r.Rank == 0 && r.Name == "forward" && r.Microbatch == 1 {
			r.DeviceEnd = 150 * year
		}
		if r.Kind == profiler.KindP2P {
			r.Name = `</title><script>console.log("injected")</script><img src=x onerror="console.log('injected')">`
			r.Collective.Op, r.Collective.Group = r.Name, r.Name
		}
	}
	_, dom, console := inChromium(t, htmlreport.Input{Title: `<script>console.log("injected")</script>`, Records: recs})
	if len(console) > 0 {
		t.Errorf("console messages:\n%s", strings.Join(console, "\n"))
	}
	if fwd, bwd := drawnCounts(t, dom); fwd != 4 || bwd != 4 {
		t.Errorf("the browser laid out %d forward and %d backward blocks, want 4 and 4", fwd, bwd)
	}
	if strings.Contains(dom, "<img") {
		t.Error("a name became an element")
	}
}
