package cpu

import (
	"errors"
	"syscall"
	"testing"

	"github.com/trainscope/trainscope/runtime"
)

// Every device reports the host's memory; MemTotal agrees with sysinfo(2),
// the kernel's other account of the same RAM.
func TestDeviceMemoryIsTheHosts(t *testing.T) {
	m := New(WithDevices(3))
	var si syscall.Sysinfo_t
	if err := syscall.Sysinfo(&si); err != nil {
		t.Skipf("sysinfo: %v", err)
	}
	ram := int64(si.Totalram) * int64(si.Unit)
	for i := range 3 {
		mem, err := m.DeviceMemory(i)
		if err != nil {
			t.Fatal(err)
		}
		if !mem.Host || mem.Total != ram || mem.Available <= 0 || mem.Available > mem.Total {
			t.Errorf("cpu:%d: %+v, want the host's %d bytes, some available", i, mem, ram)
		}
	}
	if _, err := m.DeviceMemory(3); !errors.Is(err, runtime.StatusInvalidArgument) {
		t.Errorf("DeviceMemory(3) of 3 devices: %v", err)
	}
}
