package cpu

import (
	"bufio"
	"bytes"
	"strconv"

	"github.com/trainscope/trainscope/runtime"
)

// DeviceMemory reports the host's memory, which every cpu device allocates
// from (Host is set): its total and what the kernel estimates is available
// to new allocations without swapping, or 0 for either where the system
// does not say. With WithMemoryLimit each device has a cap of its own
// instead, reported as a GPU's memory would be: the cap as Total and what
// is left of it as Available.
func (m *Impl) DeviceMemory(index int) (runtime.DeviceMemory, error) {
	d, err := m.device("DeviceMemory", index)
	if err != nil {
		return runtime.DeviceMemory{}, err
	}
	if lim := m.cfg.memLimit; lim > 0 {
		return runtime.DeviceMemory{Total: lim, Available: max(0, lim-d.inUse.Load()), AvailableKnown: true}, nil
	}
	total, avail := hostMemory()
	return runtime.DeviceMemory{Total: total, Available: avail, Host: true}, nil
}

// parseMeminfo reads MemTotal and MemAvailable, in bytes, from the text of
// Linux's /proc/meminfo; a field it does not find is 0.
func parseMeminfo(b []byte) (total, avail int64) {
	sc := bufio.NewScanner(bytes.NewReader(b))
	for sc.Scan() {
		// "MemAvailable:   23517140 kB"
		f := bytes.Fields(sc.Bytes())
		if len(f) != 3 || string(f[2]) != "kB" {
			continue
		}
		v, err := strconv.ParseInt(string(f[1]), 10, 64)
		if err != nil || v < 0 {
			continue
		}
		switch string(f[0]) {
		case "MemTotal:":
			total = v << 10
		case "MemAvailable:":
			avail = v << 10
		}
	}
	return total, avail
}
