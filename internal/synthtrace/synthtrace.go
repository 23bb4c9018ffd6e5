package synthtrace

import (
	"strconv"
	"time"

	"github.com/trainscope/trainscope/profiler"
	"github.com/trainscope/trainscope/runtime"
)

// Shape is the size of a synthetic trace: per rank and step a step range
// holding, per chunk and microbatch, a forward and a backward range of
// Layers ops of each kind, a send with its Send inside and a Recv from the
// peer stage, and an optimizer range.
type Shape struct {
	Ranks, Steps                 int
	Chunks, Microbatches, Layers int
}

// TrainerShape is the shape Trainer uses: 2 chunks, 8 microbatches, 4
// layers (386 records per rank and step).
func TrainerShape(ranks, steps int) Shape {
	return Shape{Ranks: ranks, Steps: steps, Chunks: 2, Microbatches: 8, Layers: 4}
}

// PerStep is the number of records one rank makes per step.
func (s Shape) PerStep() int {
	return 2 + s.Chunks*s.Microbatches*2*(2*s.Layers+4)
}

// Trainer returns records shaped like the built-in trainer's, in
// TrainerShape(ranks, steps), rank after rank.
func Trainer(ranks, steps int) []profiler.Record {
	return TrainerShape(ranks, steps).Records()
}

// Records returns the whole trace: each rank's steps in turn, each range
// where it starts (a parent before its children).
func (s Shape) Records() []profiler.Record {
	recs := make([]profiler.Record, 0, s.Ranks*s.Steps*s.PerStep())
	g := NewGenerator(s)
	for rank := range s.Ranks {
		for range s.Steps {
			recs = g.rankStep(recs, rank)
		}
	}
	return recs
}

// Generator makes a trace one step at a time, for traces too long to hold:
// the records of step n are those Records holds for step n.
type Generator struct {
	shape Shape
	ranks []rankState
}

type rankState struct {
	id, seq uint64
	t       time.Duration
	step    int
}

// NewGenerator returns a generator at step 0 of s (s.Steps is ignored).
func NewGenerator(s Shape) *Generator {
	return &Generator{shape: s, ranks: make([]rankState, s.Ranks)}
}

// Step appends the next step's records of every rank to dst, rank after
// rank, and returns it.
func (g *Generator) Step(dst []profiler.Record) []profiler.Record {
	for rank := range g.shape.Ranks {
		dst = g.rankStep(dst, rank)
	}
	return dst
}

// rankStep appends one step of one rank. Device ranges run 10% of their
// length later than on the host, so some overlap their neighbours there;
// a device range inside a forward or backward range is DeviceNested, as
// the recorder marks it.
func (g *Generator) rankStep(recs []profiler.Record, rank int) []profiler.Record {
	st := &g.ranks[rank]
	step := st.step
	st.step++
	dev := runtime.Device{Type: runtime.CPU, Index: rank}
	group := "pp" + strconv.Itoa(rank/2)
	open := func(parent uint64, depth int, name string, kind profiler.Kind, l profiler.Labels) int {
		st.id++
		recs = append(recs, profiler.Record{ID: st.id, Parent: parent, Depth: depth, Name: name, Kind: kind,
			Rank: rank, Device: dev, Labels: l, HostStart: st.t, DeviceNested: kind != profiler.KindHost && depth > 1})
		st.t += time.Microsecond
		return len(recs) - 1
	}
	end := func(i int) {
		r := &recs[i]
		st.t += time.Microsecond
		r.HostEnd = st.t
		if r.Kind != profiler.KindHost {
			r.HasDevice = true
			r.DeviceStart = r.HostStart + (r.HostEnd-r.HostStart)/10
			r.DeviceEnd = r.HostEnd + (r.HostEnd-r.HostStart)/10
		}
	}
	l := profiler.NoLabels
	l.Step, l.Stage = int32(step), int16(rank%2)
	s := open(0, 0, "step", profiler.KindHost, l)
	sid := recs[s].ID
	for c := range g.shape.Chunks {
		for mb := range g.shape.Microbatches {
			for _, ph := range []profiler.Phase{profiler.Forward, profiler.Backward} {
				l.Chunk, l.Microbatch, l.Phase = int16(c), int32(mb), ph
				name := "forward"
				if ph == profiler.Backward {
					name = "backward"
				}
				f := open(sid, 1, name, profiler.KindDevice, l)
				fid := recs[f].ID
				for range g.shape.Layers {
					end(open(fid, 2, "linear", profiler.KindDevice, l))
					end(open(fid, 2, "tanh", profiler.KindDevice, l))
				}
				snd := open(fid, 2, "send", profiler.KindDevice, l)
				p := open(recs[snd].ID, 3, "Send", profiler.KindP2P, l)
				recs[p].Collective = profiler.Collective{Op: "Send", Bytes: 8192, Peer: int32(1 - rank%2), Root: -1,
					Group: group, GroupSize: 2, GroupRank: int32(rank % 2), Seq: st.seq}
				end(p)
				end(snd)
				rcv := open(fid, 2, "Recv", profiler.KindP2P, l)
				recs[rcv].Collective = profiler.Collective{Op: "Recv", Bytes: 8192, Peer: int32(1 - rank%2), Root: -1,
					Group: group, GroupSize: 2, GroupRank: int32(rank % 2), Seq: st.seq + 1}
				end(rcv)
				st.seq += 2
				end(f)
			}
		}
	}
	l.Chunk, l.Microbatch, l.Phase = profiler.None, profiler.None, profiler.Optimizer
	end(open(sid, 1, "optimizer", profiler.KindDevice, l))
	end(s)
	return recs
}
