package main

import (
	"fmt"
	"os"
	goruntime "runtime"
	"slices"
	"strings"

	"github.com/trainscope/trainscope/ccl"
	"github.com/trainscope/trainscope/ccl/nccl"
	"github.com/trainscope/trainscope/exporters/jsonsummary"
	"github.com/trainscope/trainscope/internal/buildinfo"
	"github.com/trainscope/trainscope/internal/ncclplugin"
	"github.com/trainscope/trainscope/pipeline"
	"github.com/trainscope/trainscope/runtime"
)

// thisBuild is the build of this profile-run (buildinfo.Read).
func thisBuild() jsonsummary.Build {
	b := buildinfo.Read()
	if b.Version == "" {
		b.Version = "(unknown)"
	}
	return jsonsummary.Build{Version: b.Version, Revision: b.Revision, Time: b.Time, Modified: b.Modified, Go: b.Go}
}

// buildText is a build in a line: "(devel), commit 89e3a54c1f2b of
// 2026-12-06T08:40:00Z with changes not committed, go1.26.8".
func buildText(b jsonsummary.Build) string {
	s := b.Version
	if b.Revision != "" {
		s += ", commit " + b.Revision[:min(len(b.Revision), 12)]
		if b.Time != "" {
			s += " of " + b.Time
		}
		if b.Modified {
			s += " with changes not committed"
		}
	}
	return s + ", " + b.Go
}

// thisHost is the machine profile-run runs on.
func thisHost() *jsonsummary.Host {
	name, _ := os.Hostname()
	return &jsonsummary.Host{Name: name, OS: goruntime.GOOS, Arch: goruntime.GOARCH, CPUs: goruntime.NumCPU(), CPUModel: cpuModel("/proc/cpuinfo")}
}

// cpuModel is the first "model name" of a /proc/cpuinfo; "" where the
// file is not there or names none (other systems, some architectures).
func cpuModel(path string) string {
	b, err := os.ReadFile(path)
	if err != nil {
		return ""
	}
	for line := range strings.Lines(string(b)) {
		if k, v, ok := strings.Cut(line, ":"); ok && strings.TrimSpace(k) == "model name" {
			return strings.TrimSpace(v)
		}
	}
	return ""
}

// steering names the environment variables a run's summary keeps: those
// that change what NCCL, CUDA, cuBLAS, PyTorch's distributed layer and
// OpenMP do, and trainscope's own.
var steering = []string{"NCCL_", "CUDA_", "CUBLAS_", "CUBLASLT_", "NVIDIA_TF32_OVERRIDE", "TORCH_NCCL_", "TORCH_DISTRIBUTED_",
	"PYTORCH_CUDA_ALLOC_CONF", "OMP_NUM_THREADS", "TRAINSCOPE_"}

// secretWords mark a variable whose value may be a credential: it is left
// out whatever its prefix.
var secretWords = []string{"KEY", "TOKEN", "SECRET", "PASSWORD", "CREDENTIAL"}

// steeringVariables are the variables of environ (NAME=value entries)
// that steering names, without any that may hold a credential.
func steeringVariables(environ []string) map[string]string {
	vars := map[string]string{}
	for _, kv := range environ {
		name, value, ok := strings.Cut(kv, "=")
		if !ok || !slices.ContainsFunc(steering, func(p string) bool { return strings.HasPrefix(name, p) }) ||
			slices.ContainsFunc(secretWords, func(w string) bool { return strings.Contains(strings.ToUpper(name), w) }) {
			continue
		}
		vars[name] = value
	}
	if len(vars) == 0 {
		return nil
	}
	return vars
}

// startEnviron is the environment profile-run started with, before a
// backend set anything in it (runtime/cuda sets CUDA_MODULE_LOADING when
// it loads): what the user set, and what a wrapped command inherits.
var startEnviron = os.Environ()

// hostEnvironment is what any run on this host ran with: this build, the
// host, and the variables that steer the libraries.
func hostEnvironment() *jsonsummary.Environment {
	return &jsonsummary.Environment{ProfileRun: thisBuild(), Host: thisHost(), Variables: steeringVariables(startEnviron)}
}

// wrappedEnvironment is what a wrapped command ran with, as far as its
// plugin said: this host's environment, the GPUs its processes made
// communicators on (named through gpus), and the NCCL versions they
// reported (no path: the plugin does not send it).
func wrappedEnvironment(st ncclplugin.Stats, gpus func() (runtime.Impl, error)) *jsonsummary.Environment {
	env := hostEnvironment()
	if len(st.GPUs) > 0 {
		env.Backend = runtime.CUDA.String()
		env.Devices = nameGPUs(st.GPUs, gpus)
	}
	for _, v := range st.NCCLVersions {
		env.Libraries = append(env.Libraries, jsonsummary.Library{Name: "NCCL", Version: nccl.VersionString(int(v))})
	}
	return env
}

// uuidText writes a GPU UUID as nvidia-smi and cuda.Impl.DeviceUUID do.
func uuidText(u [16]byte) string {
	return fmt.Sprintf("GPU-%x-%x-%x-%x-%x", u[0:4], u[4:6], u[6:8], u[8:10], u[10:16])
}

// nameGPUs describes the GPUs of uuids as this host's CUDA backend (gpus)
// sees them, the processes that reported them being on this host: the
// ordinal profile-run sees, the name and the memory, through the driver
// (no context is made). A GPU it does not see (CUDA_VISIBLE_DEVICES, or
// no CUDA here) keeps its UUID alone, at index −1.
func nameGPUs(uuids [][16]byte, gpus func() (runtime.Impl, error)) []jsonsummary.Device {
	devs := make([]jsonsummary.Device, len(uuids))
	for i, u := range uuids {
		devs[i] = jsonsummary.Device{Index: -1, UUID: uuidText(u)}
	}
	impl, err := gpus()
	if err != nil {
		return devs
	}
	names, ok := impl.(runtime.DeviceDescriber)
	n, err := impl.DeviceCount()
	if !ok || err != nil {
		return devs
	}
	total, _ := impl.(totalMemory)
	for i := range n {
		id, err := names.DeviceUUID(i)
		if err != nil {
			continue
		}
		for j := range devs {
			if devs[j].UUID != id {
				continue
			}
			devs[j].Index = i
			devs[j].Name, _ = names.DeviceName(i)
			if total != nil {
				devs[j].MemoryBytes, _ = total.DeviceTotalMemory(i)
			}
		}
	}
	return devs
}

// trainerEnvironment is what the built-in trainer runs on with placement
// pl: this build and host, the devices in use and the libraries loaded
// for them. It asks the backends what they have already loaded, and the
// devices' names and memory (a driver call each, before training).
func trainerEnvironment(pl pipeline.Placement) *jsonsummary.Environment {
	env := hostEnvironment()
	env.Backend = pl.Type.String()
	impl, err := runtime.Lookup(pl.Type)
	if err != nil {
		return env
	}
	env.Devices = describeDevices(impl, pl.Devices)
	env.Libraries = libraries(impl)
	// The collective library only where the ranks go through it: ranks
	// sharing devices, or one rank, communicate in process.
	if !pl.Shared && pl.Ranks > 1 {
		if c, err := ccl.Lookup(pl.Type); err == nil {
			env.Libraries = append(env.Libraries, libraries(c)...)
		}
	}
	return env
}

// totalMemory is a backend that says a device's memory without using the
// device (runtime/cuda: through the driver, making no context).
type totalMemory interface {
	DeviceTotalMemory(index int) (int64, error)
}

// describeDevices names devices 0 to n−1 of impl, with their memory, as
// far as the backend says them. It uses no device: a GPU's memory comes
// from the driver where the backend has it that way (totalMemory), not
// from a query that makes a context on every GPU of a machine that may
// be busy; the backend's MemoryDescriber is asked only where its memory
// is the host's.
func describeDevices(impl runtime.Impl, n int) []jsonsummary.Device {
	names, _ := impl.(runtime.DeviceDescriber)
	total, _ := impl.(totalMemory)
	mem, _ := impl.(runtime.MemoryDescriber)
	devs := make([]jsonsummary.Device, 0, n)
	for i := range n {
		d := jsonsummary.Device{Index: i}
		if names != nil {
			d.Name, _ = names.DeviceName(i)
		}
		switch {
		case total != nil:
			d.MemoryBytes, _ = total.DeviceTotalMemory(i)
		case mem != nil && impl.Type() == runtime.CPU:
			if m, err := mem.DeviceMemory(i); err == nil {
				d.MemoryBytes, d.HostMemory = m.Total, m.Host
			}
		}
		devs = append(devs, d)
	}
	return devs
}

// libraries are the vendor libraries b loaded (runtime.LibraryDescriber),
// leaving out those that did not load.
func libraries(b any) []jsonsummary.Library {
	ld, ok := b.(runtime.LibraryDescriber)
	if !ok {
		return nil
	}
	var libs []jsonsummary.Library
	for _, l := range ld.Libraries() {
		if l.Problem == "" {
			libs = append(libs, jsonsummary.Library{Name: l.Name, Version: l.Version, Path: l.Path})
		}
	}
	return libs
}
