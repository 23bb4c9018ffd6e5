package cuda

import (
	"fmt"

	"github.com/trainscope/trainscope/runtime"
	"github.com/trainscope/trainscope/runtime/cuda/dl"
)

// CUDA runtime and driver error codes the backend treats specially; the
// runtime and the driver number these alike.
const (
	cudaSuccess                  = 0
	cudaErrorInvalidValue        = 1
	cudaErrorMemoryAllocation    = 2
	cudaErrorInitializationError = 3
	cudaErrorCudartUnloading     = 4
	cudaErrorInvalidConfig       = 9
	cudaErrorInvalidPitchValue   = 12
	cudaErrorInvalidDevicePtr    = 17
	cudaErrorInvalidMemcpyDir    = 21
	cudaErrorStubLibrary         = 34
	cudaErrorInsufficientDriver  = 35
	cudaErrorCallRequiresNewer   = 36
	cudaErrorDevicesUnavailable  = 46
	cudaErrorInvalidKernelImage  = 200
	cudaErrorNoKernelImage       = 209
	cudaErrorInvalidPtx          = 218
	cudaErrorUnsupportedPtxVer   = 222
	cudaErrorNoDevice            = 100
	cudaErrorInvalidDevice       = 101
	cudaErrorDeviceNotLicensed   = 102
	cudaErrorInvalidHandle       = 400
	cudaErrorNotFound            = 500
	cudaErrorNotReady            = 600
	cudaErrorLaunchTimeout       = 702
	cudaErrorNotPermitted        = 800
	cudaErrorNotSupported        = 801
	cudaErrorTimeout             = 909
	cudaErrorUnknown             = 999
)

// statusOf maps a CUDA error code onto a runtime.Status.
func statusOf(code int32) runtime.Status {
	switch code {
	case cudaSuccess:
		return runtime.StatusSuccess
	case cudaErrorNotReady:
		return runtime.StatusNotReady
	case cudaErrorInvalidValue, cudaErrorInvalidDevice, cudaErrorInvalidHandle,
		cudaErrorInvalidConfig, cudaErrorInvalidPitchValue, cudaErrorInvalidDevicePtr,
		cudaErrorInvalidMemcpyDir:
		return runtime.StatusInvalidArgument
	case cudaErrorMemoryAllocation:
		return runtime.StatusOutOfMemory
	case cudaErrorInitializationError, cudaErrorCudartUnloading, cudaErrorStubLibrary,
		cudaErrorInsufficientDriver, cudaErrorNoDevice, cudaErrorDevicesUnavailable,
		cudaErrorDeviceNotLicensed:
		return runtime.StatusUnavailable
	case cudaErrorCallRequiresNewer, cudaErrorNotSupported, cudaErrorNoKernelImage,
		cudaErrorUnsupportedPtxVer, cudaErrorNotFound:
		return runtime.StatusNotSupported
	case cudaErrorInvalidKernelImage, cudaErrorInvalidPtx:
		return runtime.StatusInternal
	case cudaErrorNotPermitted:
		return runtime.StatusPermissionDenied
	case cudaErrorLaunchTimeout, cudaErrorTimeout:
		return runtime.StatusTimeout
	case cudaErrorUnknown:
		return runtime.StatusUnknown
	}
	return runtime.StatusError
}

// cudaErr turns a failed runtime-API call into an error carrying CUDA's
// own name and description, e.g. "cudaErrorMemoryAllocation: out of
// memory". The runtime's last-error slot is cleared so that a later,
// unrelated cudaGetLastError does not report it again. NotReady results
// carry no text: they are not failures, and the profiler's resolver sees
// them constantly.
func (m *Impl) cudaErr(op string, code int32) error {
	st := statusOf(code)
	if st == runtime.StatusNotReady {
		return errNotReady(op)
	}
	api := m.rt
	f := dl.Get()
	name := dl.GoString(f.Call(api.getErrorName, uintptr(code)))
	desc := dl.GoString(f.Call(api.getErrorString, uintptr(code)))
	f.Call(api.getLastError)
	f.Put()
	if name == "" {
		name = fmt.Sprintf("cuda error %d", code)
	}
	return runtime.Errorf(op, st, "%s: %s (cuda error %d)", name, desc, code)
}

// forOp returns err, a failure kept from an earlier call (a library or
// the kernels that did not load), as the error of op, the call that meets
// it now: the kept error names the call that first met it.
func forOp(op string, err error) error {
	e, ok := err.(*runtime.Error)
	if !ok || e.Op == op {
		return err
	}
	c := *e
	c.Op = op
	return &c
}

// notReady errors are preallocated per operation: they are returned on the
// profiler's polling path, which must not allocate.
var notReadyErrs = func() map[string]error {
	m := make(map[string]error)
	for _, op := range []string{"EventQuery", "EventElapsed", "StreamQuery", "EventSynchronize", "StreamSynchronize"} {
		m[op] = runtime.Errorf(op, runtime.StatusNotReady, "cudaErrorNotReady: device work not yet completed")
	}
	return m
}()

func errNotReady(op string) error {
	if e, ok := notReadyErrs[op]; ok {
		return e
	}
	return runtime.Errorf(op, runtime.StatusNotReady, "cudaErrorNotReady: device work not yet completed")
}

// driverErr is cudaErr for driver-API (CUresult) codes.
func (m *Impl) driverErr(op string, code int32) error {
	return driverErrOf(m.drv.loaded(), op, code)
}

// driverErrOf is driverErr with the names and descriptions of d, where d
// is not nil.
func driverErrOf(d *driver, op string, code int32) error {
	st := statusOf(code)
	if st == runtime.StatusNotReady {
		return errNotReady(op)
	}
	var name, desc string
	if d != nil {
		f := dl.Get()
		if f.Call(d.getErrorName, uintptr(code), f.OutPtr(0)) == 0 {
			name = dl.GoString(uintptr(f.Out[0]))
		}
		if f.Call(d.getErrorString, uintptr(code), f.OutPtr(1)) == 0 {
			desc = dl.GoString(uintptr(f.Out[1]))
		}
		f.Put()
	}
	if name == "" {
		name = fmt.Sprintf("CUresult %d", code)
	}
	return runtime.Errorf(op, st, "%s: %s (driver error %d)", name, desc, code)
}

// cuBLAS status codes.
var cublasNames = map[int32]string{
	0: "CUBLAS_STATUS_SUCCESS", 1: "CUBLAS_STATUS_NOT_INITIALIZED", 3: "CUBLAS_STATUS_ALLOC_FAILED",
	7: "CUBLAS_STATUS_INVALID_VALUE", 8: "CUBLAS_STATUS_ARCH_MISMATCH", 11: "CUBLAS_STATUS_MAPPING_ERROR",
	13: "CUBLAS_STATUS_EXECUTION_FAILED", 14: "CUBLAS_STATUS_INTERNAL_ERROR", 15: "CUBLAS_STATUS_NOT_SUPPORTED",
	16: "CUBLAS_STATUS_LICENSE_ERROR",
}

func cublasStatus(code int32) runtime.Status {
	switch code {
	case 0:
		return runtime.StatusSuccess
	case 1:
		return runtime.StatusUnavailable
	case 3:
		return runtime.StatusOutOfMemory
	case 7:
		return runtime.StatusInvalidArgument
	case 8, 15:
		return runtime.StatusNotSupported
	case 14:
		return runtime.StatusInternal
	case 16:
		return runtime.StatusPermissionDenied
	}
	return runtime.StatusError
}

// blasErr turns a cuBLAS status into an error with cuBLAS's name for it.
func (m *Impl) blasErr(op string, code int32) error {
	name, desc := cublasNames[code], ""
	if b := m.blas; b != nil {
		f := dl.Get()
		if b.getStatusName != 0 {
			name = dl.GoString(f.Call(b.getStatusName, uintptr(code)))
		}
		if b.getStatusString != 0 {
			desc = dl.GoString(f.Call(b.getStatusString, uintptr(code)))
		}
		f.Put()
	}
	if name == "" {
		name = fmt.Sprintf("cublasStatus %d", code)
	}
	if desc != "" {
		name += ": " + desc
	}
	return runtime.Errorf(op, cublasStatus(code), "%s (cublas status %d)", name, code)
}
