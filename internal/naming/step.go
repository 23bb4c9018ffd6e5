package naming

import (
	"math"
	"strconv"
	"strings"
)

// StepNumber reports whether name names a step range, for step "step":
// "step"; "step12"; "step" then a space, ':', '#' or '=' and anything
// ("step 12", "step: warm-up"); "step" then '_', '-' or '.' and a digit
// ("step_12", "step-3"; not "step_fn" or "step.optimizer"). Its number is
// the integer that follows, else next: after a space, ':', '#' or '=',
// digits followed by a letter ("step 2x") are no number.
func StepNumber(name, step string, next int32) (int32, bool) {
	rest, ok := strings.CutPrefix(name, step)
	anything := false // a separator: a step whatever follows
	switch {
	case !ok:
		return 0, false
	case rest == "":
		return next, true
	case strings.ContainsRune(" :#=", rune(rest[0])):
		rest, anything = strings.TrimLeft(rest, " :#="), true
	case strings.ContainsRune("_-.", rune(rest[0])) && len(rest) > 1 && isDigit(rest[1]):
		rest = rest[1:]
	case isDigit(rest[0]):
	default:
		return 0, false // "stepper", "step_fn", "step.optimizer"
	}
	i := 0
	for i < len(rest) && isDigit(rest[i]) {
		i++
	}
	if rest[:i] == "" {
		return next, true // "step: warm-up"
	}
	switch {
	case anything && i < len(rest) && isLetter(rest[i]):
		return next, true // "step 2x": a step, "2x" no number
	case anything:
		// "step 3|fwd", "step 3\tepoch 1": the number, whatever follows
	case i < len(rest) && !strings.ContainsRune(" :#=()[]/,;", rune(rest[i])) && rest[i] != '_' && rest[i] != '-' && rest[i] != '.':
		return 0, false // "step2x"
	}
	v, err := strconv.ParseInt(rest[:i], 10, 32)
	if err != nil {
		return next, true
	}
	return int32(v), true
}

// ProfilerStep reports whether name is torch.profiler's step range,
// "ProfilerStep#N" (written when the profiler runs on a schedule and the
// loop calls prof.step()), and its N.
func ProfilerStep(name string) (int32, bool) {
	rest, ok := strings.CutPrefix(name, "ProfilerStep#")
	if !ok {
		return 0, false
	}
	v, ok := digits(rest, math.MaxInt32) // all digits, N up to 2^31−1
	return int32(v), ok
}

func isDigit(c byte) bool { return c >= '0' && c <= '9' }
