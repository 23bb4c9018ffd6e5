package synthtrace

import (
	"strconv"
	"time"

	"github.com/trainscope/trainscope/profiler"
	"github.com/trainscope/trainscope/runtime"
)

// Trainer returns records shaped like the built-in trainer's: per rank and
// step a step range holding, per chunk and microbatch, a forward and a
// backward range of layers ops each, a send with its Send inside and a
// Recv from the peer stage, and an optimizer range; device ranges run 10%
// of their length later than on the host, so some overlap their
// neighbours there.
func Trainer(ranks, steps int) []profiler.Record {
	const chunks, microbatches, layers = 2, 8, 4
	var recs []profiler.Record
	for rank := range ranks {
		dev := runtime.Device{Type: runtime.CPU, Index: rank}
		var id, seq uint64
		var t time.Duration
		group := "pp" + strconv.Itoa(rank/2)
		open := func(parent uint64, depth int, name string, kind profiler.Kind, l profiler.Labels) int {
			id++
			recs = append(recs, profiler.Record{ID: id, Parent: parent, Depth: depth, Name: name, Kind: kind,
				Rank: rank, Device: dev, Labels: l, HostStart: t})
			t += time.Microsecond
			return len(recs) - 1
		}
		end := func(i int) {
			r := &recs[i]
			t += time.Microsecond
			r.HostEnd = t
			if r.Kind != profiler.KindHost {
				r.HasDevice = true
				r.DeviceStart = r.HostStart + (r.HostEnd-r.HostStart)/10
				r.DeviceEnd = r.HostEnd + (r.HostEnd-r.HostStart)/10
			}
		}
		for step := range steps {
			l := profiler.NoLabels
			l.Step, l.Stage = int32(step), int16(rank%2)
			s := open(0, 0, "step", profiler.KindHost, l)
			sid := recs[s].ID
			for c := range chunks {
				for mb := range microbatches {
					for _, ph := range []profiler.Phase{profiler.Forward, profiler.Backward} {
						l.Chunk, l.Microbatch, l.Phase = int16(c), int32(mb), ph
						name := "forward"
						if ph == profiler.Backward {
							name = "backward"
						}
						f := open(sid, 1, name, profiler.KindDevice, l)
						fid := recs[f].ID
						for range layers {
							end(open(fid, 2, "linear", profiler.KindDevice, l))
							end(open(fid, 2, "tanh", profiler.KindDevice, l))
						}
						snd := open(fid, 2, "send", profiler.KindDevice, l)
						p := open(recs[snd].ID, 3, "Send", profiler.KindP2P, l)
						recs[p].Collective = profiler.Collective{Op: "Send", Bytes: 8192, Peer: int32(1 - rank%2), Root: -1,
							Group: group, GroupSize: 2, GroupRank: int32(rank % 2), Seq: seq}
						end(p)
						end(snd)
						rcv := open(fid, 2, "Recv", profiler.KindP2P, l)
						recs[rcv].Collective = profiler.Collective{Op: "Recv", Bytes: 8192, Peer: int32(1 - rank%2), Root: -1,
							Group: group, GroupSize: 2, GroupRank: int32(rank % 2), Seq: seq + 1}
						end(rcv)
						seq += 2
						end(f)
					}
				}
			}
			l.Chunk, l.Microbatch, l.Phase = profiler.None, profiler.None, profiler.Optimizer
			end(open(sid, 1, "optimizer", profiler.KindDevice, l))
			end(s)
		}
	}
	return recs
}
