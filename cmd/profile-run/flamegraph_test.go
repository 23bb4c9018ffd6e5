package main

import (
	"bufio"
	"context"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/google/pprof/profile"
)

// TestFlameGraphInChromium opens a run's profile as a user would — `go
// tool pprof -http`, View → Flame Graph — in headless Chromium: the page
// logs nothing to the console, its default sample type is step_time, and
// the frames right under "step" are what a step's time splits into.
func TestFlameGraphInChromium(t *testing.T) {
	if testing.Short() {
		t.Skip("-short: trains, serves pprof and starts a browser")
	}
	browser := chromium(t)
	goTool, err := exec.LookPath("go")
	if err != nil {
		t.Skipf("no go command (%v): go tool pprof serves the flame graph", err)
	}
	dir := reportRun(t, "-pp", "2", "-vpp", "2", "-layers", "8", "-width", "16", "-microbatch-size", "4", "-microbatches", "4", "-steps", "4")
	prof := filepath.Join(dir, "profile.pb.gz")

	// A free loopback port (pprof does not say which one :0 gave it).
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	srv := exec.CommandContext(ctx, goTool, "tool", "pprof", "-no_browser", "-http="+addr, prof)
	stderr, err := srv.StderrPipe()
	if err != nil {
		t.Fatal(err)
	}
	srv.Stdout = srv.Stderr
	if err := srv.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() {
		cancel()
		_ = srv.Wait()
	}()
	ready := make(chan string, 1)
	go func() {
		sc := bufio.NewScanner(stderr)
		var lines []string
		for sc.Scan() {
			lines = append(lines, sc.Text())
			if strings.Contains(sc.Text(), "Serving web UI on") {
				ready <- ""
			}
		}
		ready <- strings.Join(lines, "\n")
	}()
	select {
	case out := <-ready:
		if out != "" {
			t.Fatalf("go tool pprof ended before serving:\n%s", out)
		}
	case <-time.After(time.Minute):
		t.Fatal("go tool pprof did not serve its UI within a minute")
	}

	url := "http://" + addr + "/ui/flamegraph"
	dom, console := browseURL(t, browser, url, "--virtual-time-budget=5000", "--dump-dom")
	if len(console) > 0 {
		t.Errorf("console messages:\n%s", strings.Join(console, "\n"))
	}
	if !strings.Contains(dom, "Type: step_time") && !strings.Contains(dom, "step_time") {
		t.Errorf("the page does not show the step_time sample type")
	}
	// Each frame is a box at a height (top) of 20 px a level: root, then
	// step, then what the step's time went to.
	box := regexp.MustCompile(`class="boxbg[^"]*" style="left: [0-9.]+px; top: ([0-9]+)px; width: ([0-9.]+)px;[^"]*"><div class="boxtext"[^>]*>([^<]*)<`)
	stepTop := -1
	var under []string
	matches := box.FindAllStringSubmatch(dom, -1)
	for _, m := range matches {
		if m[3] == "step" {
			stepTop, _ = strconv.Atoi(m[1])
		}
	}
	if stepTop < 0 {
		t.Fatalf("no step frame among %d boxes of the flame graph", len(matches))
	}
	for _, m := range matches {
		if top, _ := strconv.Atoi(m[1]); top == stepTop+20 {
			under = append(under, m[3])
		}
	}
	// The browser draws a frame's name only where the frame is wide
	// enough, and how wide each is depends on the machine's load (a
	// loaded machine idles the ranks more): it must draw some, each a use
	// of the step's time. That the step's time splits into all of them is
	// read from the profile the page shows.
	if len(under) == 0 {
		t.Errorf("no named frame under step")
	}
	children := stepChildren(t, prof)
	for _, want := range []string{"forward", "backward", "transfer", "[idle: bubble]"} {
		if !slices.Contains(children, want) {
			t.Errorf("no %q frame under step in the profile; frames there: %q", want, children)
		}
	}
	for _, name := range under {
		if !slices.Contains([]string{"forward", "backward", "optimizer", "compute", "transfer", "[idle: bubble]", "[idle: other]"}, name) {
			t.Errorf("frame %q under step is not a use of the step's time", name)
		}
	}

	shots := os.Getenv("TRAINSCOPE_ARTIFACTS")
	if shots == "" {
		shots = t.TempDir()
	} else if err := os.MkdirAll(shots, 0o755); err != nil {
		t.Fatal(err)
	}
	shot := filepath.Join(shots, "flamegraph.png")
	if _, console := browseURL(t, browser, url, "--virtual-time-budget=5000", "--screenshot="+shot); len(console) > 0 {
		t.Errorf("console messages while taking the screenshot:\n%s", strings.Join(console, "\n"))
	}
	if st, err := os.Stat(shot); err != nil || st.Size() < 10<<10 {
		t.Errorf("screenshot %s: %v", shot, err)
	}
	t.Logf("screenshot: %s", shot)
}

// stepChildren is the names of the frames right under "step" in the
// step_time samples of the profile at path.
func stepChildren(t *testing.T, path string) []string {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	p, err := profile.Parse(f)
	if err != nil {
		t.Fatal(err)
	}
	idx := -1
	for i, st := range p.SampleType {
		if st.Type == "step_time" {
			idx = i
		}
	}
	if idx < 0 {
		t.Fatalf("%s has no step_time sample type", path)
	}
	var names []string
	for _, smp := range p.Sample {
		if smp.Value[idx] <= 0 {
			continue
		}
		// Leaf first: the frame before "step" is its child.
		var frames []string
		for _, loc := range smp.Location {
			for _, ln := range loc.Line {
				frames = append(frames, ln.Function.Name)
			}
		}
		for i := 1; i < len(frames); i++ {
			if frames[i] == "step" && !slices.Contains(names, frames[i-1]) {
				names = append(names, frames[i-1])
			}
		}
	}
	return names
}
