package cpu

import (
	"testing"

	"github.com/trainscope/trainscope/runtime"
)

func TestParseMeminfo(t *testing.T) {
	const meminfo = `MemTotal:       24567892 kB
MemFree:        22011120 kB
MemAvailable:   23517140 kB
Buffers:          102400 kB
HugePages_Total:       0
Hugepagesize:       2048 kB
`
	total, avail := parseMeminfo([]byte(meminfo))
	if total != 24567892*1024 || avail != 23517140*1024 {
		t.Errorf("parseMeminfo = %d, %d; want %d, %d", total, avail, 24567892*1024, 23517140*1024)
	}
	// A kernel without MemAvailable, and text that is not meminfo.
	if total, avail := parseMeminfo([]byte("MemTotal: 1000 kB\nMemFree: 10 kB\n")); total != 1024000 || avail != 0 {
		t.Errorf("without MemAvailable: %d, %d", total, avail)
	}
	if total, avail := parseMeminfo([]byte("MemTotal: lots\nnonsense\n")); total != 0 || avail != 0 {
		t.Errorf("garbage: %d, %d", total, avail)
	}
}

// With a per-device cap, a device reports the cap and what is left of it.
func TestDeviceMemoryWithLimit(t *testing.T) {
	m := New(WithDevices(2), WithMemoryLimit(1000))
	h, err := m.Malloc(1, 300)
	if err != nil {
		t.Fatal(err)
	}
	defer m.Free(h)
	for i, want := range []runtime.DeviceMemory{{Total: 1000, Available: 1000, AvailableKnown: true}, {Total: 1000, Available: 700, AvailableKnown: true}} {
		if got, err := m.DeviceMemory(i); err != nil || got != want {
			t.Errorf("cpu:%d: %+v, %v; want %+v", i, got, err, want)
		}
	}
	// The cap taken whole: none left, which is not unknown.
	h2, err := m.Malloc(1, 700)
	if err != nil {
		t.Fatal(err)
	}
	defer m.Free(h2)
	if got, err := m.DeviceMemory(1); err != nil || got != (runtime.DeviceMemory{Total: 1000, AvailableKnown: true}) {
		t.Errorf("cpu:1 full: %+v, %v; want nothing available, known", got, err)
	}
}
