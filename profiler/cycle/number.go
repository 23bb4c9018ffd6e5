package cycle

import (
	"github.com/trainscope/trainscope/profiler"
)

// numbering numbers one line's operations in cycles: the operation with
// sequence number seq is in cycle first + ⌊(seq − seq0)/stride⌋, where
// stride is how far the line's sequence numbers advance a cycle.
type numbering struct {
	seq0, stride uint64
	first        int64
}

func (n numbering) number(seq uint64) int64 {
	d := int64(seq - n.seq0) // two's complement: seq before seq0 is negative
	s := int64(n.stride)
	q := d / s
	if d%s < 0 {
		q-- // floor, not truncation
	}
	return n.first + q
}

// lineOf is where a collective or point-to-point operation is numbered:
// a hash of its communicator (name and id) and, for a collective, its
// operation, name (NCCL numbers each function apart), for a send or a
// receive the pair of ranks it moves data between, sender first (a send
// and its receive share a sequence number). It is 0 where the record
// names no group. Sink.Consume computes the same inline.
func lineOf(c *profiler.Collective, name string) uint64 {
	if c.Group == "" {
		return 0
	}
	g := groupHash(c)
	if c.Peer >= 0 {
		return pairLine(g, c)
	}
	return max(hashString(g, name), 1)
}

// groupHash hashes a record's communicator: its name and id.
func groupHash(c *profiler.Collective) uint64 {
	return hashUint(hashString(fnvOffset, c.Group), c.GroupID)
}

// pairLine is a send's or receive's line: its communicator's hash g and
// the pair of ranks, sender first.
func pairLine(g uint64, c *profiler.Collective) uint64 {
	from, to := c.GroupRank, c.Peer
	if c.Op == "Recv" {
		from, to = to, from
	}
	return max(hashUint(g, uint64(uint32(from))<<32|uint64(uint32(to))), 1)
}

// numberLocked numbers the lines of a cycle of c operations just found:
// inst holds one instance of it, its operations in the order they came,
// then as much of the next as was kept. A line's stride is how far its
// first operation's sequence number moved in the next cycle; a line
// whose every operation did not move as far (or that the next cycle
// does not show) is left unnumbered. Where one of the instance's lines
// is numbered already (another rank found the cycle first, or the job's
// sequence changed), the instance takes that line's number, so that
// every rank numbers the same cycle alike; otherwise its number is how
// many strides its first line's sequence numbers had counted. Each line
// of the instance not yet numbered, or numbered with another stride, is
// numbered from it.
func (s *Sink) numberLocked(inst []op, c int) {
	if c <= 0 || len(inst) < 2*c {
		return
	}
	type line struct {
		seq0, stride uint64
		ok           bool
	}
	lines := map[uint64]*line{}
	var order []uint64
	for j, o := range inst[:c] {
		if o.line == 0 {
			continue
		}
		next := inst[j+c]
		stride := next.seq - o.seq
		l := lines[o.line]
		if l == nil {
			l = &line{seq0: o.seq, stride: stride, ok: true}
			lines[o.line] = l
			order = append(order, o.line)
		}
		if next.line != o.line || next.seq <= o.seq || stride != l.stride || o.seq-l.seq0 >= l.stride {
			l.ok = false
		}
	}
	number, known := int64(0), false
	for _, k := range order {
		if n, ok := s.lines[k]; ok && lines[k].ok {
			number, known = n.number(lines[k].seq0), true
			break
		}
	}
	for _, k := range order {
		l := lines[k]
		if !l.ok {
			continue
		}
		if !known {
			number, known = int64(l.seq0/l.stride), true
		}
		if n, ok := s.lines[k]; ok && n.stride == l.stride {
			continue
		}
		s.lines[k] = numbering{seq0: l.seq0, stride: l.stride, first: number}
	}
}

// Number returns the cycle of the job a collective or point-to-point
// record belongs to, once a cycle that holds operations of its
// communicator has been found on some rank: every rank of the
// communicator gives the same operation the same number, from the
// sequence numbers the operations share across ranks. Cycles are
// numbered in order; the number is not the step the job counts (it is
// how many cycles the communicator's sequence numbers had counted when
// the cycle was found, counted on from there). ok is false before any
// such cycle is found and for records of no group. It makes a trace of
// each cycle possible for jobs that mark no steps (the OTLP exporter's
// Config.Cycles).
func (s *Sink) Number(r *profiler.Record) (n int64, ok bool) {
	if r.Kind != profiler.KindCollective && r.Kind != profiler.KindP2P {
		return 0, false
	}
	name := r.Collective.Op
	if name == "" {
		name = r.Name
	}
	l := lineOf(&r.Collective, name)
	if l == 0 {
		return 0, false
	}
	s.mu.Lock()
	nb, ok := s.lines[l]
	s.mu.Unlock()
	if !ok {
		return 0, false
	}
	return nb.number(r.Collective.Seq), true
}
