package nccl

import (
	"fmt"

	"github.com/trainscope/trainscope/ccl"
	"github.com/trainscope/trainscope/runtime/cuda/dl"
)

// ncclResult_t values.
const (
	ncclSuccess            = 0
	ncclUnhandledCudaError = 1
	ncclSystemError        = 2
	ncclInternalError      = 3
	ncclInvalidArgument    = 4
	ncclInvalidUsage       = 5
	ncclRemoteError        = 6
	ncclInProgress         = 7
	ncclTimeout            = 8
)

var resultNames = [...]string{
	ncclSuccess: "ncclSuccess", ncclUnhandledCudaError: "ncclUnhandledCudaError", ncclSystemError: "ncclSystemError",
	ncclInternalError: "ncclInternalError", ncclInvalidArgument: "ncclInvalidArgument", ncclInvalidUsage: "ncclInvalidUsage",
	ncclRemoteError: "ncclRemoteError", ncclInProgress: "ncclInProgress", ncclTimeout: "ncclTimeout",
}

func resultName(rc int32) string {
	if rc >= 0 && int(rc) < len(resultNames) {
		return resultNames[rc]
	}
	return fmt.Sprintf("ncclResult %d", rc)
}

// statusOf maps an ncclResult_t onto a ccl.Status.
func statusOf(rc int32) ccl.Status {
	switch rc {
	case ncclSuccess:
		return ccl.StatusSuccess
	case ncclInProgress:
		return ccl.StatusInProgress
	case ncclTimeout:
		return ccl.StatusTimeout
	case ncclInvalidArgument, ncclInvalidUsage:
		return ccl.StatusInvalidArgument
	case ncclInternalError:
		return ccl.StatusInternal
	case ncclUnhandledCudaError, ncclSystemError, ncclRemoteError:
		return ccl.StatusError
	}
	return ccl.StatusUnknown
}

// errInProgress is what GetAsyncError returns while a communicator is
// being set up; preallocated, since Work polls it.
var errInProgress = ccl.Errorf("GetAsyncError", ccl.StatusInProgress, "ncclInProgress: the communicator is being set up")

// ncclErr describes a failed call with NCCL's name and description of the
// result and, where a communicator is known, NCCL's last error message.
func (b *Backend) ncclErr(op string, rc int32, h uintptr, who string) error {
	if rc == ncclInProgress {
		return errInProgress
	}
	desc, last := "", ""
	if a := b.api; a != nil {
		desc = dl.GoString(dl.Call(a.getErrorString, uintptr(rc)))
		last = dl.GoString(dl.Call(a.getLastError, h))
	}
	msg := resultName(rc)
	if desc != "" {
		msg += ": " + desc
	}
	if last != "" {
		msg += " (last error: " + last + ")"
	}
	if who != "" {
		msg = who + ": " + msg
	}
	return ccl.Errorf(op, statusOf(rc), "%s", msg)
}
