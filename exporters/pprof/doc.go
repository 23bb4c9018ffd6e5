// Package pprof turns profiler records into a pprof profile
// (profile.proto, gzip-compressed), so `go tool pprof` shows where a
// training step's time goes as a flame graph, a top list or a graph.
//
// Each record becomes one sample. Its stack is the record's range nesting
// path, innermost first (op ← forward ← step), with one Function and one
// Location per distinct range name. Its values are, in this order:
//
//	host_time/nanoseconds    the range's host wall time minus its child ranges' (self time)
//	device_time/nanoseconds  the range's device time minus its nearest device-timed descendants' (self time)
//	ranges/count             1
//
// host_time is the default sample type, except in an Aggregate given
// analysed steps (AddStep), as profile-run's profile.pb.gz is: it adds a
// fourth, step_time/nanoseconds (each rank's step wall time split by what
// used it, idle time included), and makes that the default. Because the values are self
// times, pprof's cum for a range name adds back what its descendants hold
// and equals the report's total for that name: cum of host_time is
// profiler.Summarize's HostTotal summed over ranks and steps, cum of
// device_time its DeviceTotal for device-timed names, and flat of ranges
// its Count. Write lists these agreements and their conditions exactly.
//
// Samples carry the numeric labels rank, stage, chunk, microbatch and step and the
// string labels phase and tag where the record has them, so
// `-tagfocus=rank=1` or `-tagfocus=phase=backward` narrows the view.
//
// Aggregate is the same profile kept as records arrive, as a
// profiler.Sink, in memory that does not grow with the run: samples that
// differ only in their step are summed and carry no step label, and per
// rank only the records of the latest few top-level ranges are kept, to
// place records whose ancestors arrive after them. Register one before a
// run and write it at the end; unlike Write over a Snapshot, it covers
// records beyond the profiler's record bound.
//
// Write encodes the profile itself, straight from the records, several
// times faster than building every sample as a profile.Sample and
// encoding it with profile.Write (which Build allows, for callers that
// want the profile as a value); both give the same profile.
package pprof
