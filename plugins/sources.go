// Package plugins carries the sources of trainscope's NCCL profiler
// plugin (nccl/plugin.c and its headers, a C shared library loaded by
// NCCL into a training process), so that profile-run can build the
// plugin on a machine that has a C compiler but not this repository. The
// Makefile in nccl/ builds it by hand; docs/nccl-plugin.md says what it
// does.
package plugins

import "embed"

// NCCLSources holds nccl/plugin.c and the headers it includes.
//
//go:embed nccl/plugin.c nccl/cupti_activity_abi.h nccl/nccl_profiler_abi.h nccl/nvtx_injection_abi.h nccl/trainscope_nccl_wire.h
var NCCLSources embed.FS

// NCCLLibrary is the file name of the built plugin.
const NCCLLibrary = "libtrainscope-nccl.so"

// NCCLBuildArgs are the compiler arguments (after the compiler itself)
// that build NCCLLibrary from plugin.c in the current directory, as the
// Makefile does.
var NCCLBuildArgs = []string{
	"-O2", "-std=c11", "-fPIC", "-pthread", "-fvisibility=hidden",
	"plugin.c", "-o", NCCLLibrary,
	"-shared", "-Wl,-z,nodelete", "-Wl,-z,defs", "-ldl",
}
