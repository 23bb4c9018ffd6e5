package cuda

import (
	"github.com/trainscope/trainscope/runtime/cuda/dl"
)

// cudart holds the libcudart entry points the backend calls.
type cudart struct {
	lib *dl.Library

	runtimeGetVersion, driverGetVersion uintptr
	getErrorName, getErrorString        uintptr
	getLastError                        uintptr
	getDeviceCount, setDevice           uintptr
	getDevice, deviceSynchronize        uintptr
	memGetInfo                          uintptr

	streamCreateWithPriority, streamDestroy   uintptr
	deviceGetStreamPriorityRange              uintptr
	streamSynchronize, streamQuery            uintptr
	streamWaitEvent                           uintptr
	eventCreateWithFlags, eventDestroy        uintptr
	eventRecord, eventQuery, eventSynchronize uintptr
	eventElapsedTime                          uintptr

	malloc, free, mallocAsync, freeAsync uintptr
	memcpy, memcpyAsync                  uintptr
	memset, memsetAsync                  uintptr
	hostAlloc, freeHost                  uintptr
}

func bindCudart(lib *dl.Library) (*cudart, error) {
	a := &cudart{lib: lib}
	b := dl.NewBinder(lib)
	b.Sym(&a.runtimeGetVersion, "cudaRuntimeGetVersion")
	b.Sym(&a.driverGetVersion, "cudaDriverGetVersion")
	b.Sym(&a.getErrorName, "cudaGetErrorName")
	b.Sym(&a.getErrorString, "cudaGetErrorString")
	b.Sym(&a.getLastError, "cudaGetLastError")
	b.Sym(&a.getDeviceCount, "cudaGetDeviceCount")
	b.Sym(&a.setDevice, "cudaSetDevice")
	b.Sym(&a.getDevice, "cudaGetDevice")
	b.Sym(&a.deviceSynchronize, "cudaDeviceSynchronize")
	b.Sym(&a.memGetInfo, "cudaMemGetInfo")
	b.Sym(&a.streamCreateWithPriority, "cudaStreamCreateWithPriority")
	b.Sym(&a.streamDestroy, "cudaStreamDestroy")
	b.Sym(&a.deviceGetStreamPriorityRange, "cudaDeviceGetStreamPriorityRange")
	b.Sym(&a.streamSynchronize, "cudaStreamSynchronize")
	b.Sym(&a.streamQuery, "cudaStreamQuery")
	b.Sym(&a.streamWaitEvent, "cudaStreamWaitEvent")
	b.Sym(&a.eventCreateWithFlags, "cudaEventCreateWithFlags")
	b.Sym(&a.eventDestroy, "cudaEventDestroy")
	b.Sym(&a.eventRecord, "cudaEventRecord")
	b.Sym(&a.eventQuery, "cudaEventQuery")
	b.Sym(&a.eventSynchronize, "cudaEventSynchronize")
	// CUDA 12.8 added cudaEventElapsedTime_v2 (same signature); CUDA 13
	// headers map the plain name onto it.
	b.Sym(&a.eventElapsedTime, "cudaEventElapsedTime_v2", "cudaEventElapsedTime")
	b.Sym(&a.malloc, "cudaMalloc")
	b.Sym(&a.free, "cudaFree")
	b.Sym(&a.mallocAsync, "cudaMallocAsync")
	b.Sym(&a.freeAsync, "cudaFreeAsync")
	b.Sym(&a.memcpy, "cudaMemcpy")
	b.Sym(&a.memcpyAsync, "cudaMemcpyAsync")
	b.Sym(&a.memset, "cudaMemset")
	b.Sym(&a.memsetAsync, "cudaMemsetAsync")
	b.Sym(&a.hostAlloc, "cudaHostAlloc")
	b.Sym(&a.freeHost, "cudaFreeHost")
	if err := b.Err(); err != nil {
		return nil, err
	}
	return a, nil
}

// cublas holds the libcublas entry points.
type cublas struct {
	lib                            *dl.Library
	create, destroy, setStream     uintptr
	setMathMode, getVersion        uintptr
	sgemm, dgemm, gemmEx           uintptr
	saxpy, sscal, sdot             uintptr
	setPointerMode                 uintptr
	getStatusName, getStatusString uintptr
	getProperty                    uintptr // optional: the version, for Libraries
}

func bindCublas(lib *dl.Library) (*cublas, error) {
	a := &cublas{lib: lib}
	b := dl.NewBinder(lib)
	b.Sym(&a.create, "cublasCreate_v2")
	b.Sym(&a.destroy, "cublasDestroy_v2")
	b.Sym(&a.setStream, "cublasSetStream_v2")
	b.Sym(&a.setMathMode, "cublasSetMathMode")
	b.Sym(&a.getVersion, "cublasGetVersion_v2")
	b.Sym(&a.sgemm, "cublasSgemm_v2")
	b.Sym(&a.dgemm, "cublasDgemm_v2")
	b.Sym(&a.gemmEx, "cublasGemmEx")
	b.Sym(&a.saxpy, "cublasSaxpy_v2")
	b.Sym(&a.sscal, "cublasSscal_v2")
	b.Sym(&a.sdot, "cublasSdot_v2")
	b.Sym(&a.setPointerMode, "cublasSetPointerMode_v2")
	b.Optional(&a.getStatusName, "cublasGetStatusName")
	b.Optional(&a.getStatusString, "cublasGetStatusString")
	b.Optional(&a.getProperty, "cublasGetProperty")
	if err := b.Err(); err != nil {
		return nil, err
	}
	return a, nil
}

// driver holds the libcuda (driver API) entry points: kernel modules and
// launches, device names and UUIDs.
type driver struct {
	lib                                 *dl.Library
	init, deviceGet, deviceGetName      uintptr
	deviceGetUUID                       uintptr
	primaryCtxRetain, primaryCtxRelease uintptr
	ctxGetCurrent                       uintptr
	ctxSetCurrent, primaryCtxGetState   uintptr
	moduleLoadDataEx, moduleGetFunction uintptr
	moduleUnload                        uintptr
	launchKernel                        uintptr
	getErrorName, getErrorString        uintptr
	deviceTotalMem                      uintptr // optional: DeviceTotalMemory
}

func bindDriver(lib *dl.Library) (*driver, error) {
	a := &driver{lib: lib}
	b := dl.NewBinder(lib)
	b.Sym(&a.init, "cuInit")
	b.Sym(&a.deviceGet, "cuDeviceGet")
	b.Sym(&a.deviceGetName, "cuDeviceGetName")
	b.Sym(&a.deviceGetUUID, "cuDeviceGetUuid_v2", "cuDeviceGetUuid")
	b.Optional(&a.deviceTotalMem, "cuDeviceTotalMem_v2")
	b.Sym(&a.primaryCtxRetain, "cuDevicePrimaryCtxRetain")
	// CUDA 11 added cuDevicePrimaryCtxRelease_v2 (same signature); its
	// headers map the plain name onto it.
	b.Sym(&a.primaryCtxRelease, "cuDevicePrimaryCtxRelease_v2", "cuDevicePrimaryCtxRelease")
	b.Sym(&a.ctxGetCurrent, "cuCtxGetCurrent")
	b.Sym(&a.ctxSetCurrent, "cuCtxSetCurrent")
	b.Sym(&a.primaryCtxGetState, "cuDevicePrimaryCtxGetState")
	b.Sym(&a.moduleLoadDataEx, "cuModuleLoadDataEx")
	b.Sym(&a.moduleGetFunction, "cuModuleGetFunction")
	b.Sym(&a.moduleUnload, "cuModuleUnload")
	b.Sym(&a.launchKernel, "cuLaunchKernel")
	b.Sym(&a.getErrorName, "cuGetErrorName")
	b.Sym(&a.getErrorString, "cuGetErrorString")
	if err := b.Err(); err != nil {
		return nil, err
	}
	return a, nil
}
