package naming

import "testing"

func TestStepNumber(t *testing.T) {
	for _, tc := range []struct {
		name string
		n    int32
		ok   bool
	}{
		{"step", 5, true}, {"step 12", 12, true}, {"step_3", 3, true}, {"step12", 12, true}, {"step: warmup", 5, true},
		{"step#4 (bwd)", 4, true}, {"step-7", 7, true}, {"step 3/10", 3, true}, {"step_12_fwd", 12, true},
		{"stepper", 0, false}, {"step2x", 0, false}, {"train_step", 0, false}, {"Step", 0, false},
		{"step_fn", 0, false}, {"step-end", 0, false}, {"step.optimizer", 0, false}, {"step_", 0, false},
		{"step 99999999999", 5, true},
	} {
		n, ok := StepNumber(tc.name, "step", 5)
		if n != tc.n || ok != tc.ok {
			t.Errorf("StepNumber(%q) = %d, %v; want %d, %v", tc.name, n, ok, tc.n, tc.ok)
		}
	}
}

func TestProfilerStep(t *testing.T) {
	for _, tc := range []struct {
		name string
		n    int32
		ok   bool
	}{
		{"ProfilerStep#0", 0, true}, {"ProfilerStep#12", 12, true}, {"ProfilerStep#", 0, false},
		{"ProfilerStep#1x", 0, false}, {"ProfilerStep 3", 0, false}, {"profilerstep#3", 0, false},
		{"ProfilerStep#99999999999", 0, false}, {"ProfilerStep#-1", 0, false},
	} {
		if n, ok := ProfilerStep(tc.name); n != tc.n || ok != tc.ok {
			t.Errorf("ProfilerStep(%q) = %d, %v; want %d, %v", tc.name, n, ok, tc.n, tc.ok)
		}
	}
}

// "step" then a space, ':', '#' or '=' names a step whatever follows; a
// number there followed by a letter ("2x") is no number.
func TestStepNumberAnythingAfterSeparator(t *testing.T) {
	for _, tc := range []struct {
		name string
		n    int32
	}{
		{"step 3|fwd", 3}, {"step 3\tepoch 1", 3}, {"step 3!", 3}, {"step: 7>", 7}, {"step#4+", 4},
		{"step 12abc", 5}, {"step: 5ms", 5}, {"step 2x speed-up", 5}, {"step 3é", 3},
	} {
		n, ok := StepNumber(tc.name, "step", 5)
		if n != tc.n || !ok {
			t.Errorf("StepNumber(%q) = %d, %v; want %d, true", tc.name, n, ok, tc.n)
		}
	}
}

// Every N that fits in 32 bits is read, whatever its number of digits.
func TestProfilerStepLarge(t *testing.T) {
	for _, tc := range []struct {
		name string
		n    int32
		ok   bool
	}{
		{"ProfilerStep#2147483647", 2147483647, true}, {"ProfilerStep#1000000000", 1000000000, true},
		{"ProfilerStep#2147483648", 0, false}, {"ProfilerStep#0000000000012", 12, true},
	} {
		if n, ok := ProfilerStep(tc.name); n != tc.n || ok != tc.ok {
			t.Errorf("ProfilerStep(%q) = %d, %v; want %d, %v", tc.name, n, ok, tc.n, tc.ok)
		}
	}
}
