package cpu

import (
	"os"
	"syscall"
)

// hostMemory returns the host's total and available memory in bytes:
// MemTotal and MemAvailable from /proc/meminfo, else (no /proc, or a
// kernel older than 3.14 without MemAvailable) sysinfo(2)'s total and
// free RAM, which leaves out the page cache the kernel would give back.
func hostMemory() (total, avail int64) {
	if b, err := os.ReadFile("/proc/meminfo"); err == nil {
		total, avail = parseMeminfo(b)
	}
	if total > 0 && avail > 0 {
		return total, avail
	}
	var si syscall.Sysinfo_t
	if err := syscall.Sysinfo(&si); err != nil {
		return total, avail
	}
	unit := max(int64(si.Unit), 1)
	if total == 0 {
		total = int64(si.Totalram) * unit
	}
	if avail == 0 {
		avail = int64(si.Freeram) * unit
	}
	return total, avail
}
