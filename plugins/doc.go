// Package plugins carries the sources of trainscope's NCCL profiler
// plugin (nccl/plugin.c and its headers, a C shared library loaded by
// NCCL into a training process), so that profile-run can build the
// plugin on a machine that has a C compiler but not this repository. The
// Makefile in nccl/ builds it by hand; docs/nccl-plugin.md says what it
// does.
package plugins
