package cuda

import (
	"errors"
	"testing"

	"github.com/trainscope/trainscope/runtime"
)

func TestStatusOf(t *testing.T) {
	cases := []struct {
		code int32
		want runtime.Status
	}{
		{0, runtime.StatusSuccess},
		{1, runtime.StatusInvalidArgument},    // cudaErrorInvalidValue
		{2, runtime.StatusOutOfMemory},        // cudaErrorMemoryAllocation
		{35, runtime.StatusUnavailable},       // cudaErrorInsufficientDriver
		{100, runtime.StatusUnavailable},      // cudaErrorNoDevice
		{101, runtime.StatusInvalidArgument},  // cudaErrorInvalidDevice
		{400, runtime.StatusInvalidArgument},  // cudaErrorInvalidResourceHandle
		{600, runtime.StatusNotReady},         // cudaErrorNotReady
		{700, runtime.StatusError},            // cudaErrorIllegalAddress
		{800, runtime.StatusPermissionDenied}, // cudaErrorNotPermitted
		{801, runtime.StatusNotSupported},     // cudaErrorNotSupported
		{999, runtime.StatusUnknown},          // cudaErrorUnknown
		{12345, runtime.StatusError},
	}
	for _, c := range cases {
		if got := statusOf(c.code); got != c.want {
			t.Errorf("statusOf(%d) = %v, want %v", c.code, got, c.want)
		}
	}
}

func TestNotReadyAllocatesNothing(t *testing.T) {
	m := New()
	var err error
	if n := testing.AllocsPerRun(100, func() { err = m.cudaErr("EventQuery", cudaErrorNotReady) }); n != 0 {
		t.Errorf("a NotReady result allocates %v times", n)
	}
	if !errors.Is(err, runtime.StatusNotReady) {
		t.Errorf("err %v", err)
	}
}

func TestFormatUUID(t *testing.T) {
	u := [16]byte{0x1c, 0x2f, 0x93, 0x04, 0xaa, 0x0b, 0x77, 0x10, 0xde, 0xad, 0xbe, 0xef, 0x00, 0x01, 0x02, 0x03}
	if got, want := formatUUID(u), "GPU-1c2f9304-aa0b-7710-dead-beef00010203"; got != want {
		t.Errorf("formatUUID = %s, want %s", got, want)
	}
}

func TestVersionString(t *testing.T) {
	for v, want := range map[int]string{13000: "13.0", 12040: "12.4", 12080: "12.8", 11080: "11.8", 0: "none"} {
		if got := versionString(v); got != want {
			t.Errorf("versionString(%d) = %s, want %s", v, got, want)
		}
	}
}

func TestCandidates(t *testing.T) {
	t.Setenv(EnvCudartLib, "/from/env.so")
	if got := candidates("/explicit.so", EnvCudartLib, "a", "b"); len(got) != 1 || got[0] != "/explicit.so" {
		t.Errorf("explicit: %v", got)
	}
	if got := candidates("", EnvCudartLib, "a", "b"); len(got) != 1 || got[0] != "/from/env.so" {
		t.Errorf("environment: %v", got)
	}
	t.Setenv(EnvCudartLib, "")
	if got := candidates("", EnvCudartLib, "a", "b"); len(got) != 2 {
		t.Errorf("defaults: %v", got)
	}
}
