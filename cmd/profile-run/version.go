package main

import (
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"maps"
	"slices"
	"strings"

	"github.com/trainscope/trainscope/ccl"
	"github.com/trainscope/trainscope/exporters/jsonsummary"
	"github.com/trainscope/trainscope/internal/ncclplugin"
	"github.com/trainscope/trainscope/pipeline"
	"github.com/trainscope/trainscope/runtime"
)

const versionUsage = `Usage: profile-run version [-json]

Prints this build of profile-run, the host, the environment variables
that steer NCCL, CUDA and PyTorch's distributed layer, what each device
backend finds here (devices, libraries and their versions, or why it is not usable),
the backend -backend auto would train the default job on, and where the
NCCL profiler plugin for profile-run -- CMD is. Run it first on a new
machine, and put its output in bug reports. It trains nothing.

Flags:
`

// machine is what profile-run version reports.
type machine struct {
	ProfileRun jsonsummary.Build `json:"profile_run"`
	Host       *jsonsummary.Host `json:"host"`
	Backends   []backendReport   `json:"backends"`
	// Auto is the backend -backend auto takes for the default job, and
	// the lines it would say about those it passes over.
	Auto       string   `json:"auto"`
	PassedOver []string `json:"auto_passed_over,omitempty"`
	// Plugin is the NCCL profiler plugin's library, or why there is none
	// yet.
	Plugin        string `json:"nccl_plugin,omitempty"`
	PluginProblem string `json:"nccl_plugin_problem,omitempty"`
	// Variables are the environment variables that steer the libraries
	// (steeringVariables).
	Variables map[string]string `json:"variables,omitempty"`
}

// backendReport is one device type's runtime and collective backends.
type backendReport struct {
	Backend   string               `json:"backend"`
	Problem   string               `json:"problem,omitempty"` // the runtime does not load, or finds no device
	Devices   []jsonsummary.Device `json:"devices,omitempty"`
	Libraries []libraryReport      `json:"libraries,omitempty"`
	// Collectives is the collective backend's problem where it does not
	// load; "" where it does (its library is among Libraries).
	CollectivesProblem string `json:"collectives_problem,omitempty"`
}

// libraryReport is a library as the backend found it, or why not.
type libraryReport struct {
	jsonsummary.Library
	Problem string `json:"problem,omitempty"`
}

func runVersion(in *interrupt, args []string, stdout, stderr io.Writer) int {
	in.nothingToStop()
	fs := flag.NewFlagSet("profile-run version", flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	asJSON := fs.Bool("json", false, "print the same as one JSON object")
	fs.Usage = func() {}
	err := fs.Parse(args)
	switch {
	case errors.Is(err, flag.ErrHelp):
		fmt.Fprint(stderr, versionUsage)
		fs.SetOutput(stderr)
		fs.PrintDefaults()
		return exitOK
	case err != nil:
		_, _ = setupFailed(flagError("version: ", fs, err, nil), stderr, "profile-run version")
		return exitUsage
	case fs.NArg() > 0:
		_, _ = setupFailed(usagef("version: unexpected arguments %q", fs.Args()), stderr, "profile-run version")
		return exitUsage
	}
	m := survey(systemBackends)
	if *asJSON {
		enc := json.NewEncoder(stdout)
		enc.SetIndent("", "  ")
		err = enc.Encode(m)
	} else {
		err = m.write(stdout)
	}
	if err != nil {
		fmt.Fprintf(stderr, "profile-run: version: %v\n", err)
		return exitFail
	}
	return exitOK
}

// survey asks every backend what it finds here.
func survey(m backends) machine {
	out := machine{ProfileRun: thisBuild(), Host: thisHost(), Variables: steeringVariables(startEnviron)}
	for _, t := range []runtime.DeviceType{runtime.CUDA, runtime.CPU} {
		out.Backends = append(out.Backends, surveyBackend(t))
	}
	def := pipeline.DefaultConfig()
	if c, err := chooseBackend("auto", def, m); err != nil {
		out.Auto = "none: " + err.Error()
	} else {
		def.Backend = c.backend
		out.Auto = c.backend.String()
		if pl, err := def.Placement(); err == nil {
			out.Auto = pl.String()
		}
		for _, p := range c.passedOver {
			out.PassedOver = append(out.PassedOver, fmt.Sprintf("not %s: %s", p.backend, p.Reason()))
		}
	}
	loc, err := ncclplugin.Find("")
	out.Plugin = loc.Path
	if loc.How != "" {
		out.Plugin += " (" + loc.How + ")"
	}
	if err != nil {
		out.PluginProblem = err.Error()
	}
	return out
}

// surveyBackend is what the runtime and collective backends of t find.
func surveyBackend(t runtime.DeviceType) backendReport {
	r := backendReport{Backend: t.String()}
	impl, err := runtime.Available(t)
	if err != nil {
		r.Problem = err.Error()
		return r
	}
	n, err := impl.DeviceCount()
	switch {
	case err != nil:
		r.Problem = err.Error()
		return r
	case n < 1:
		r.Problem = "no devices"
		return r
	}
	r.Devices = describeDevices(impl, n)
	r.Libraries = libraryReports(impl)
	c, err := ccl.Available(t)
	if err != nil {
		r.CollectivesProblem = err.Error()
		return r
	}
	r.Libraries = append(r.Libraries, libraryReports(c)...)
	return r
}

// libraryReports are the libraries b found, with those that did not load.
func libraryReports(b any) []libraryReport {
	ld, ok := b.(runtime.LibraryDescriber)
	if !ok {
		return nil
	}
	var out []libraryReport
	for _, l := range ld.Libraries() {
		out = append(out, libraryReport{Library: jsonsummary.Library{Name: l.Name, Version: l.Version, Path: l.Path}, Problem: l.Problem})
	}
	return out
}

func (m machine) write(w io.Writer) error {
	ew := new(strings.Builder)
	fmt.Fprintf(ew, "profile-run %s\n", buildText(m.ProfileRun))
	h := m.Host
	fmt.Fprintf(ew, "host: %s, %s/%s, %s", h.Name, h.OS, h.Arch, count(h.CPUs, "CPU", "CPUs"))
	if h.CPUModel != "" {
		fmt.Fprintf(ew, " (%s)", h.CPUModel)
	}
	fmt.Fprintln(ew)
	if len(m.Variables) > 0 {
		var kv []string
		for _, n := range slices.Sorted(maps.Keys(m.Variables)) {
			kv = append(kv, n+"="+m.Variables[n])
		}
		fmt.Fprintf(ew, "variables: %s\n", strings.Join(kv, " "))
	}
	for _, b := range m.Backends {
		if b.Problem != "" {
			fmt.Fprintf(ew, "%s: not usable: %s\n", b.Backend, b.Problem)
			continue
		}
		devices := count(len(b.Devices), "device", "devices")
		if len(b.Devices) > 0 && b.Devices[0].HostMemory {
			// The host backend's devices are its streams' workers, on
			// the host's CPUs and memory, however many the CPUs.
			devices = count(len(b.Devices), "virtual device", "virtual devices") + " on the host's CPUs and memory"
		}
		fmt.Fprintf(ew, "%s: %s\n", b.Backend, devices)
		for _, g := range deviceGroups(b.Devices) {
			fmt.Fprintf(ew, "  %s\n", g)
		}
		for _, l := range b.Libraries {
			if l.Problem != "" {
				fmt.Fprintf(ew, "  %s: not usable: %s\n", l.Name, l.Problem)
				continue
			}
			fmt.Fprintf(ew, "  %s %s", l.Name, l.Version)
			if l.Path != "" {
				fmt.Fprintf(ew, " (%s)", l.Path)
			}
			fmt.Fprintln(ew)
		}
		if b.CollectivesProblem != "" {
			fmt.Fprintf(ew, "  collectives: not usable: %s\n", b.CollectivesProblem)
		}
	}
	fmt.Fprintf(ew, "-backend auto: the default job trains on %s\n", m.Auto)
	for _, p := range m.PassedOver {
		fmt.Fprintf(ew, "  %s\n", p)
	}
	if m.PluginProblem != "" {
		fmt.Fprintf(ew, "NCCL profiler plugin (profile-run -- CMD): %s\n", m.PluginProblem)
	} else {
		fmt.Fprintf(ew, "NCCL profiler plugin (profile-run -- CMD): %s\n", m.Plugin)
	}
	_, err := io.WriteString(w, ew.String())
	return err
}

// deviceGroups describes devices in lines, consecutive devices alike in
// one: "devices 0–7: NVIDIA H100 80GB HBM3, 79.1 GiB", "device 0: 23.5
// GiB of host memory, shared". Devices the backend says nothing about have no
// line.
func deviceGroups(devs []jsonsummary.Device) []string {
	about := func(d jsonsummary.Device) string {
		var a []string
		if d.Name != "" {
			a = append(a, d.Name)
		}
		switch {
		case d.MemoryBytes > 0 && d.HostMemory:
			a = append(a, fmt.Sprintf("%.1f GiB of host memory, shared", float64(d.MemoryBytes)/(1<<30)))
		case d.MemoryBytes > 0:
			a = append(a, fmt.Sprintf("%.1f GiB", float64(d.MemoryBytes)/(1<<30)))
		}
		return strings.Join(a, ", ")
	}
	var lines []string
	for i := 0; i < len(devs); {
		j := i + 1
		for j < len(devs) && about(devs[j]) == about(devs[i]) && devs[j].Index == devs[j-1].Index+1 {
			j++
		}
		if a := about(devs[i]); a != "" {
			ids := fmt.Sprintf("device %d", devs[i].Index)
			if j-i > 1 {
				ids = fmt.Sprintf("devices %d–%d", devs[i].Index, devs[j-1].Index)
			}
			lines = append(lines, ids+": "+a)
		}
		i = j
	}
	return lines
}
