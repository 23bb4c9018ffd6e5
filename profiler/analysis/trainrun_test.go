package analysis

import (
	"context"
	"fmt"
	"math/rand/v2"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/trainscope/trainscope/internal/trainrun"
	"github.com/trainscope/trainscope/profiler"
)

// TestTrainerRuns analyses the built-in trainer's records offline and as
// a sink during the run: the sink's totals equal the offline ones, busy
// time equals the step breakdown's, and every step is complete.
func TestTrainerRuns(t *testing.T) {
	for _, l := range trainrun.Layouts() {
		t.Run(l.Name, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
			defer cancel()
			sink := NewSink()
			tape, _, err := trainrun.Run(ctx, l, sink)
			if err != nil {
				t.Fatal(err)
			}
			recs := tape.Records()
			steps := Analyze(recs)
			if len(steps) != l.Config.Steps {
				t.Fatalf("%d steps analysed, want %d", len(steps), l.Config.Steps)
			}
			for _, st := range steps {
				if !st.Complete() {
					t.Errorf("step %d: problems %q", st.Step, st.Problems)
				}
				p := st.Pipeline
				if p.Stages != l.Config.Stages || p.Chunks != l.Config.Chunks || p.Microbatches != l.Config.Microbatches {
					t.Errorf("step %d: pipeline %+v, want %d×%d×%d", st.Step, p, l.Config.Stages, l.Config.Chunks, l.Config.Microbatches)
				}
				if want := l.Config.Replicas - 1; l.Config.Replicas > 1 {
					// One all-reduce per chunk per stage, each complete.
					if got := len(st.Collectives); got != l.Config.Stages*l.Config.Chunks {
						t.Errorf("step %d: %d collectives, want %d (dp=%d)", st.Step, got, l.Config.Stages*l.Config.Chunks, want+1)
					}
				}
				if l.Config.Stages > 1 && st.P2P.Matched == 0 {
					t.Errorf("step %d: no point-to-point transfer matched", st.Step)
				}
			}
			off := Summarize(steps)
			on := sink.Summary()
			if on.Steps != off.Steps || on.Complete != off.Complete || len(on.Ranks) != len(off.Ranks) {
				t.Fatalf("sink: %d steps (%d complete), %d ranks; offline %d (%d), %d", on.Steps, on.Complete, len(on.Ranks), off.Steps, off.Complete, len(off.Ranks))
			}
			for i := range on.Ranks {
				a, b := on.Ranks[i], off.Ranks[i]
				a.Score, b.Score = 0, 0
				if a != b {
					t.Errorf("rank %d: sink %+v, offline %+v", a.Rank, a, b)
				}
			}
			if on.Collectives != off.Collectives {
				t.Errorf("collectives: sink %+v, offline %+v", on.Collectives, off.Collectives)
			}
			if st := sink.Stats(); st.Dropped != 0 || st.Late != 0 || st.Forced != 0 {
				t.Errorf("sink stats %+v, want nothing dropped, late or forced", st)
			}
			checkAttribution(t, steps)
			busy := map[int]time.Duration{}
			for _, st := range steps {
				for _, r := range st.Ranks {
					busy[r.Rank] += r.Busy
				}
			}
			for _, rs := range profiler.StepBreakdown(recs) {
				if busy[rs.Rank] != rs.Busy {
					t.Errorf("rank %d: busy %v, StepBreakdown %v", rs.Rank, busy[rs.Rank], rs.Busy)
				}
			}
		})
	}
}

// TestAnalysisIgnoresRecordOrder analyses the trainer's records as they
// came and in other orders: the figures are the same. Ranges that share a
// timing event (a range and the last range nested in it, back-to-back
// ranges) start or end at the same instant, and ties must not leave the
// critical path, the last arrival of a collective or the pairing of sends
// and receives to the order the records arrived in.
func TestAnalysisIgnoresRecordOrder(t *testing.T) {
	for _, l := range trainrun.Layouts() {
		t.Run(l.Name, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
			defer cancel()
			tape, _, err := trainrun.Run(ctx, l)
			if err != nil {
				t.Fatal(err)
			}
			recs := tape.Records()
			want := Summarize(Analyze(recs))
			if want.Complete == 0 {
				t.Fatal("no complete step to compare")
			}
			rng := rand.New(rand.NewPCG(1, uint64(len(recs))))
			for try := range 4 {
				other := slices.Clone(recs)
				if try == 0 {
					slices.Reverse(other)
				} else {
					rng.Shuffle(len(other), func(i, j int) { other[i], other[j] = other[j], other[i] })
				}
				if got := Summarize(Analyze(other)); !reflect.DeepEqual(got, want) {
					t.Fatalf("order %d: analysis\n%+v\nof the records as they came:\n%+v", try, got, want)
				}
			}
		})
	}
}

// A pipeline without data parallelism has no collective: its report says
// its communication is point to point, counting the sends, rather than
// that no collective matched (which reads as a fault), and that no
// straggler can be measured without one, pointing at the stage balance. Each of its
// steps sends 2 directions × 3 chunk boundaries (stage 0 chunk 0 → stage
// 1 chunk 0 → stage 0 chunk 1 → stage 1 chunk 1) × 4 microbatches = 24
// activations and gradients.
func TestReportOfAPipelineWithoutCollectives(t *testing.T) {
	for _, l := range trainrun.Layouts() {
		if l.Name != "pp2-vpp2-dp1-1f1b-depth1" {
			continue
		}
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		tape, _, err := trainrun.Run(ctx, l)
		if err != nil {
			t.Fatal(err)
		}
		s := Summarize(Analyze(tape.Records()))
		if s.Complete == 0 {
			t.Fatal("no complete step")
		}
		var b strings.Builder
		if err := WriteReport(&b, s); err != nil {
			t.Fatal(err)
		}
		want := fmt.Sprintf("collectives: none in the complete steps, whose communication is point to point (%d sends matched with their receives)", 24*s.Complete)
		if !strings.Contains(b.String(), want) {
			t.Errorf("report lacks %q:\n%s", want, b.String())
		}
		// No straggler line would leave a reader to think none stood out;
		// it points at the stage balance instead, whichever way that
		// came out in this run.
		want = "straggler: not measured: stragglers are found by the waiting at collectives, and these steps have none; nor are the pipeline's stages uneven (stage balance, above)\n"
		if bal, ok := s.Balance(); !ok {
			t.Errorf("no stage balance: stages %+v", s.Stages)
		} else if bal.StandsOut() {
			want = fmt.Sprintf("straggler: not measured: stragglers are found by the waiting at collectives, and these steps have none; but the pipeline's stages are uneven: the others wait for stage %d (rank %d), which computes ", bal.Slowest.Stage, bal.Slowest.Stage)
		}
		if !strings.Contains(b.String(), want) {
			t.Errorf("report lacks %q:\n%s", want, b.String())
		}
		return
	}
	t.Fatal("no layout pp2-vpp2-dp1-1f1b-depth1")
}
