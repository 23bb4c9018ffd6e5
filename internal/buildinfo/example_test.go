package buildinfo_test

import (
	"fmt"
	"runtime/debug"

	"github.com/trainscope/trainscope/internal/buildinfo"
)

// A program that depends on trainscope carries its version among its
// dependencies.
func ExampleOf() {
	bi := &debug.BuildInfo{GoVersion: "go1.26.8", Main: debug.Module{Path: "example.com/trainer", Version: "(devel)"},
		Deps: []*debug.Module{{Path: "github.com/trainscope/trainscope", Version: "v0.2.0"}}}
	in := buildinfo.Of(bi)
	fmt.Println(in.Version, in.Go)
	// Output: v0.2.0 go1.26.8
}
