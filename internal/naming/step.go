package naming

import (
	"strconv"
	"strings"
)

// StepNumber reports whether name names a step range, for step "step":
// "step"; "step12"; "step" then a space, ':', '#' or '=' and anything
// ("step 12", "step: warm-up"); "step" then '_', '-' or '.' and a digit
// ("step_12", "step-3"; not "step_fn" or "step.optimizer"). Its number is
// the integer that follows, else next.
func StepNumber(name, step string, next int32) (int32, bool) {
	rest, ok := strings.CutPrefix(name, step)
	switch {
	case !ok:
		return 0, false
	case rest == "":
		return next, true
	case strings.ContainsRune(" :#=", rune(rest[0])):
		rest = strings.TrimLeft(rest, " :#=")
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
	if i < len(rest) && !strings.ContainsRune(" :#=()[]/,;", rune(rest[i])) && rest[i] != '_' && rest[i] != '-' && rest[i] != '.' {
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
	if !ok || rest == "" || len(rest) > 9 {
		return 0, false
	}
	for i := 0; i < len(rest); i++ {
		if !isDigit(rest[i]) {
			return 0, false
		}
	}
	v, _ := strconv.ParseInt(rest, 10, 32)
	return int32(v), true
}

func isDigit(c byte) bool { return c >= '0' && c <= '9' }
