// Package profiler records where each training step's time goes, on every
// rank at once, without slowing the run it measures.
//
// A Profiler hands out one Recorder per rank goroutine. Start and End open
// and close ranges that nest (step → microbatch → chunk → op); each range
// carries the rank, the profiler's tag and the recorder's pipeline labels
// (step, stage, VPP chunk, microbatch, phase). Host times come from the
// monotonic clock. A device range (StartDevice, StartCollective) also
// records a pooled event on its stream at Start and at End through
// runtime.Impl; nothing synchronises the stream or waits for the event on
// that path. A background collector (and Snapshot, Flush) gathers the
// completed ranges, resolves device times once their events complete and
// places them on the host clock through a calibration event.
//
// The hot path takes only the recording rank's own lock, once, and
// allocates nothing; memory is bounded per recorder and overall, and every
// range that does not fit is counted in Stats. Snapshot, Reset, Report and
// SetTag are safe while ranks record.
//
// The package reaches devices only through runtime.Impl: it has no
// knowledge of device types. Collective and point-to-point calls made
// through a ccl.ProcessGroup arrive as ranges with a Collective attached;
// their algorithm and bus bandwidth are computed from the device time.
//
// Summarize and WriteReport produce the text report: per rank and
// tag, each name's count, host and device totals and shares, and averages,
// followed by peak device memory; WriteRecords writes the per-call log.
package profiler
