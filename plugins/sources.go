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
