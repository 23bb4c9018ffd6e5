package ncclplugin

import (
	"time"

	"github.com/trainscope/trainscope/ccl"
	"github.com/trainscope/trainscope/profiler"
)

// An all-to-all reaches NCCL as a group block (ncclGroupStart, a send to
// and a receive from every rank of the communicator, itself included,
// ncclGroupEnd): PyTorch's all_to_all_single and all_to_all, DeepSpeed's
// and Megatron-LM's expert dispatch are made so. Reported as its 2n
// sends and receives it would hide what the job called, and no analysis
// could match it across ranks as one collective. Where the plugin numbers
// each p2p's group block (Record.APIGroup; NCCL 2.28 and later), the
// collector gathers the p2p operations of one block over one
// communicator into a batch: one whose first 2n operations are a send to
// and a receive from each of the communicator's n ranks is delivered as
// one AllToAll record once all of them have run; any other batch (a
// pipeline's send and receive, a peer twice, a block the thread left
// before it was whole) delivers its operations as they are.

// batchKey names a batch: the communicator and the process's number of
// the group block.
type batchKey struct{ comm, group uint64 }

// batch is one group block's p2p operations over one communicator. It
// stays known (in process.batches) while its thread is still in the
// block, so that the block's later operations are told apart from a new
// block's, and after that while operations of a whole all-to-all are
// still to run.
type batch struct {
	key batchKey
	tid uint32
	n   int32
	// dirs is, per peer rank of its operations so far, 1 sent to, 2
	// received from: as large as what came, not as the communicator says.
	dirs     map[int32]uint8
	members  int  // operations in it so far
	complete bool // a send to and a receive from every rank
	broken   bool // not an all-to-all: its operations go as they are
	merged   bool // delivered as one AllToAll
	held     []batchPart
	since    time.Time // when the first operation was held
	// selves are the tasks of its operations with the process's own
	// rank, which NCCL runs as a local copy and times with no kernel
	// channel: once the rest of a whole all-to-all has run, so have they.
	selves    []uint64
	releasing bool
}

// batchPart is a delivered operation of a batch, held until the batch
// is known.
type batchPart struct {
	rec   profiler.Record
	start uint64 // its enqueue start, plugin CLOCK_MONOTONIC ns
	send  bool
}

const (
	dirSend, dirRecv = 1, 2
	// maxBatches bounds the batches a process keeps; beyond it a new
	// group block's operations go as they are.
	maxBatches = 1 << 10
	// batchWait bounds how long delivered operations wait in a batch
	// that is not yet whole.
	batchWait = 5 * time.Second
)

// noteBatchLocked puts p2p r (operation o) into its group block's batch,
// first ending the batch its thread had open before, if another.
func (c *Collector) noteBatchLocked(pr *process, r Record, o *op, out []profiler.Record) []profiler.Record {
	if r.APIGroup == 0 || r.NRanks < 2 {
		return c.endBatchLocked(pr, r.TID, out)
	}
	key := batchKey{r.Comm, r.APIGroup}
	b := pr.batches[key]
	if b == nil {
		out = c.endBatchLocked(pr, r.TID, out)
		if len(pr.batches) >= maxBatches {
			return out
		}
		b = &batch{key: key, tid: r.TID, n: r.NRanks, dirs: make(map[int32]uint8)}
		if pr.batches == nil {
			pr.batches = make(map[batchKey]*batch)
			pr.openBatch = make(map[uint32]*batch)
		}
		pr.batches[key] = b
		pr.openBatch[r.TID] = b
	}
	if b.broken || b.complete {
		// Not an all-to-all, or one already whole: this operation goes
		// as it is.
		return out
	}
	var dir uint8
	switch r.Op() {
	case ccl.OpSend:
		dir = dirSend
	case ccl.OpRecv:
		dir = dirRecv
	}
	if dir == 0 || r.Peer < 0 || r.Peer >= b.n || b.dirs[r.Peer]&dir != 0 {
		return c.breakBatchLocked(pr, b, out)
	}
	b.dirs[r.Peer] |= dir
	b.members++
	o.batch = b
	if r.Peer == r.Rank {
		b.selves = append(b.selves, r.Task)
	}
	if b.members == 2*int(b.n) {
		b.complete = true
	}
	return out
}

// endBatchLocked ends the batch thread tid has open: its group block is
// over, and a batch not whole by then is no all-to-all.
func (c *Collector) endBatchLocked(pr *process, tid uint32, out []profiler.Record) []profiler.Record {
	b := pr.openBatch[tid]
	if b == nil {
		return out
	}
	delete(pr.openBatch, tid)
	if !b.complete && !b.broken {
		return c.breakBatchLocked(pr, b, out)
	}
	if b.broken || b.merged {
		delete(pr.batches, b.key)
	}
	return out
}

// breakBatchLocked gives b up as an all-to-all: the operations it held
// are delivered as they are, and those still to come will be.
func (c *Collector) breakBatchLocked(pr *process, b *batch, out []profiler.Record) []profiler.Record {
	b.broken = true
	if pr.openBatch[b.tid] != b {
		delete(pr.batches, b.key)
	}
	for _, p := range b.held {
		out = c.emitLocked(pr, p.rec, p.start, out)
	}
	b.held = nil
	return out
}

// holdLocked takes delivered operation rec of batch b; once b is whole
// and every operation of it has run, they go as one AllToAll.
func (c *Collector) holdLocked(pr *process, b *batch, rec profiler.Record, r Record, out []profiler.Record) []profiler.Record {
	if len(b.held) == 0 {
		b.since = time.Now()
	}
	b.held = append(b.held, batchPart{rec: rec, start: r.HostStart, send: r.Op() == ccl.OpSend})
	if !b.complete {
		return out
	}
	if len(b.held) < 2*int(b.n) {
		return c.releaseSelvesLocked(pr, b, out)
	}
	b.merged = true
	if pr.openBatch[b.tid] != b {
		delete(pr.batches, b.key)
	}
	first := 0
	hostEnd := b.held[0].rec.HostEnd
	var devStart, devEnd, transferEnd time.Duration
	var bytes, count int64
	hasDevice := false
	for i, p := range b.held {
		if p.start < b.held[first].start {
			first = i
		}
		hostEnd = max(hostEnd, p.rec.HostEnd)
		if p.rec.HasDevice {
			if !hasDevice {
				devStart, devEnd = p.rec.DeviceStart, p.rec.DeviceEnd
			}
			devStart = min(devStart, p.rec.DeviceStart)
			devEnd = max(devEnd, p.rec.DeviceEnd)
			hasDevice = true
		}
		transferEnd = max(transferEnd, p.rec.Collective.TransferEnd)
		if p.send {
			bytes += p.rec.Collective.Bytes
			count += p.rec.Collective.Count
		}
	}
	f := b.held[first]
	if pr.allToAlls == nil {
		pr.allToAlls = make(map[uint64]uint64)
	}
	seq := pr.allToAlls[b.key.comm]
	pr.allToAlls[b.key.comm]++
	c.nextID++
	m := f.rec
	m.ID = c.nextID
	m.Name = ccl.OpAllToAll
	m.Kind = profiler.KindCollective
	m.HostEnd = max(hostEnd, m.HostStart)
	m.HasDevice, m.DeviceStart, m.DeviceEnd = hasDevice, devStart, devEnd
	m.Collective = profiler.Collective{
		Op: ccl.OpAllToAll, Bytes: bytes, Count: count, DType: f.rec.Collective.DType,
		Peer: -1, Root: -1, Group: f.rec.Collective.Group, GroupID: f.rec.Collective.GroupID,
		GroupSize: f.rec.Collective.GroupSize, GroupRank: f.rec.Collective.GroupRank,
		// Numbered apart from NCCL's collectives, its own AllToAll
		// included (opSeq: NCCL's number × 16 + the function's code;
		// no function has code 15).
		Seq:       seq<<4 | 15,
		BusFactor: ccl.BusFactor(ccl.OpAllToAll, int(b.n)),
		// Over a network transport, when NCCL's proxy finished moving
		// the last of its data.
		TransferEnd: transferEnd,
	}
	b.held = nil
	c.stats.AllToAlls++
	c.stats.AllToAllParts += 2 * uint64(b.n)
	return c.emitLocked(pr, m, f.start, out)
}

// releaseSelvesLocked delivers the operations of whole batch b with the
// process's own rank once every other operation of b has run: NCCL
// reports no kernel channel for them, and they ran in the same kernel.
func (c *Collector) releaseSelvesLocked(pr *process, b *batch, out []profiler.Record) []profiler.Record {
	if b.releasing {
		return out
	}
	var waiting []*op
	for _, task := range b.selves {
		if o := pr.ops[task]; o != nil && o.have && len(o.channels) == 0 {
			waiting = append(waiting, o)
		}
	}
	if len(b.held)+len(waiting) < 2*int(b.n) {
		return out
	}
	b.releasing = true
	for _, o := range waiting {
		delete(pr.ops, o.rec.Task)
		out = c.deliverLocked(pr, o, out)
	}
	return out
}

// expireBatchesLocked gives up the batches of pr whose held operations
// have waited since before cutoff, or, with a zero cutoff (the process
// has gone, or the collector closes), every batch still holding some.
func (c *Collector) expireBatchesLocked(pr *process, cutoff time.Time, out []profiler.Record) []profiler.Record {
	for _, b := range pr.batches {
		if len(b.held) > 0 && (cutoff.IsZero() || b.since.Before(cutoff.Add(-batchWait))) {
			out = c.breakBatchLocked(pr, b, out)
		}
	}
	return out
}
