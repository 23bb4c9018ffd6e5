package nccl

import (
	"testing"
	"unsafe"

	"github.com/trainscope/trainscope/ccl"
)

func TestStatusOf(t *testing.T) {
	for rc, want := range map[int32]ccl.Status{
		ncclSuccess: ccl.StatusSuccess, ncclUnhandledCudaError: ccl.StatusError, ncclSystemError: ccl.StatusError,
		ncclInternalError: ccl.StatusInternal, ncclInvalidArgument: ccl.StatusInvalidArgument,
		ncclInvalidUsage: ccl.StatusInvalidArgument, ncclRemoteError: ccl.StatusError,
		ncclInProgress: ccl.StatusInProgress, ncclTimeout: ccl.StatusTimeout, 42: ccl.StatusUnknown,
	} {
		if got := statusOf(rc); got != want {
			t.Errorf("statusOf(%s) = %v, want %v", resultName(rc), got, want)
		}
	}
}

func TestVersionString(t *testing.T) {
	for v, want := range map[int]string{22803: "2.28.3", 21400: "2.14.0", 2708: "2.7.8"} {
		if got := VersionString(v); got != want {
			t.Errorf("VersionString(%d) = %s, want %s", v, got, want)
		}
	}
}

// The config struct must match ncclConfig_v21700's layout.
func TestConfigLayout(t *testing.T) {
	var c cConfig
	if unsafe.Sizeof(c) != 40 || unsafe.Offsetof(c.Blocking) != 16 || unsafe.Offsetof(c.NetName) != 32 {
		t.Fatalf("size %d, blocking at %d, netName at %d", unsafe.Sizeof(c), unsafe.Offsetof(c.Blocking), unsafe.Offsetof(c.NetName))
	}
	if n := newConfig(false); n.Size != 40 || n.Blocking != 0 || n.Magic != 0xcafebeef || n.MinCTAs != -1<<31 {
		t.Fatalf("config %+v", n)
	}
	if newConfig(true).Blocking != 1 {
		t.Fatal("blocking config is not blocking")
	}
	if unsafe.Sizeof(cUniqueID{}) != 128 {
		t.Fatal("ncclUniqueId is not 128 bytes")
	}
}
