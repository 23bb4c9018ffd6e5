package schedule

import (
	"testing"
	"time"
)

// TestSimulateLinearInStages checks that Simulate's running time grows
// with the number of actions, not with stages × actions: GPipe with n
// stages and one microbatch has as many actions as GPipe with one stage
// and n microbatches, and must not take orders of magnitude longer. (It
// used to make a full pass over every stage for each hop of the backward
// wave, p passes of p stages, so 2^17 stages took tens of seconds and the
// sizes MaxActions allows, hours.)
func TestSimulateLinearInStages(t *testing.T) {
	const n = 1 << 17
	build := func(p, m int) *Schedule {
		t.Helper()
		s, err := GPipe(p, 1, m)
		if err != nil {
			t.Fatal(err)
		}
		return s
	}
	// timeIt runs on another goroutine too, so it reports through its
	// result rather than t: the best of three runs, so that one slow run (a
	// busy machine, a garbage collection) does not decide.
	timeIt := func(s *Schedule) (time.Duration, error) {
		best := time.Duration(-1)
		for range 3 {
			start := time.Now()
			if _, err := Simulate(s, UniformCost(1, 2)); err != nil {
				return 0, err
			}
			if d := time.Since(start); best < 0 || d < best {
				best = d
			}
		}
		return best, nil
	}
	ref, err := timeIt(build(1, n))
	if err != nil {
		t.Fatal(err)
	}
	limit := max(50*ref, time.Second)
	wide := build(n, 1)
	type result struct {
		d   time.Duration
		err error
	}
	done := make(chan result, 1)
	go func() {
		d, err := timeIt(wide)
		done <- result{d, err}
	}()
	select {
	case r := <-done:
		d := r.d
		if r.err != nil {
			t.Fatal(r.err)
		}
		if d > limit {
			t.Errorf("Simulate of GPipe(%d, 1, 1) took %v; GPipe(1, 1, %d), as many actions, %v", n, d, n, ref)
		}
		t.Logf("GPipe(%d, 1, 1): %v; GPipe(1, 1, %d): %v", n, d, n, ref)
	case <-time.After(limit):
		t.Errorf("Simulate of GPipe(%d, 1, 1) still running after %v; GPipe(1, 1, %d), as many actions, took %v", n, limit, n, ref)
	}
}
