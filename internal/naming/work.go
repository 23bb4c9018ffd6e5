package naming

import (
	"math"
	"strings"

	"github.com/trainscope/trainscope/profiler"
)

// Work is what a range's name says of the work inside it: one
// microbatch's forward or backward computation of a model chunk.
type Work struct {
	Phase profiler.Phase // profiler.Forward or profiler.Backward
	// Chunk and Microbatch are profiler.None where the name gives none.
	Chunk, Microbatch int32
	// Stage is the pipeline stage torch.distributed.pipelining names an
	// action by ("PP:2F3": stage 2), profiler.None for other names. Under
	// a multi-stage schedule a rank holds several stages; the chunk is
	// the stage's place among the rank's, which one name cannot tell.
	Stage int32
}

// WorkOf reports whether name names forward or backward work, and what
// it says of it. Two forms are read:
//
// A name that starts with forward, fwd, backward or bwd (any case, not
// followed by a letter: "forward_step" but not "forwarding") and does
// not name the other phase later ("forward_backward_func" is a whole
// step). A number after "chunk" or "vpp" is the chunk, one after
// "microbatch", "micro_batch", "micro-batch" or "mb" the microbatch; a
// number right after the phase ("forward 3", "bwd_3", and
// torch.distributed.pipelining's "Forward 3" of GPipe) is the microbatch
// too where no key gives it. Keys start a word: after the start or a
// character that is neither a letter nor a digit; a number is digits
// after any of " _-=:#", not followed by a letter. A chunk above 32767 or
// a microbatch above 2^31−1 is none.
//
// torch.distributed.pipelining's action ranges, "PP:" then the stage,
// the action and the microbatch, as its multi-stage schedules record
// each action (_get_profiler_function_name): F is forward; B (full
// backward), I (backward of the input) and W (backward of the weights)
// are backward. Its other actions (SEND_F, RECV_B, UNSHARD, …) are not
// computation.
func WorkOf(name string) (Work, bool) {
	if rest, ok := strings.CutPrefix(name, "PP:"); ok {
		return action(rest)
	}
	return phaseName(name)
}

// action reads a torch.distributed.pipelining action: stage digits, F,
// B, I or W, microbatch digits.
func action(s string) (Work, bool) {
	i := 0
	for i < len(s) && isDigit(s[i]) {
		i++
	}
	if i == 0 || i == len(s) {
		return Work{}, false
	}
	stage, ok := digits(s[:i], math.MaxInt32)
	if !ok {
		return Work{}, false
	}
	w := Work{Chunk: profiler.None, Stage: int32(stage)}
	switch s[i] {
	case 'F':
		w.Phase = profiler.Forward
	case 'B', 'I', 'W':
		w.Phase = profiler.Backward
	default:
		return Work{}, false
	}
	mb, ok := digits(s[i+1:], math.MaxInt32)
	if !ok {
		return Work{}, false
	}
	w.Microbatch = int32(mb)
	return w, true
}

// digits is s as a decimal number up to limit; s all digits, not empty.
// Leading zeros do not count toward its size ("000000000007" is 7).
func digits(s string, limit int64) (int64, bool) {
	if s == "" {
		return 0, false
	}
	var v int64
	for i := 0; i < len(s); i++ {
		if !isDigit(s[i]) {
			return 0, false
		}
		if v > limit {
			continue // too large already: the rest must still be digits
		}
		v = v*10 + int64(s[i]-'0')
	}
	if v > limit {
		return 0, false
	}
	return v, true
}

var (
	forwardWords    = []string{"forward", "fwd"}
	backwardWords   = []string{"backward", "bwd"}
	chunkKeys       = []string{"chunk", "vpp"}
	microbatchKeys  = []string{"microbatch", "micro_batch", "micro-batch", "mb"}
	numberSeparator = " _-=:#"
)

func phaseName(name string) (Work, bool) {
	name = strings.TrimLeft(name, " ")
	w := Work{Phase: profiler.Forward, Chunk: profiler.None, Stage: profiler.None}
	other := backwardWords
	k := anyWord(name, forwardWords)
	if k == 0 {
		w.Phase, other = profiler.Backward, forwardWords
		k = anyWord(name, backwardWords)
	}
	if k == 0 {
		return Work{}, false
	}
	chunk, mb := int64(-1), numberAfter(name[k:])
	for p := k; p < len(name); p++ {
		if isLetter(name[p-1]) || isDigit(name[p-1]) {
			continue
		}
		if anyWord(name[p:], other) > 0 {
			return Work{}, false
		}
		if n := anyWord(name[p:], chunkKeys); n > 0 {
			if v := numberAfter(name[p+n:]); v >= 0 {
				chunk = v
			}
		}
		if n := anyWord(name[p:], microbatchKeys); n > 0 {
			if v := numberAfter(name[p+n:]); v >= 0 {
				mb = v
			}
		}
	}
	if chunk >= 0 && chunk <= math.MaxInt16 {
		w.Chunk = int32(chunk)
	}
	w.Microbatch = profiler.None
	if mb >= 0 {
		w.Microbatch = int32(mb)
	}
	return w, true
}

// anyWord is the length of the first of words (lower case) that s starts
// with, in any case, not followed by a letter; 0 where none.
func anyWord(s string, words []string) int {
	for _, w := range words {
		if hasLower(s, w) && (len(s) == len(w) || !isLetter(s[len(w)])) {
			return len(w)
		}
	}
	return 0
}

// numberAfter is the number after a key: separators, then digits not
// followed by a letter; −1 where there is none or it passes 2^31−1.
func numberAfter(s string) int64 {
	s = strings.TrimLeft(s, numberSeparator)
	i := 0
	for i < len(s) && isDigit(s[i]) {
		i++
	}
	if i == 0 || i < len(s) && isLetter(s[i]) {
		return -1
	}
	v, ok := digits(s[:i], math.MaxInt32)
	if !ok {
		return -1
	}
	return v
}

// hasLower reports whether s starts with w (lower-case ASCII) in any
// case, byte by byte.
func hasLower(s, w string) bool {
	if len(s) < len(w) {
		return false
	}
	for i := 0; i < len(w); i++ {
		c := s[i]
		if c >= 'A' && c <= 'Z' {
			c += 'a' - 'A'
		}
		if c != w[i] {
			return false
		}
	}
	return true
}

func isLetter(c byte) bool { return c|0x20 >= 'a' && c|0x20 <= 'z' }
