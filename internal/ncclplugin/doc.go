// Package ncclplugin is the Go side of trainscope's NCCL profiler plugin
// (plugins/nccl): a decoder for the record stream the plugin writes
// (NewReader), and a Collector that listens on a Unix socket for any
// number of wrapped processes, matches each collective and point-to-point
// operation with the kernel-channel times its GPU reported, and hands the
// result to a profiler as profiler.Records (Profiler.Ingest).
//
// The wire format is defined in plugins/nccl/trainscope_nccl_wire.h and
// docs/nccl-plugin.md; the constants here must agree with them (a test
// reads the header).
package ncclplugin
