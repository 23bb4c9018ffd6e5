package pprof_test

import (
	"io"
	"testing"
	"time"

	"github.com/trainscope/trainscope/exporters/pprof"
	"github.com/trainscope/trainscope/profiler"
	"github.com/trainscope/trainscope/runtime"
)

// synthetic returns records shaped like the built-in trainer's: per rank and
// step a step range holding, per chunk and microbatch, a forward and a
// backward range of layers ops each, a send with its Send inside, and an
// optimizer range; device ranges run 10% later than on the host.
func synthetic(ranks, steps int) []profiler.Record {
	const chunks, microbatches, layers = 2, 8, 4
	var recs []profiler.Record
	for rank := range ranks {
		dev := runtime.Device{Type: runtime.CPU, Index: rank}
		var id uint64
		var t time.Duration
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
							Group: "pp0", GroupSize: 2, GroupRank: int32(rank % 2), Seq: uint64(mb)}
						end(p)
						end(snd)
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

// BenchmarkWrite measures records → gzip-compressed profile, the whole of
// Write, on one goroutine; records/s is the figure the issue bounds.
func BenchmarkWrite(b *testing.B) {
	recs := synthetic(8, 20)
	b.ReportAllocs()
	b.ResetTimer()
	for b.Loop() {
		if _, err := pprof.Write(io.Discard, recs); err != nil {
			b.Fatal(err)
		}
	}
	b.ReportMetric(float64(len(recs))*float64(b.N)/b.Elapsed().Seconds(), "records/s")
}

// BenchmarkBuild measures records → *profile.Profile without encoding.
func BenchmarkBuild(b *testing.B) {
	recs := synthetic(8, 20)
	b.ReportAllocs()
	b.ResetTimer()
	for b.Loop() {
		if _, err := pprof.Build(recs); err != nil {
			b.Fatal(err)
		}
	}
	b.ReportMetric(float64(len(recs))*float64(b.N)/b.Elapsed().Seconds(), "records/s")
}

// BenchmarkBuildProfileWrite is the baseline: the same profile built as
// profile.Sample values and encoded by pprof's own profile.Write.
func BenchmarkBuildProfileWrite(b *testing.B) {
	recs := synthetic(8, 20)
	b.ReportAllocs()
	b.ResetTimer()
	for b.Loop() {
		p, err := pprof.Build(recs)
		if err != nil {
			b.Fatal(err)
		}
		if err := p.Write(io.Discard); err != nil {
			b.Fatal(err)
		}
	}
	b.ReportMetric(float64(len(recs))*float64(b.N)/b.Elapsed().Seconds(), "records/s")
}
