package buildinfo

import (
	goruntime "runtime"
	"runtime/debug"
)

// Module is the trainscope module's path.
const Module = "github.com/trainscope/trainscope"

// Info is a build of trainscope.
type Info struct {
	// Version is the module's version: a release ("v0.3.1"), a
	// pseudo-version where the build recorded its commit, "(devel)" from
	// a checkout without one, "" where the binary does not say.
	Version string
	// Revision, Time and Modified are the commit the binary was built
	// from, its time (RFC 3339) and whether the checkout had changes not
	// committed: where trainscope is the main module and the build
	// recorded them (go build in a git checkout; not go run or go test).
	Revision string
	Time     string
	Modified bool
	// Go is the toolchain, "go1.26.8".
	Go string
}

// Read is the running binary's build of trainscope.
func Read() Info {
	bi, ok := debug.ReadBuildInfo()
	if !ok {
		return Info{Go: goruntime.Version()}
	}
	return Of(bi)
}

// Of is trainscope's build as bi records it.
func Of(bi *debug.BuildInfo) Info {
	in := Info{Version: ModuleVersion(bi), Go: bi.GoVersion}
	if bi.Main.Path != Module {
		return in
	}
	for _, s := range bi.Settings {
		switch s.Key {
		case "vcs.revision":
			in.Revision = s.Value
		case "vcs.time":
			in.Time = s.Value
		case "vcs.modified":
			in.Modified = s.Value == "true"
		}
	}
	return in
}

// Version is the running binary's trainscope version (Info.Version).
func Version() string { return Read().Version }

// ModuleVersion is the trainscope module's version in bi: the main
// module's, or a dependency's (that of the module replacing it where it
// has one); "" where bi has no trainscope.
func ModuleVersion(bi *debug.BuildInfo) string {
	if bi.Main.Path == Module {
		return bi.Main.Version
	}
	for _, d := range bi.Deps {
		if d.Path == Module {
			if d.Replace != nil && d.Replace.Version != "" {
				return d.Replace.Version
			}
			return d.Version
		}
	}
	return ""
}
