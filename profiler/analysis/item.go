package analysis

import (
	"time"

	"github.com/trainscope/trainscope/profiler"
)

// item is what the analysis keeps of one record: the labels, the host
// interval, the device interval as busy time classifies it, and the
// collective's identity. It holds no pointer into the record, so a sink
// may keep it after the batch is reused.
type item struct {
	id     uint64 // the record's ID (the step range's, for Rank.StepRange)
	rank   int
	step   int32
	stage  int16
	chunk  int16
	mb     int32
	phase  profiler.Phase
	kind   profiler.Kind
	isStep bool // the step range (top level, named profiler.StepName)
	// cutShort: the step range was cut short (Record.CutShort).
	cutShort bool
	device   bool // HasDevice
	work     profiler.StreamWork
	host     profiler.Interval
	coll     *collInfo // collectives and point-to-point transfers
	// transferEnd is, for a p2p over a network transport, when its
	// transfer was done (Collective.TransferEnd) where that is after the
	// device interval's end, and hasTransferEnd says so.
	transferEnd    time.Duration
	hasTransferEnd bool
}

type collInfo struct {
	op, group   string
	gid         uint64 // profiler.Collective.GroupID
	seq         uint64
	size, grank int32
	peer        int32
}

// keep reports whether r matters to the analysis, and what of it.
func keep(r *profiler.Record) (item, bool) {
	it := item{
		id: r.ID, rank: r.Rank, step: r.Step, stage: r.Stage, chunk: r.Chunk, mb: r.Microbatch,
		phase: r.Phase, kind: r.Kind, device: r.HasDevice,
		host: profiler.Interval{Start: r.HostStart, End: r.HostEnd},
	}
	it.isStep = r.Depth == 0 && r.Name == profiler.StepName
	it.cutShort = it.isStep && r.CutShort
	w, busy := r.Work()
	if busy {
		it.work = w
	}
	if r.Kind == profiler.KindCollective || r.Kind == profiler.KindP2P {
		c := r.Collective
		it.coll = &collInfo{op: c.Op, group: c.Group, gid: c.GroupID, seq: c.Seq, size: c.GroupSize, grank: c.GroupRank, peer: c.Peer}
		// 0 is no transfer end, whatever the clock: a record before the
		// epoch has negative times, and a 0 there is not later than them.
		if busy && r.HasDevice && c.TransferEnd != 0 && c.TransferEnd > r.DeviceEnd {
			it.transferEnd, it.hasTransferEnd = c.TransferEnd, true
		}
	}
	return it, it.isStep || busy || it.coll != nil
}

// pipelineCompute reports whether it is forward or backward computation:
// the work whose gaps are the pipeline bubble. A traced kernel of a
// pipeline stage that carries no phase (a wrapped job's: its stage from
// its pipeline communicator) counts too: nothing tells its forward from
// its backward or its optimizer.
func (it *item) pipelineCompute() bool {
	if it.work.Activity != profiler.ActivityCompute {
		return false
	}
	return it.phase == profiler.Forward || it.phase == profiler.Backward ||
		it.kind == profiler.KindKernel && it.phase == profiler.PhaseNone && it.stage != profiler.None
}

// span is the interval a collective occupies on its rank: the device
// interval where there is one (to the transfer's end where the transfer
// outlasted its kernel), else the host interval.
func (it *item) span() profiler.Interval {
	if it.device {
		return it.occupied()
	}
	return it.host
}

// occupied is the interval of the item's work: its device interval, to
// the transfer's end for a p2p whose data was still moving after its
// kernel stopped (NCCL's proxy sends it over a network transport). Busy
// time still uses the device interval alone: the stream is free once the
// kernel stops.
func (it *item) occupied() profiler.Interval {
	iv := it.work.Interval
	if it.hasTransferEnd && it.transferEnd > iv.End {
		iv.End = it.transferEnd
	}
	return iv
}
