package chrometrace

import (
	"encoding/json"
	"math"
	"math/rand/v2"
	"strconv"
	"testing"
)

// A time read back as Perfetto reads it, float64(µs) × 1000 truncated,
// is the exact nanosecond, also where the plain decimal would not be.
func TestAppendTimeTruncatesExactly(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	values := []int64{0, 1, 999, 1000, 1001, 1234567, 1_000_000_000_123, -1, -1234567}
	for range 100000 {
		values = append(values, rng.Int64N(1<<50), -rng.Int64N(1<<40))
	}
	plainWrong := 0
	for _, ns := range values {
		s := string(appendTime(nil, ns))
		f, err := strconv.ParseFloat(s, 64)
		if err != nil {
			t.Fatalf("%d → %q: %v", ns, s, err)
		}
		if got := int64(f * 1000); got != ns {
			t.Fatalf("%d → %q → %d", ns, s, got)
		}
		if p, _ := strconv.ParseFloat(string(appendMicros(nil, ns)), 64); int64(p*1000) != ns {
			plainWrong++
		}
	}
	t.Logf("%d of %d plain decimals truncate to the wrong nanosecond", plainWrong, len(values))
	if plainWrong == 0 {
		t.Error("no value where the plain decimal truncates wrongly: the test no longer shows why the half nanosecond is there")
	}
}

func TestAppendMicros(t *testing.T) {
	for ns, want := range map[int64]string{0: "0", 1: "0.001", 1500: "1.5", 1234567: "1234.567", -2500: "-2.5", 3000: "3"} {
		if got := string(appendMicros(nil, ns)); got != want {
			t.Errorf("appendMicros(%d) = %q, want %q", ns, got, want)
		}
	}
}

func TestAppendString(t *testing.T) {
	for _, s := range []string{"", "linear", `a"b\c`, "tab\there\nnl\r\x00\x1f", "µs → ok", "bad\xffutf8", "\u2028"} {
		b := appendString(nil, s)
		var got string
		if err := json.Unmarshal(b, &got); err != nil {
			t.Fatalf("%q → %s: %v", s, b, err)
		}
		want := s
		if s == "bad\xffutf8" {
			want = "bad\ufffdutf8"
		}
		if got != want {
			t.Errorf("%q → %s → %q", s, b, got)
		}
	}
}

// The most negative duration (an inverted interval's difference, a time
// at the bottom of the range) is still a JSON number, with its digits.
func TestAppendMinInt64(t *testing.T) {
	const minNs = -1 << 63 // -9223372036854775808 ns
	for _, c := range []struct {
		got, want string
	}{
		{string(appendTime(nil, minNs)), "-9223372036854775.80825"},
		{string(appendMicros(nil, minNs)), "-9223372036854775.808"},
	} {
		if c.got != c.want {
			t.Errorf("got %q, want %q", c.got, c.want)
		}
		var n json.Number
		if err := json.Unmarshal([]byte(c.got), &n); err != nil {
			t.Errorf("%q is not a JSON number: %v", c.got, err)
		}
	}
}

// perfettoRounds reads a time as the Perfetto trace processor reads it
// since v51 (json_trace_tokenizer.cc, CoerceToTs): an integral value is
// whole microseconds, any other is rounded to the nearest nanosecond,
// half away from zero (llround(µs × 1000)).
func perfettoRounds(s string) (int64, error) {
	f, err := strconv.ParseFloat(s, 64)
	if err != nil {
		return 0, err
	}
	if f == math.Trunc(f) {
		return int64(f) * 1000, nil
	}
	return int64(math.Round(f * 1000)), nil
}

// A reader that rounds, as Perfetto does now, gets the exact nanosecond
// back too, as one that truncates does (TestAppendTimeTruncatesExactly).
func TestAppendTimeRoundsExactly(t *testing.T) {
	rng := rand.New(rand.NewPCG(3, 4))
	values := []int64{0, 1, 499, 500, 501, 999, 1000, 1001, 1234567, 15_000_000, 1_000_000_000_123, -1, -500, -1000, -1234567}
	for range 100000 {
		values = append(values, rng.Int64N(1<<50), -rng.Int64N(1<<40))
	}
	wrong := 0
	for _, ns := range values {
		s := string(appendTime(nil, ns))
		got, err := perfettoRounds(s)
		if err != nil {
			t.Fatalf("%d → %q: %v", ns, s, err)
		}
		if got != ns {
			if wrong < 5 {
				t.Errorf("%d ns → %q → read back as %d ns", ns, s, got)
			}
			wrong++
		}
	}
	if wrong > 0 {
		t.Errorf("%d of %d times read back wrong by a reader that rounds", wrong, len(values))
	}
}
