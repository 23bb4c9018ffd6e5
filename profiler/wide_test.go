package profiler_test

import (
	"bytes"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/trainscope/trainscope/profiler"
)

// TestMergeRanks sums three ranks' groups of two tags, figures worked out
// by hand: counts and totals add up, shares are of the summed totals,
// tags keep their order of first appearance and names are sorted.
func TestMergeRanks(t *testing.T) {
	groups := []profiler.Group{
		{Rank: 0, Tag: "all", HostTotal: 100 * us, DeviceTotal: 40 * us, Names: []profiler.NameStats{
			{Name: "fwd", Count: 2, HostTotal: 30 * us, DeviceTotal: 40 * us, DeviceCount: 2},
			{Name: "step", Count: 1, HostTotal: 100 * us},
		}},
		{Rank: 0, Tag: "optimizer", HostTotal: 10 * us, Names: []profiler.NameStats{
			{Name: "sgd", Count: 1, HostTotal: 10 * us},
		}},
		{Rank: 1, Tag: "all", HostTotal: 300 * us, DeviceTotal: 60 * us, Names: []profiler.NameStats{
			{Name: "bwd", Count: 1, HostTotal: 20 * us, DeviceTotal: 60 * us, DeviceCount: 1, TransferCount: 1, TransferTotal: 70 * us},
			{Name: "fwd", Count: 3, HostTotal: 60 * us},
			{Name: "step", Count: 1, HostTotal: 300 * us},
		}},
		{Rank: 2, Tag: "optimizer", HostTotal: 30 * us, Names: []profiler.NameStats{
			{Name: "sgd", Count: 2, HostTotal: 30 * us},
		}},
	}
	m := profiler.MergeRanks(groups)
	if len(m) != 2 || m[0].Tag != "all" || m[1].Tag != "optimizer" {
		t.Fatalf("merged groups %+v, want tags all, optimizer", m)
	}
	all, opt := m[0], m[1]
	if all.Rank != profiler.AllRanks || all.Ranks != 2 || opt.Ranks != 2 || all.HostTotal != 400*us || all.DeviceTotal != 100*us || opt.HostTotal != 40*us {
		t.Errorf("group totals: all %v/%v over %d ranks, optimizer %v over %d; want 400µs/100µs over 2, 40µs over 2", all.HostTotal, all.DeviceTotal, all.Ranks, opt.HostTotal, opt.Ranks)
	}
	want := []profiler.NameStats{
		{Name: "bwd", Count: 1, HostTotal: 20 * us, DeviceTotal: 60 * us, DeviceCount: 1, TransferCount: 1, TransferTotal: 70 * us, HostPercent: 5, DevicePercent: 60},
		{Name: "fwd", Count: 5, HostTotal: 90 * us, DeviceTotal: 40 * us, DeviceCount: 2, HostPercent: 22.5, DevicePercent: 40},
		{Name: "step", Count: 2, HostTotal: 400 * us, HostPercent: 100},
	}
	if len(all.Names) != len(want) {
		t.Fatalf("names %+v, want %+v", all.Names, want)
	}
	for i, w := range want {
		if all.Names[i] != w {
			t.Errorf("name %d: %+v, want %+v", i, all.Names[i], w)
		}
	}
	if len(opt.Names) != 1 || opt.Names[0].Count != 3 || opt.Names[0].HostPercent != 100 {
		t.Errorf("optimizer names %+v, want sgd ×3 at 100%%", opt.Names)
	}

	var b bytes.Buffer
	peaks := map[int]int64{0: 3 << 20, 1: 5 << 20, 2: 5 << 20}
	if err := profiler.WriteReport(&b, m, peaks, profiler.SortHostTotal); err != nil {
		t.Fatal(err)
	}
	out := b.String()
	for _, s := range []string{"=== all 2 ranks · all ===", "=== all 2 ranks · optimizer ===", "Peak device memory (largest of the ranks: rank 1): 5.00 MB"} {
		if !strings.Contains(out, s) {
			t.Errorf("report lacks %q:\n%s", s, out)
		}
	}
	if n := strings.Count(out, "Peak device memory"); n != 1 {
		t.Errorf("%d peak lines, want one after the last table:\n%s", n, out)
	}
	b.Reset()
	if err := profiler.WriteReport(&b, m, nil, profiler.SortHostTotal); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(b.String(), "Peak device memory (largest of the ranks): not measured") {
		t.Errorf("without peaks:\n%s", b.String())
	}
}

// TestWithRankRows: of five ranks, WriteStepTimes with WithRankRows(2)
// writes the two with the highest p99, highest first, under a line
// saying so, and WriteStepBreakdown the two with the longest mean step;
// the lines under the breakdown still cover every rank (rank 4's mean,
// the longest, is named, and rank 0's busy time said to be unmeasured,
// though its line is not shown).
func TestWithRankRows(t *testing.T) {
	ms := time.Millisecond
	var times []profiler.StepStats
	var steps []profiler.RankSteps
	for r, mean := range []time.Duration{10, 30, 20, 11, 50} {
		// Rank 0's compute was not timed (a wrapped job's kernels not
		// traced): said under the table though its line is not shown.
		rs := profiler.RankSteps{Rank: r, Stage: profiler.None, Steps: 2, Wall: 2 * mean * ms, Busy: mean * ms, Computed: r != 0}
		steps = append(steps, rs)
		p99 := []time.Duration{15, 12, 40, 35, 13}[r] * ms
		times = append(times, profiler.StepStats{RankSteps: rs, Min: ms, Max: p99, P50: ms, P90: p99, P99: p99})
	}
	var b bytes.Buffer
	if err := profiler.WriteStepTimes(&b, times, profiler.WithRankRows(2)); err != nil {
		t.Fatal(err)
	}
	got := rowRanks(b.String())
	if want := []string{"2", "3"}; !slices.Equal(got, want) || !strings.HasPrefix(b.String(), "the 2 of 5 ranks with the highest p99") {
		t.Errorf("step times: ranks %v, want %v:\n%s", got, want, b.String())
	}
	b.Reset()
	if err := profiler.WriteStepBreakdown(&b, steps, 0, profiler.WithRankRows(2)); err != nil {
		t.Fatal(err)
	}
	got = rowRanks(b.String())
	if want := []string{"4", "1"}; !slices.Equal(got, want) || !strings.Contains(b.String(), "longest mean step: rank 4") ||
		!strings.Contains(b.String(), "busy: not measured on rank 0:") {
		t.Errorf("breakdown: ranks %v, want %v, rank 4 named the longest and rank 0's busy time not measured:\n%s", got, want, b.String())
	}
	b.Reset()
	if err := profiler.WriteStepTimes(&b, times, profiler.WithRankRows(5)); err != nil {
		t.Fatal(err)
	}
	if got := rowRanks(b.String()); len(got) != 5 || strings.Contains(b.String(), "of 5 ranks") {
		t.Errorf("a limit of every rank: %v\n%s", got, b.String())
	}
}

// rowRanks is the first field of each table row after the header line
// that starts with "Rank".
func rowRanks(text string) []string {
	var out []string
	in := false
	for _, line := range strings.Split(text, "\n") {
		f := strings.Fields(line)
		switch {
		case len(f) > 0 && f[0] == "Rank":
			in = true
		case in && len(f) > 1:
			if _, err := strconv.Atoi(f[0]); err != nil {
				return out
			}
			out = append(out, f[0])
		case in:
			return out
		}
	}
	return out
}
