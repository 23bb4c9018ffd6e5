package naming

import (
	"testing"

	"github.com/trainscope/trainscope/profiler"
)

func TestWorkOf(t *testing.T) {
	const none = profiler.None
	fwd := func(chunk, mb int32) Work { return Work{profiler.Forward, chunk, mb, none} }
	bwd := func(chunk, mb int32) Work { return Work{profiler.Backward, chunk, mb, none} }
	pp := func(ph profiler.Phase, stage, mb int32) Work { return Work{ph, none, mb, stage} }
	for _, tc := range []struct {
		name string
		want Work
		ok   bool
	}{
		{"forward chunk 1 microbatch 3", fwd(1, 3), true},
		{"bwd_mb3_chunk1", bwd(1, 3), true},
		{"Forward 7", fwd(none, 7), true}, // torch.distributed.pipelining's GPipe
		{"Backward 0", bwd(none, 0), true},
		{"backward", bwd(none, none), true},
		{"forward_step", fwd(none, none), true},
		{"fwd vpp=2 mb=5", fwd(2, 5), true},
		{"  FWD#4", fwd(none, 4), true},
		{"forward micro-batch 6 chunk: 2", fwd(2, 6), true},
		{"forward micro_batch=9", fwd(none, 9), true},
		{"forward 3 microbatch 4", fwd(none, 4), true}, // the key's number wins
		{"forward mb3x", fwd(none, none), true},        // a number followed by a letter is none
		{"forward chunk 40000 mb 2", fwd(none, 2), true},
		{"forward mb 2147483648", fwd(none, none), true},
		{"forward mb 2147483647", fwd(none, 2147483647), true},
		{"forward submb 3", fwd(none, none), true}, // a key starts a word
		{"forward_backward_func", Work{}, false},   // both phases: a whole step
		{"forward then bwd", Work{}, false},
		{"forwarding", Work{}, false},
		{"fwdx", Work{}, false},
		{"optimizer", Work{}, false},
		{"my forward", Work{}, false}, // the phase starts the name
		{"", Work{}, false},
		// torch.distributed.pipelining's actions.
		{"PP:0F3", pp(profiler.Forward, 0, 3), true},
		{"PP:2B0", pp(profiler.Backward, 2, 0), true},
		{"PP:13I7", pp(profiler.Backward, 13, 7), true},
		{"PP:1W12", pp(profiler.Backward, 1, 12), true},
		{"PP:0SEND_F3", Work{}, false},
		{"PP:1RECV_B7", Work{}, false},
		{"PP:0UNSHARD", Work{}, false},
		{"PP:0REDUCE_GRAD", Work{}, false},
		{"PP:F3", Work{}, false},
		{"PP:0F", Work{}, false},
		{"PP:0F3x", Work{}, false},
		{"PP:99999999999F1", Work{}, false},
		{"PP:", Work{}, false},
	} {
		got, ok := WorkOf(tc.name)
		if ok != tc.ok || got != tc.want {
			t.Errorf("WorkOf(%q) = %+v, %v; want %+v, %v", tc.name, got, ok, tc.want, tc.ok)
		}
	}
}

func FuzzWorkOf(f *testing.F) {
	for _, s := range []string{"forward chunk 1 microbatch 3", "bwd_mb3_chunk1", "PP:0F3", "PP:1RECV_B7", "Forward 7"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, name string) {
		w, ok := WorkOf(name)
		if !ok {
			if w != (Work{}) {
				t.Fatalf("WorkOf(%q) = %+v, false: want the zero Work", name, w)
			}
			return
		}
		if w.Phase != profiler.Forward && w.Phase != profiler.Backward {
			t.Fatalf("WorkOf(%q): phase %v", name, w.Phase)
		}
		if w.Chunk < profiler.None || w.Microbatch < profiler.None || w.Stage < profiler.None {
			t.Fatalf("WorkOf(%q) = %+v: a negative label other than None", name, w)
		}
	})
}

// A number is read by its value, not its length: leading zeros do not
// make it too large (the plugin's C rule reads them so too).
func TestWorkOfLeadingZeros(t *testing.T) {
	const none = profiler.None
	for _, tc := range []struct {
		name string
		want Work
	}{
		{"forward mb 000000000007", Work{profiler.Forward, none, 7, none}},
		{"bwd chunk 0000000000001 mb 2", Work{profiler.Backward, 1, 2, none}},
		{"PP:000000000001F00000000002", Work{profiler.Forward, none, 2, 1}},
		{"forward mb 000000000002147483648", Work{profiler.Forward, none, none, none}},
	} {
		if got, ok := WorkOf(tc.name); !ok || got != tc.want {
			t.Errorf("WorkOf(%q) = %+v, %v; want %+v, true", tc.name, got, ok, tc.want)
		}
	}
}
