package pprof_test

import (
	"bytes"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/trainscope/trainscope/exporters/pprof"
	"github.com/trainscope/trainscope/profiler"
)

// goToolTop runs `go tool pprof -top` on path for one sample type, every
// node shown and values in plain nanoseconds, and returns flat and cum per
// name as pprof prints them.
func goToolTop(t *testing.T, goBin, path, sampleType string) figures {
	t.Helper()
	cmd := exec.Command(goBin, "tool", "pprof", "-top", "-unit=ns", "-nodefraction=0", "-nodecount=100000",
		"-sample_index="+sampleType, path)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("go tool pprof: %v\n%s", err, stderr.Bytes())
	}
	if s := strings.TrimSpace(stderr.String()); s != "" {
		t.Errorf("go tool pprof wrote to stderr: %s", s)
	}
	f := figures{map[string]int64{}, map[string]int64{}}
	lines := strings.Split(string(out), "\n")
	i := 0
	for i < len(lines) && !strings.HasPrefix(strings.TrimSpace(lines[i]), "flat  flat%") {
		i++
	}
	if i == len(lines) {
		t.Fatalf("no table in go tool pprof -top output:\n%s", out)
	}
	num := func(s string) int64 {
		v, err := strconv.ParseInt(strings.TrimSuffix(s, "ns"), 10, 64)
		if err != nil {
			t.Fatalf("value %q in go tool pprof -top output: %v", s, err)
		}
		return v
	}
	for _, line := range lines[i+1:] {
		fields := strings.Fields(line)
		if len(fields) < 6 {
			continue
		}
		name := strings.Join(fields[5:], " ")
		f.flat[name], f.cum[name] = num(fields[0]), num(fields[3])
	}
	return f
}

// TestGoToolPprof opens a written profile with `go tool pprof -top` and
// checks the figures it prints against the report: cum of host_time and
// of device_time (device-timed names) equals the report's totals per
// name, and flat of ranges its counts.
func TestGoToolPprof(t *testing.T) {
	goBin, err := exec.LookPath("go")
	if err != nil {
		t.Skipf("go tool pprof needs the go command on PATH: %v", err)
	}
	cases := []struct {
		name    string
		records func(t *testing.T) []profiler.Record
	}{
		{"fixture", func(*testing.T) []profiler.Record { return fixture() }},
		{"trainer", func(t *testing.T) []profiler.Record { recs, _ := trainerRecords(t); return recs }},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			recs := c.records(t)
			path := filepath.Join(t.TempDir(), "ranges.pb.gz")
			if _, err := pprof.WriteFile(path, recs); err != nil {
				t.Fatal(err)
			}
			rt := report(recs)
			host := goToolTop(t, goBin, path, pprof.HostTime)
			device := goToolTop(t, goBin, path, pprof.DeviceTime)
			ranges := goToolTop(t, goBin, path, pprof.Ranges)
			for n, count := range rt.count {
				if _, ok := host.cum[n]; !ok {
					t.Errorf("go tool pprof -top does not list %s", n)
					continue
				}
				if host.cum[n] != rt.host[n] {
					t.Errorf("%s: pprof host_time cum %dns, report %dns", n, host.cum[n], rt.host[n])
				}
				if rt.deviceTimed[n] && device.cum[n] != rt.device[n] {
					t.Errorf("%s: pprof device_time cum %dns, report %dns", n, device.cum[n], rt.device[n])
				}
				if ranges.flat[n] != count {
					t.Errorf("%s: pprof ranges flat %d, report count %d", n, ranges.flat[n], count)
				}
			}
			var hostFlat, deviceFlat int64
			for n := range host.flat {
				hostFlat += host.flat[n]
				deviceFlat += device.flat[n]
			}
			if hostFlat != rt.topHost || deviceFlat != rt.outerDev {
				t.Errorf("flat sums host %d device %d, report top-level host %d, outermost device %d",
					hostFlat, deviceFlat, rt.topHost, rt.outerDev)
			}
		})
	}
}
