package main

import (
	"encoding/json"
	"errors"
	"maps"
	"os"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/trainscope/trainscope/exporters/jsonsummary"
	"github.com/trainscope/trainscope/internal/ncclplugin"
	"github.com/trainscope/trainscope/runtime"
)

// TestVersion: profile-run version names this build, the host, each
// backend (its devices, or why it is not usable), where -backend auto
// would train the default job, and the plugin; -json says the same. It
// trains nothing and writes no run directory.
func TestVersion(t *testing.T) {
	dir := t.TempDir()
	t.Chdir(dir)
	t.Setenv("NCCL_ALGO", "Ring")
	setStartEnviron(t)
	code, stdout, stderr := runCmd(t, "version")
	if code != exitOK || stderr != "" {
		t.Fatalf("exit %d, stderr %q", code, stderr)
	}
	hostname, _ := os.Hostname()
	for _, re := range []string{
		`(?m)^profile-run \(devel\), go1\.\d+`,
		`(?m)^host: ` + regexp.QuoteMeta(hostname) + `, \w+/\w+, \d+ CPUs?`,
		`(?m)^cuda: (not usable: .+|\d+ devices?)$`,
		`(?m)^cpu: \d+ virtual devices? on the host's CPUs and memory\n  (device 0|devices 0–\d+): [\d.]+ GiB of host memory, shared$`,
		`(?m)^-backend auto: the default job trains on 2 ranks (on 2|sharing 1) (cpu|cuda) devices?`,
		`(?m)^NCCL profiler plugin \(profile-run -- CMD\): .+`,
		`(?m)^variables: .*\bNCCL_ALGO=Ring\b`,
	} {
		if !regexp.MustCompile(re).MatchString(stdout) {
			t.Errorf("no line matching %s in:\n%s", re, stdout)
		}
	}
	// Without CUDA, auto says why it passed it over, in the words of the
	// cuda line above.
	if m := regexp.MustCompile(`(?m)^cuda: not usable: .*: (CUDA runtime library \(libcudart\) not found):`).FindStringSubmatch(stdout); m != nil {
		if !strings.Contains(stdout, "\n  not cuda: "+m[1]+"\n") {
			t.Errorf("auto does not say it passed cuda over (%s):\n%s", m[1], stdout)
		}
	}
	if entries, _ := os.ReadDir(dir); len(entries) != 0 {
		t.Errorf("version wrote %v", entries)
	}

	code, js, stderr := runCmd(t, "version", "-json")
	if code != exitOK || stderr != "" {
		t.Fatalf("-json: exit %d, stderr %q", code, stderr)
	}
	var m struct {
		ProfileRun jsonsummary.Build `json:"profile_run"`
		Host       jsonsummary.Host  `json:"host"`
		Backends   []struct {
			Backend string
			Problem string
			Devices []jsonsummary.Device
		}
		Auto string
	}
	if err := json.Unmarshal([]byte(js), &m); err != nil {
		t.Fatalf("%v\n%s", err, js)
	}
	if m.ProfileRun.Version != "(devel)" || m.Host.Name != hostname || len(m.Backends) != 2 || m.Auto == "" {
		t.Errorf("-json: %+v", m)
	}
	for _, b := range m.Backends {
		if _, err := runtime.ParseDeviceType(b.Backend); err != nil || (b.Problem == "") == (len(b.Devices) == 0) {
			t.Errorf("-json backend %+v: want a known backend with devices or a problem", b)
		}
		if b.Backend == "cpu" && len(b.Devices) == 0 {
			t.Errorf("-json: the host backend has no devices: %+v", b)
		}
	}
}

// Misuse of version is a usage error; help version and -version work.
func TestVersionUsage(t *testing.T) {
	if code, _, stderr := runCmd(t, "version", "extra"); code != exitUsage || !strings.Contains(stderr, `unexpected arguments ["extra"]`) || strings.Count(stderr, "\n") != 1 {
		t.Errorf("version extra: exit %d, %q", code, stderr)
	}
	if code, _, stderr := runCmd(t, "version", "-speed"); code != exitUsage || !strings.Contains(stderr, "speed") {
		t.Errorf("version -speed: exit %d, %q", code, stderr)
	}
	if code, _, stderr := runCmd(t, "help", "version"); code != exitOK || !strings.Contains(stderr, "Usage: profile-run version") || !strings.Contains(stderr, "-json") {
		t.Errorf("help version: exit %d, %q", code, stderr)
	}
	for _, a := range []string{"-version", "--version"} {
		if code, stdout, _ := runCmd(t, a); code != exitOK || !strings.HasPrefix(stdout, "profile-run (devel), go1.") {
			t.Errorf("%s: exit %d, %q", a, code, stdout)
		}
	}
}

// deviceGroups puts consecutive devices alike on one line.
func TestDeviceGroups(t *testing.T) {
	h100 := jsonsummary.Device{Name: "NVIDIA H100 80GB HBM3", MemoryBytes: 85 << 30}
	at := func(d jsonsummary.Device, i int) jsonsummary.Device { d.Index = i; return d }
	devs := []jsonsummary.Device{at(h100, 0), at(h100, 1), at(jsonsummary.Device{Name: "NVIDIA H200", MemoryBytes: 141 << 30}, 2), at(h100, 3), {Index: 4}}
	want := []string{"devices 0–1: NVIDIA H100 80GB HBM3, 85.0 GiB", "device 2: NVIDIA H200, 141.0 GiB", "device 3: NVIDIA H100 80GB HBM3, 85.0 GiB"}
	if got := deviceGroups(devs); strings.Join(got, "|") != strings.Join(want, "|") {
		t.Errorf("%q, want %q", got, want)
	}
}

// cpuModel reads the first processor's model name as /proc/cpuinfo
// writes it; none where the file names none or is not there.
func TestCPUModel(t *testing.T) {
	dir := t.TempDir()
	write := func(name, text string) string {
		p := dir + "/" + name
		if err := os.WriteFile(p, []byte(text), 0o644); err != nil {
			t.Fatal(err)
		}
		return p
	}
	x86 := write("x86", "processor\t: 0\nvendor_id\t: GenuineIntel\nmodel name\t: Intel(R) Xeon(R) Platinum 8480+\nflags\t\t: fpu\n\nprocessor\t: 1\nmodel name\t: Intel(R) Xeon(R) Platinum 8480+\n")
	arm := write("arm", "processor\t: 0\nBogoMIPS\t: 50.00\nCPU implementer\t: 0x41\n")
	for _, tc := range []struct{ path, want string }{
		{x86, "Intel(R) Xeon(R) Platinum 8480+"}, {arm, ""}, {dir + "/absent", ""},
	} {
		if got := cpuModel(tc.path); got != tc.want {
			t.Errorf("%s: %q, want %q", tc.path, got, tc.want)
		}
	}
}

// The variables that steer the libraries are kept, others and any named
// like a credential left out.
func TestSteeringVariables(t *testing.T) {
	got := steeringVariables([]string{"NCCL_ALGO=Ring", "CUDA_VISIBLE_DEVICES=0,1", "HOME=/root", "PATH=/bin", "NCCL_IB_HCA=mlx5",
		"TORCH_NCCL_ASYNC_ERROR_HANDLING=1", "TRAINSCOPE_NCCL_LIB=/x/libnccl.so.2", "TRAINSCOPE_API_TOKEN=t0k", "NCCL_SECRET_THING=s",
		"CUDA_MODULE_LOADING=EAGER", "OMP_NUM_THREADS=8", "MY_NCCL_ALGO=Tree", "NCCL_EMPTY=", "malformed"})
	want := map[string]string{"NCCL_ALGO": "Ring", "CUDA_VISIBLE_DEVICES": "0,1", "NCCL_IB_HCA": "mlx5", "TORCH_NCCL_ASYNC_ERROR_HANDLING": "1",
		"TRAINSCOPE_NCCL_LIB": "/x/libnccl.so.2", "CUDA_MODULE_LOADING": "EAGER", "OMP_NUM_THREADS": "8", "NCCL_EMPTY": ""}
	if !maps.Equal(got, want) {
		t.Errorf("%v\nwant %v", got, want)
	}
	if got := steeringVariables([]string{"HOME=/root"}); got != nil {
		t.Errorf("none that steer: %v, want nil", got)
	}
}

// setStartEnviron makes the environment t set (t.Setenv) the one
// profile-run started with, until t ends.
func setStartEnviron(t *testing.T) {
	old := startEnviron
	startEnviron = os.Environ()
	t.Cleanup(func() { startEnviron = old })
}

// fakeGPUs is a CUDA backend as nameGPUs asks it: devices by UUID, with
// names and memory.
type fakeGPUs struct {
	runtime.Impl // nil: nothing else is asked
	uuids, names []string
}

func (f fakeGPUs) DeviceCount() (int, error)              { return len(f.uuids), nil }
func (f fakeGPUs) DeviceUUID(i int) (string, error)       { return f.uuids[i], nil }
func (f fakeGPUs) DeviceName(i int) (string, error)       { return f.names[i], nil }
func (f fakeGPUs) DeviceTotalMemory(i int) (int64, error) { return int64(i+1) << 30, nil }

// A wrapped command's GPUs, reported by UUID, are named as this host's
// CUDA backend sees them; one it does not see keeps its UUID alone.
func TestWrappedEnvironmentNamesGPUs(t *testing.T) {
	u := func(b byte) (x [16]byte) {
		for i := range x {
			x[i] = b + byte(i)
		}
		return x
	}
	st := ncclplugin.Stats{GPUs: [][16]byte{u(0x10), u(0x20), u(0x30)}, NCCLVersions: []int32{22809}}
	if got := uuidText(u(0x10)); got != "GPU-10111213-1415-1617-1819-1a1b1c1d1e1f" {
		t.Fatalf("uuidText = %s", got)
	}
	gpus := fakeGPUs{uuids: []string{uuidText(u(0x20)), uuidText(u(0x10))}, names: []string{"NVIDIA H200", "NVIDIA H100 80GB HBM3"}}
	env := wrappedEnvironment(st, func() (runtime.Impl, error) { return gpus, nil })
	want := []jsonsummary.Device{
		{Index: 1, Name: "NVIDIA H100 80GB HBM3", MemoryBytes: 2 << 30, UUID: uuidText(u(0x10))},
		{Index: 0, Name: "NVIDIA H200", MemoryBytes: 1 << 30, UUID: uuidText(u(0x20))},
		{Index: -1, UUID: uuidText(u(0x30))},
	}
	if env.Backend != "cuda" || !slices.Equal(env.Devices, want) || len(env.Libraries) != 1 || env.Libraries[0] != (jsonsummary.Library{Name: "NCCL", Version: "2.28.9"}) {
		t.Errorf("environment %+v\nwant devices %+v and NCCL 2.28.9", env, want)
	}
	// No CUDA here: the UUIDs alone.
	env = wrappedEnvironment(st, func() (runtime.Impl, error) { return nil, errors.New("no libcudart") })
	for i, d := range env.Devices {
		if d.Index != -1 || d.Name != "" || d.UUID != want[i].UUID {
			t.Errorf("without CUDA: device %+v", d)
		}
	}
	// A run whose plugin sent no UUID has no devices.
	if env := wrappedEnvironment(ncclplugin.Stats{}, nil); env.Backend != "" || env.Devices != nil {
		t.Errorf("no GPUs reported: %+v", env)
	}
}
