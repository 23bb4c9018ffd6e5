package profiler

import (
	"time"

	"github.com/trainscope/trainscope/runtime"
)

// Record is one completed range.
//
// Times are durations since the Profiler's epoch on the host's monotonic
// clock. Device times are placed on the same clock through a calibration
// event recorded when the recorder was made, so a device range can be drawn
// beside the host range that launched it.
type Record struct {
	// ID is unique within the rank: its first recorder numbers from 1,
	// its k-th from k·2^44 + 1 (records made elsewhere and ingested are
	// unique within their rank and source).
	ID     uint64
	Parent uint64 // ID of the enclosing range, 0 for a top-level range
	Depth  int    // nesting depth, 0 for top level
	Name   string
	Kind   Kind
	Rank   int
	Device runtime.Device
	// Stream is the ID (runtime.Stream.ID) of the stream a device range
	// was timed on; 0 for host ranges.
	Stream uint64
	Tag    string // the profiler's tag when the range started (SetTag); the report groups by it
	Labels

	HostStart, HostEnd time.Duration
	// CutShort reports that the range was ended by Recorder.EndCutShort:
	// its work failed or was interrupted before it finished. A cut-short
	// step range stays in traces, spans and profiles but not in step
	// statistics, busy time or the pipeline analysis, which count it.
	CutShort bool

	// HasDevice reports whether DeviceStart and DeviceEnd hold a measured
	// device interval. A device range whose events could not be resolved
	// (a backend error) keeps HasDevice false and counts in Stats.
	HasDevice bool
	// DeviceUnfinished reports that this device range's device work had
	// not finished when the profiler gave up waiting for it
	// (Profiler.AbandonPending, Close): a kernel that hangs, work a
	// stopped run left queued. The record has its host times only
	// (HasDevice false), no bandwidths, and counts in Stats.Abandoned.
	DeviceUnfinished bool
	// DeviceNested reports that a range of the same recorder with a
	// device time of its own (its start event recorded) enclosed this
	// device range when it started, so this range's device time is
	// already inside that one's: the report's outermost device time
	// leaves it out. The recorder knows this when the range starts, so a
	// consumer needs no ancestor, which may arrive later or not at all
	// (Summarize and Summary rely on it; records made by hand must set
	// it where a device-timed ancestor encloses them).
	DeviceNested bool
	// OuterInGroup reports that none of the ranges of the same recorder
	// enclosing this one is in its report group (TagOf): the tag, or an
	// untagged range's step, changed after they started — SetTag inside
	// a step range. Such a range counts in its group's top-level host
	// time as a range at depth 0 does, so the group's shares add up
	// whatever encloses it. Set by the recorder when the range starts.
	OuterInGroup bool
	// DeviceOuterInGroup reports, of a DeviceNested range, that none of
	// the device-timed ranges enclosing it is in its report group, so its
	// device time counts in the group's outermost device time.
	DeviceOuterInGroup bool

	DeviceStart, DeviceEnd time.Duration

	// PeakMemory is the device's memory high-water mark in bytes when a
	// device range ended; 0 for host ranges.
	PeakMemory int64

	// Collective is set for KindCollective and KindP2P ranges, with the
	// bandwidths computed from the device time (host time when there is
	// none), in bytes per second.
	Collective   Collective
	AlgBandwidth float64
	BusBandwidth float64
}

// HostDuration is the range's host wall time.
func (r *Record) HostDuration() time.Duration { return r.HostEnd - r.HostStart }

// DeviceDuration is the range's device time, or 0 without one.
func (r *Record) DeviceDuration() time.Duration {
	if !r.HasDevice {
		return 0
	}
	return r.DeviceEnd - r.DeviceStart
}
