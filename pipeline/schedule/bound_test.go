package schedule

import (
	"errors"
	"fmt"
	"strings"
	"testing"
)

// actionsOrPanic calls Actions, turning a panic into an error.
func actionsOrPanic(s *Schedule, stage int) (n int, err error) {
	defer func() {
		if r := recover(); r != nil {
			err = fmt.Errorf("Actions panicked: %v", r)
		}
	}()
	return len(s.Actions(stage)), nil
}

// Sizes whose action lists could not be allocated are refused by the
// constructors, with an error, before anything is allocated: Actions and
// Simulate are never handed a schedule they would panic on (or exhaust
// memory with).
func TestConstructorsRefuseSchedulesBeyondMaxActions(t *testing.T) {
	for _, sz := range []struct{ p, v, m int }{
		{1, 1, 1 << 50},          // one stage's list alone: beyond any allocation (makeslice panics)
		{1 << 20, 1, 1 << 20},    // 2^41 actions a step
		{4096, 16, 4096},         // 2^29 actions a step
		{1, 1, MaxActions/2 + 1}, // one over the bound
	} {
		for _, c := range []struct {
			name string
			mk   func(p, v, m int) (*Schedule, error)
		}{{"GPipe", GPipe}, {"Interleaved1F1B", Interleaved1F1B}} {
			s, err := c.mk(sz.p, sz.v, sz.m)
			if err == nil {
				_, perr := actionsOrPanic(s, 0)
				t.Errorf("%s(%d, %d, %d) accepted; Actions: %v", c.name, sz.p, sz.v, sz.m, perr)
				continue
			}
			if !errors.Is(err, ErrInvalidArgument) || !strings.Contains(err.Error(), "MaxActions") {
				t.Errorf("%s(%d, %d, %d): %v, want ErrInvalidArgument naming MaxActions", c.name, sz.p, sz.v, sz.m, err)
			}
		}
	}
	// The bound itself is allowed (nothing is allocated here), and so
	// are the sizes of real jobs.
	for _, sz := range []struct{ p, v, m int }{{1, 1, MaxActions / 2}, {512, 16, 16384}, {256, 1, 8192}} {
		if _, err := Interleaved1F1B(sz.p, sz.v, sz.m); err != nil {
			t.Errorf("Interleaved1F1B(%d, %d, %d): %v", sz.p, sz.v, sz.m, err)
		}
	}
}

// Simulate of an oversized schedule cannot happen: the only oversized
// Schedule is one a constructor refused. The zero Schedule still errors.
func TestSimulateRefusesWhatItCannotBuild(t *testing.T) {
	s, err := GPipe(1, 1, 1<<50)
	if err == nil {
		func() {
			defer func() {
				if r := recover(); r != nil {
					t.Errorf("Simulate panicked: %v", r)
				}
			}()
			_, err := Simulate(s, UniformCost(1, 2))
			t.Errorf("GPipe(1, 1, 2^50) accepted; Simulate: %v", err)
		}()
	}
	if _, err := Simulate(&Schedule{}, UniformCost(1, 2)); err == nil {
		t.Error("Simulate of the zero Schedule: no error")
	}
}
