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
// places them on the host clock through a calibration event. A device
// range whose device work never finishes (a kernel that hangs) stays
// pending until AbandonPending or Close hands it to the sinks with its
// host times only, marked Record.DeviceUnfinished and counted in
// Stats.Abandoned.
//
// The hot path takes no lock (a recorder's own mutex only when its private
// cache of timing events runs out) and allocates nothing; memory is bounded per recorder and overall, and every
// range that does not fit is counted in Stats. Snapshot, Reset, Report and
// SetTag are safe while ranks record.
//
// A nil *Recorder and a nil *Profiler are profiling switched off: their
// methods do nothing (NewRecorder returns a nil *Recorder). After Close,
// NewRecorder, Calibrate and Flush return ErrClosed; recorders still
// accept ranges, which only Snapshot and Reset gather now (device ranges
// without device times; once a recorder's buffer is full the rest count
// as dropped).
//
// The package reaches devices only through runtime.Impl: it has no
// knowledge of device types. Collective and point-to-point calls made
// through a ccl.ProcessGroup arrive as ranges with a Collective attached;
// their algorithm and bus bandwidth are computed from the device time.
//
// Summarize and WriteReport produce the text report: per rank and
// tag, each name's count, host and device totals and shares, and averages,
// followed by peak device memory; WriteRecords writes the per-call log.
// StepBreakdown and WriteStepBreakdown account each rank's steps as busy
// and idle time.
//
// The records a Profiler keeps are bounded (WithMaxRecords), so those
// computed from a Snapshot cover only the first part of a long run.
// Summary and StepSummary compute the same online: they are Sinks, see
// every record of the run, and keep only what their results need —
// Summary one entry per rank, tag and range name; StepSummary per rank a
// few sums and a quantile sketch of at most 2048 bins, plus the records of
// the steps not yet accounted. Their memory does not grow with the number
// of records or steps (with Summary's default grouping by step, the
// entries grow with the steps; WithSummaryTag gives one table per rank).
// Record.DeviceNested, OuterInGroup and DeviceOuterInGroup, set by the
// recorder when a range starts, let the report's top-level host time and
// outermost device time of each group be computed without the ancestors,
// which arrive later.
package profiler
