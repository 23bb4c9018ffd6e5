// Package cuda is trainscope's CUDA device backend: libcudart, libcublas
// and the driver (libcuda) opened at run time through purego, so a binary
// built with CGO_ENABLED=0 on a machine without CUDA runs on one with it.
//
// Importing the package only registers the backend for runtime.CUDA. The
// libraries load in Init (runtime.Available calls it): an explicit
// WithLibrary path, else TRAINSCOPE_CUDA_LIB, else libcudart.so.13,
// libcudart.so.12 and /usr/local/cuda/lib64/libcudart.so*. Where none
// loads, or no GPU or driver is present, Init returns an error wrapping
// runtime.StatusUnavailable that lists what was tried; a library that is
// too old or lacks symbols gives runtime.StatusNotSupported.
//
// CUDA's current device belongs to the OS thread. Every method that
// depends on it locks the calling goroutine to its thread for the call,
// makes the device of its argument current and restores the previous one,
// so callers never rely on a current device; SetDevice and GetDevice act on
// the calling thread and mean something only to a goroutine that holds
// runtime.LockOSThread.
//
// Besides runtime.Impl, the backend implements runtime.Elementwise (tanh
// and its derivative as PTX kernels the driver compiles at first use; axpy
// and scale through cuBLAS), runtime.DeviceDescriber and
// runtime.MemoryDescriber (cudaMemGetInfo) and runtime.MathModes. GEMMs
// run through cuBLAS: float32 in full fp32 precision unless the call asks
// for TF32 or bfloat16 compute (runtime.GemmArgs.Math) or WithTF32 is
// given, float64, and float16/bfloat16 with fp32 accumulation.
//
// StartActivityTrace turns on CUPTI's activity records (libcupti opened at
// run time: TRAINSCOPE_CUPTI_LIB, else libcupti.so.13, .so.12, .so and the
// toolkit's extras/CUPTI): the GPU start and end of every kernel, copy and
// memset, delivered in buffers CUPTI fills, with nothing recorded in the
// streams. Ids pushed around launches (ActivityTrace.Push) come back with
// the kernels those launches made. StartWorkTrace builds the profiler's
// work trace on it (profiler.WithWorkTrace, profile-run -device-timing
// trace); BenchmarkActivityHostCost measures what it costs the host beside
// a timing event (docs/benchmarks.md).
//
// Memory statistics are counters the backend keeps per device (bytes in
// use through it and their peak), with the device's total and free memory
// as of the last allocation or free, so reading them costs no driver call.
package cuda
