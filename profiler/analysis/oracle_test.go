package analysis

import (
	"context"
	"fmt"
	"math"
	"math/rand/v2"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/trainscope/trainscope/internal/synthtrace"
	"github.com/trainscope/trainscope/internal/trainrun"
	"github.com/trainscope/trainscope/profiler"
)

// sameSteps reports whether two analyses are equal in every figure, the
// ideal bubble fraction NaN in both counting as equal; else it says where
// they first differ.
func sameSteps(got, want []Step) (string, bool) {
	if len(got) != len(want) {
		return fmt.Sprintf("%d steps, the reference %d", len(got), len(want)), false
	}
	for i := range got {
		g, w := got[i], want[i]
		if math.IsNaN(g.Pipeline.Ideal) && math.IsNaN(w.Pipeline.Ideal) {
			g.Pipeline.Ideal, w.Pipeline.Ideal = 0, 0
		}
		if reflect.DeepEqual(g, w) {
			continue
		}
		where := "elsewhere"
		switch {
		case !reflect.DeepEqual(g.Critical, w.Critical):
			where = fmt.Sprintf("critical path\n got %+v\nwant %+v", g.Critical, w.Critical)
		case g.Straggler != w.Straggler:
			where = fmt.Sprintf("straggler %d, want %d", g.Straggler, w.Straggler)
		case len(g.Ranks) == len(w.Ranks):
			for r := range g.Ranks {
				if !reflect.DeepEqual(g.Ranks[r], w.Ranks[r]) {
					where = fmt.Sprintf("rank %d\n got %+v\nwant %+v", g.Ranks[r].Rank, g.Ranks[r], w.Ranks[r])
					break
				}
			}
		}
		return fmt.Sprintf("step %d: %s", g.Step, where), false
	}
	return "", true
}

// againstReference analyses recs with opts and requires exactly what the
// reference implementation (reference_test.go) gives.
func againstReference(t *testing.T, name string, recs []profiler.Record, opts ...Option) {
	t.Helper()
	got, want := Analyze(recs, opts...), refAnalyze(recs, opts...)
	if diff, ok := sameSteps(got, want); !ok {
		t.Fatalf("%s (%d records): the analysis differs from the reference: %s", name, len(recs), diff)
	}
}

// optionSets are the options every input is analysed under.
var optionSets = [][]Option{nil, {WithClockAlignment()}, {WithSchedule(2, 4)}}

// TestAgainstReference runs the analysis over many inputs — the other
// tests' constructed steps, the fuzz corpus, trainer-shaped and real
// trainer records, and random ones, tidy and messy — and requires every
// figure of every step to be exactly the reference implementation's: the
// analysis as it was before its per-step passes were made near-linear.
func TestAgainstReference(t *testing.T) {
	cases := 300
	if testing.Short() {
		cases = 60
	}
	t.Run("constructed", func(t *testing.T) {
		var b build
		for s := range 4 {
			twoRanks(s, &b)
		}
		for _, o := range optionSets {
			againstReference(t, "twoRanks", b.recs, o...)
		}
	})
	t.Run("fuzz corpus", func(t *testing.T) {
		files, _ := filepath.Glob(filepath.Join("testdata", "fuzz", "*", "*"))
		for _, f := range files {
			data, err := os.ReadFile(f)
			if err != nil {
				t.Fatal(err)
			}
			for line := range strings.Lines(string(data)) {
				lit, ok := strings.CutPrefix(strings.TrimSpace(line), "[]byte(")
				if !ok {
					continue
				}
				s, err := strconv.Unquote(strings.TrimSuffix(lit, ")"))
				if err != nil {
					t.Fatalf("%s: %v", f, err)
				}
				for _, o := range optionSets {
					againstReference(t, f, decodeRecords([]byte(s)), o...)
				}
			}
		}
	})
	t.Run("synthtrace", func(t *testing.T) {
		recs := synthtrace.Trainer(4, 3)
		againstReference(t, "Trainer(4, 3)", recs)
		againstReference(t, "Trainer(4, 3) in end order", synthtrace.EndOrder(recs))
		rng := rand.New(rand.NewPCG(7, 7))
		for i := range 10 {
			againstReference(t, fmt.Sprint("Trainer(4, 3) with records left out ", i), dropSome(rng, recs, 0.05))
		}
	})
	t.Run("trainer", func(t *testing.T) {
		for _, l := range trainrun.Layouts() {
			ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
			tape, _, err := trainrun.Run(ctx, l)
			cancel()
			if err != nil {
				t.Fatal(err)
			}
			for _, o := range optionSets {
				againstReference(t, l.Name, tape.Records(), o...)
			}
		}
	})
	t.Run("random bytes", func(t *testing.T) {
		rng := rand.New(rand.NewPCG(1, 2))
		for i := range 10 * cases {
			data := make([]byte, 16*rng.IntN(120))
			for j := range data {
				data[j] = byte(rng.UintN(256))
			}
			againstReference(t, fmt.Sprint("random bytes ", i), decodeRecords(data), optionSets[i%len(optionSets)]...)
		}
	})
	t.Run("synthetic", func(t *testing.T) {
		rng := rand.New(rand.NewPCG(3, 4))
		for i := range cases {
			s := randomShape(rng)
			recs := s.records(rng, 0)
			recs = append(recs, s.records(rng, 1)...)
			name := fmt.Sprintf("case %d: %+v", i, s)
			againstReference(t, name, recs, optionSets[i%len(optionSets)]...)
			againstReference(t, name+", messed up", mess(rng, recs), optionSets[(i+1)%len(optionSets)]...)
		}
	})
}

// FuzzAgainstReference: the analysis of records made from arbitrary
// bytes is exactly the reference implementation's.
func FuzzAgainstReference(f *testing.F) {
	var b build
	twoRanks(0, &b)
	f.Add(encodeRecords(b.recs))
	f.Fuzz(func(t *testing.T, data []byte) {
		recs := decodeRecords(data)
		for _, o := range optionSets {
			againstReference(t, "fuzz", recs, o...)
		}
	})
}

// randomShape is a small synthShape with times on a grid of 1 ns to 1 µs,
// so that ties and distances under criticalTolerance are common.
func randomShape(rng *rand.Rand) synthShape {
	unit := []time.Duration{time.Nanosecond, 100 * time.Nanosecond, 250 * time.Nanosecond, time.Microsecond}[rng.IntN(4)]
	d := func(most time.Duration) time.Duration { return time.Duration(rng.Int64N(int64(most) + 1)) }
	return synthShape{
		stages: 1 + rng.IntN(3), tp: 1 + rng.IntN(3),
		chunks: 1 + rng.IntN(3), mbs: 1 + rng.IntN(3),
		layers: 1 + rng.IntN(3), kernels: 1 + rng.IntN(2),
		world:  rng.IntN(2) == 0,
		kernel: d(4 * time.Microsecond), jitter: d(3 * time.Microsecond), gap: d(2 * time.Microsecond),
		xfer: d(2 * time.Microsecond), unit: unit, asyncSend: rng.IntN(2) == 0, waits: rng.IntN(2) == 0,
	}
}

// dropSome leaves out each record with probability p.
func dropSome(rng *rand.Rand, recs []profiler.Record, p float64) []profiler.Record {
	var out []profiler.Record
	for _, r := range recs {
		if rng.Float64() >= p {
			out = append(out, r)
		}
	}
	return out
}

// mess makes a tidy trace untidy the ways real ones are: records left out
// and repeated, device times nudged by up to a couple of microseconds
// (overlaps, ties, inverted and empty intervals), records moved to
// other streams, chunk labels taken away or made huge, a rank's clock
// shifted, and the records shuffled.
func mess(rng *rand.Rand, recs []profiler.Record) []profiler.Record {
	out := dropSome(rng, recs, 0.03)
	for range out {
		if rng.IntN(50) == 0 {
			out = append(out, out[rng.IntN(len(out))])
		}
	}
	nudge := func() time.Duration { return time.Duration(rng.Int64N(4001) - 2000) }
	shift := map[int]time.Duration{}
	for i := range out {
		r := &out[i]
		if _, ok := shift[r.Rank]; !ok {
			shift[r.Rank] = time.Duration(rng.Int64N(3)) * 50 * time.Microsecond
		}
		switch rng.IntN(12) {
		case 0:
			r.DeviceStart += nudge()
		case 1:
			r.DeviceEnd += nudge()
		case 2:
			r.DeviceEnd = r.DeviceStart
		case 3:
			r.Stream = uint64(rng.IntN(4))
		case 4:
			r.Chunk = profiler.None
		case 5:
			if rng.IntN(10) == 0 {
				r.Chunk = MaxChunkLabel + 1
			}
		case 6:
			if r.Kind == profiler.KindDevice && rng.IntN(3) == 0 {
				r.Phase = profiler.Comm // a wait
			}
		}
		r.HostStart += shift[r.Rank]
		r.HostEnd += shift[r.Rank]
		r.DeviceStart += shift[r.Rank]
		r.DeviceEnd += shift[r.Rank]
	}
	rng.Shuffle(len(out), func(i, j int) { out[i], out[j] = out[j], out[i] })
	return slices.Clip(out)
}

// TestChunkSweep asks a sweep the chunk running at instants worked out by
// hand: of the actions running then, the lowest chunk, wherever it is in
// the list; none at an instant where every action has ended or is empty;
// and an instant earlier than the last one asked is answered too.
func TestChunkSweep(t *testing.T) {
	act := func(chunk int16, from, to time.Duration) *item {
		return &item{chunk: chunk, work: profiler.StreamWork{Interval: profiler.Interval{Start: from, End: to}}}
	}
	acts := []*item{
		act(5, 8, 12),  // listed first, starts after A
		act(0, 0, 10),  // A
		act(1, 5, 20),  // B
		act(2, 12, 15), // C
		act(3, 30, 30), // empty: runs at no instant
		act(4, 25, 40),
		act(6, 26, 27),
		act(profiler.None, 50, 60), // no chunk: only where no other runs
		act(7, 55, 60),
	}
	sw := chunkSweep{acts: acts}
	for _, c := range []struct {
		at   time.Duration
		want int
	}{
		{-1, -1}, {0, 0}, {5, 0}, {8, 0}, {10, 1}, {12, 1}, {14, 1}, {20, -1}, {24, -1},
		{26, 4}, {30, 4}, {40, -1}, {50, -1}, {55, 7}, {60, -1},
		{9, 0}, {11, 1}, {13, 1}, // earlier than the last: the sweep starts over
		{26, 4},
	} {
		if got := sw.at(c.at); got != c.want {
			t.Errorf("chunk at %d: %d, want %d", c.at, got, c.want)
		}
	}
}

// TestReaches builds random graphs of next links, loops and links to
// itself among them, and checks graph.reaches against walking each path.
func TestReaches(t *testing.T) {
	rng := rand.New(rand.NewPCG(5, 6))
	for range 300 {
		n := 1 + rng.IntN(30)
		acts := make([]activity, n)
		g := &graph{byRank: map[int][]*activity{}}
		for i := range acts {
			a := &acts[i]
			a.chained = true
			if k := rng.IntN(n + 2); k < n {
				a.next = &acts[k]
			}
			r := rng.IntN(3)
			g.byRank[r] = append(g.byRank[r], a)
		}
		for i := range acts {
			on := map[*activity]bool{}
			for x := &acts[i]; x != nil && !on[x]; x = x.next {
				on[x] = true
			}
			for j := range acts {
				if got := g.reaches(&acts[i], &acts[j]); got != on[&acts[j]] {
					t.Fatalf("%d activities: the path from %d passes %d: %v, want %v", n, i, j, got, on[&acts[j]])
				}
			}
		}
	}
}
