package runtime

import (
	"strconv"
	"strings"
)

// MathMode is the compute precision of a float32 GEMM: the precision its
// inputs are rounded to before they are multiplied. The result is always
// float32 and always accumulated in fp32. GEMMs of other element types
// compute in their own precision and take only MathDefault.
//
// A backend that computes in a reduced precision says so through the
// MathModes capability; SupportsMath asks it.
type MathMode int

// Math modes.
const (
	// MathDefault is the element type's own precision: a float32 GEMM in
	// full fp32 (24-bit significands). It is the zero value. A backend
	// option may lower it for every float32 GEMM (cuda.WithTF32); a mode
	// given per call is used as it is.
	MathDefault MathMode = iota
	// MathTF32 rounds float32 inputs to TF32 (fp32's 8-bit exponent,
	// 11-bit significand) for tensor cores, accumulating in fp32.
	MathTF32
	// MathBF16 rounds float32 inputs to bfloat16 (8-bit exponent, 8-bit
	// significand) for tensor cores, accumulating in fp32.
	MathBF16
)

// mathModeNames are String's names, which ParseMathMode accepts.
var mathModeNames = [...]string{MathDefault: "float32", MathTF32: "tf32", MathBF16: "bf16"}

// mathModeSpellings are all the names ParseMathMode accepts, in the order
// its error lists them.
var mathModeSpellings = []struct {
	name string
	mode MathMode
}{
	{"float32", MathDefault},
	{"fp32", MathDefault},
	{"tf32", MathTF32},
	{"bf16", MathBF16},
}

// String names the mode as ParseMathMode reads it: "float32" (MathDefault,
// which is a float32 GEMM's own precision), "tf32", "bf16". A value
// outside the list says so.
func (m MathMode) String() string {
	if m >= 0 && int(m) < len(mathModeNames) {
		return mathModeNames[m]
	}
	return "unsupported math mode " + strconv.Itoa(int(m))
}

// valid reports whether m is one of the listed modes.
func (m MathMode) valid() bool { return m >= 0 && int(m) < len(mathModeNames) }

// ParseMathMode parses a precision name, in any case: "float32" or
// "fp32" (MathDefault), "tf32" or "bf16". Any other name is an error
// wrapping StatusInvalidArgument that lists the accepted ones.
func ParseMathMode(s string) (MathMode, error) {
	names := make([]string, len(mathModeSpellings))
	for i, sp := range mathModeSpellings {
		if strings.EqualFold(s, sp.name) {
			return sp.mode, nil
		}
		names[i] = sp.name
	}
	return 0, Errorf("ParseMathMode", StatusInvalidArgument, "unknown precision %q (one of: %s)", s, strings.Join(names, ", "))
}

// SupportsMath reports whether impl computes float32 GEMMs in mode m:
// MathDefault always; another listed mode when impl has the MathModes
// capability and says yes. Ask before a run rather than have its first
// GEMM fail.
func SupportsMath(impl Impl, m MathMode) bool {
	if m == MathDefault {
		return true
	}
	if !m.valid() {
		return false
	}
	mm, ok := impl.(MathModes)
	return ok && mm.SupportsMath(m)
}
