package cpu

import (
	"errors"
	"fmt"
	"strings"
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

// Without a memory limit, an allocation larger than the host's available
// memory is refused with StatusOutOfMemory naming both, instead of a Go
// fatal out-of-memory error (1 TiB used to crash the process).
func TestMallocBeyondHostMemory(t *testing.T) {
	var si syscall.Sysinfo_t
	if err := syscall.Sysinfo(&si); err != nil {
		t.Skipf("sysinfo: %v", err)
	}
	size := 2 * int64(si.Totalram) * int64(si.Unit) // more than the host has, below the 64 TiB bound
	m := New(WithDevices(1))
	for _, op := range []string{"Malloc", "MallocAsync"} {
		var err error
		if op == "Malloc" {
			_, err = m.Malloc(0, size)
		} else {
			s, serr := m.StreamCreate(0, 0)
			if serr != nil {
				t.Fatal(serr)
			}
			_, err = m.MallocAsync(size, s)
			_ = m.StreamDestroy(s)
		}
		if !errors.Is(err, runtime.StatusOutOfMemory) || !strings.Contains(err.Error(), fmt.Sprintf("%d bytes requested on cpu:0, but the host has", size)) {
			t.Errorf("%s(%d): %v, want StatusOutOfMemory naming the size and what the host has", op, size, err)
		}
	}
	if st, _ := m.MemoryStats(0); st.InUse != 0 {
		t.Errorf("%d bytes in use after refused allocations", st.InUse)
	}
}

// A memory limit above what the host has (a GPU's 141 GB modelled on a
// smaller machine) does not let an allocation the host cannot give through
// to Go, which ended the process with a fatal out-of-memory error: it is
// refused with StatusOutOfMemory as it is without a limit, and the device
// keeps nothing of it.
func TestMallocBeyondHostMemoryUnderLimit(t *testing.T) {
	var si syscall.Sysinfo_t
	if err := syscall.Sysinfo(&si); err != nil {
		t.Skipf("sysinfo: %v", err)
	}
	ram := int64(si.Totalram) * int64(si.Unit)
	size := 2 * ram // within the cap, beyond the host
	m := New(WithDevices(1), WithMemoryLimit(4*ram))
	s, err := m.StreamCreate(0, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer m.StreamDestroy(s)
	for _, op := range []string{"Malloc", "MallocAsync"} {
		var err error
		if op == "Malloc" {
			_, err = m.Malloc(0, size)
		} else {
			_, err = m.MallocAsync(size, s)
		}
		if !errors.Is(err, runtime.StatusOutOfMemory) || !strings.Contains(err.Error(), fmt.Sprintf("%d bytes requested on cpu:0, but the host has", size)) {
			t.Errorf("%s(%d) under a %d-byte cap: %v, want StatusOutOfMemory naming the size and what the host has", op, size, 4*ram, err)
		}
	}
	if st, _ := m.MemoryStats(0); st != (runtime.MemoryStats{Total: 4 * ram, Free: 4 * ram}) {
		t.Errorf("stats after refused allocations: %+v, want nothing in use of the %d-byte cap", st, 4*ram)
	}
}
