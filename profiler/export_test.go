package profiler

import "time"

// SetCallLogMaxOpen sets how many files c keeps open (MaxOpenCallLogs
// by default), for tests of closing and reopening them.
func SetCallLogMaxOpen(c *CallLog, n int) { c.maxOpen = n }

// SetCallLogBuffer sets the size of each rank's buffer of lines
// (CallLogBuffer by default) for ranks created after it: small, every
// line goes to the file as it comes.
func SetCallLogBuffer(c *CallLog, n int) { c.bufSize = n }

// CallLogOpen is how many of c's files are open.
func CallLogOpen(c *CallLog) int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return len(c.open)
}

// HoldLock takes the lock the collector holds while it delivers to the
// sinks, as a collector pass under way does, and returns its release.
func HoldLock(p *Profiler) (release func()) {
	p.mu.Lock()
	return p.mu.Unlock
}

// SetSetupLockTimeout sets how long NewRecorder and AddSink wait for the
// collector's lock, and returns the restore.
func SetSetupLockTimeout(d time.Duration) (restore func()) {
	old := setupLockTimeout
	setupLockTimeout = d
	return func() { setupLockTimeout = old }
}

// Now is p's clock, the one record times are read from: a test brackets
// a range's host times with it.
func Now(p *Profiler) time.Duration { return p.now() }
