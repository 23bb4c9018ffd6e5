package buildinfo

import (
	"runtime/debug"
	"testing"
)

// The module's version wherever it sits in the binary, and the commit
// only where trainscope is the main module the build describes.
func TestOf(t *testing.T) {
	vcs := []debug.BuildSetting{{Key: "vcs", Value: "git"}, {Key: "vcs.revision", Value: "89e3a542128fa3299ae260ddf26d65971fb7329d"},
		{Key: "vcs.time", Value: "2026-12-06T08:36:02Z"}, {Key: "vcs.modified", Value: "true"}}
	for _, tc := range []struct {
		name string
		bi   debug.BuildInfo
		want Info
	}{
		{"profile-run from a checkout", debug.BuildInfo{GoVersion: "go1.26.8", Settings: vcs,
			Main: debug.Module{Path: "github.com/trainscope/trainscope", Version: "v0.0.0-20261206083602-89e3a542128f+dirty"}},
			Info{Version: "v0.0.0-20261206083602-89e3a542128f+dirty", Revision: "89e3a542128fa3299ae260ddf26d65971fb7329d",
				Time: "2026-12-06T08:36:02Z", Modified: true, Go: "go1.26.8"}},
		{"go run", debug.BuildInfo{GoVersion: "go1.26.8", Main: debug.Module{Path: "github.com/trainscope/trainscope", Version: "(devel)"}},
			Info{Version: "(devel)", Go: "go1.26.8"}},
		{"a dependency: the commit is the other program's", debug.BuildInfo{GoVersion: "go1.26.8", Settings: vcs,
			Main: debug.Module{Path: "example.com/trainer", Version: "(devel)"},
			Deps: []*debug.Module{{Path: "go.uber.org/zap", Version: "v1.27.0"}, {Path: "github.com/trainscope/trainscope", Version: "v0.2.0"}}},
			Info{Version: "v0.2.0", Go: "go1.26.8"}},
		{"replaced by a release", debug.BuildInfo{Main: debug.Module{Path: "example.com/trainer"},
			Deps: []*debug.Module{{Path: "github.com/trainscope/trainscope", Version: "v0.2.0", Replace: &debug.Module{Path: "github.com/fork/trainscope", Version: "v0.2.1"}}}},
			Info{Version: "v0.2.1"}},
		{"replaced by a directory", debug.BuildInfo{Main: debug.Module{Path: "example.com/trainer"},
			Deps: []*debug.Module{{Path: "github.com/trainscope/trainscope", Version: "v0.2.0", Replace: &debug.Module{Path: "../trainscope"}}}},
			Info{Version: "v0.2.0"}},
		{"not there", debug.BuildInfo{Main: debug.Module{Path: "example.com/other"}}, Info{}},
	} {
		if got := Of(&tc.bi); got != tc.want {
			t.Errorf("%s: %+v, want %+v", tc.name, got, tc.want)
		}
	}
}

// A test binary of this module is its main module, built from a checkout
// without a recorded commit.
func TestRead(t *testing.T) {
	if got := Read(); got.Version != "(devel)" || got.Go == "" || got.Revision != "" {
		t.Errorf("Read in a test binary = %+v, want (devel), a toolchain, no commit", got)
	}
}
