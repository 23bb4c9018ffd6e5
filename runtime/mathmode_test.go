package runtime_test

import (
	"errors"
	"strings"
	"testing"

	"github.com/trainscope/trainscope/runtime"
	"github.com/trainscope/trainscope/runtime/cpu"
)

func TestParseMathMode(t *testing.T) {
	good := []struct {
		in   string
		want runtime.MathMode
	}{
		{"float32", runtime.MathDefault},
		{"fp32", runtime.MathDefault},
		{"FP32", runtime.MathDefault},
		{"tf32", runtime.MathTF32},
		{"TF32", runtime.MathTF32},
		{"bf16", runtime.MathBF16},
		{"Bf16", runtime.MathBF16},
	}
	for _, c := range good {
		got, err := runtime.ParseMathMode(c.in)
		if err != nil || got != c.want {
			t.Errorf("ParseMathMode(%q) = %v, %v; want %v", c.in, got, err, c.want)
		}
	}
	for _, in := range []string{"", "nonsense", "fp16", "float16", "bfloat16", "float64", " tf32", "tf32 "} {
		_, err := runtime.ParseMathMode(in)
		if !errors.Is(err, runtime.StatusInvalidArgument) {
			t.Errorf("ParseMathMode(%q): %v, want an error wrapping InvalidArgument", in, err)
			continue
		}
		msg := err.Error()
		for _, w := range []string{`"` + in + `"`, "float32", "fp32", "tf32", "bf16"} {
			if !strings.Contains(msg, w) {
				t.Errorf("ParseMathMode(%q) error %q does not name %q", in, msg, w)
			}
		}
	}
}

func TestMathModeString(t *testing.T) {
	for m, want := range map[runtime.MathMode]string{
		runtime.MathDefault: "float32",
		runtime.MathTF32:    "tf32",
		runtime.MathBF16:    "bf16",
	} {
		if got := m.String(); got != want {
			t.Errorf("MathMode(%d).String() = %q, want %q", int(m), got, want)
		}
		if back, err := runtime.ParseMathMode(m.String()); err != nil || back != m {
			t.Errorf("ParseMathMode(%q) = %v, %v; want %v back", m.String(), back, err, m)
		}
	}
	for _, m := range []runtime.MathMode{-1, 3, 42} {
		s := m.String()
		if !strings.Contains(s, "unsupported") || strings.Contains(s, "float32") {
			t.Errorf("MathMode(%d).String() = %q, want it to say the value is not a mode", int(m), s)
		}
	}
}

// plainBackend is a backend without the MathModes capability: embedding the
// interface hides the cpu backend's SupportsMath.
type plainBackend struct{ runtime.Impl }

// tensorCores claims every mode, to see SupportsMath ask the backend.
type tensorCores struct{ runtime.Impl }

func (tensorCores) SupportsMath(runtime.MathMode) bool { return true }

func TestSupportsMath(t *testing.T) {
	host := cpu.New()
	cases := []struct {
		name string
		impl runtime.Impl
		mode runtime.MathMode
		want bool
	}{
		{"cpu float32", host, runtime.MathDefault, true},
		{"cpu tf32", host, runtime.MathTF32, false},
		{"cpu bf16", host, runtime.MathBF16, false},
		{"no capability float32", plainBackend{host}, runtime.MathDefault, true},
		{"no capability tf32", plainBackend{host}, runtime.MathTF32, false},
		{"no capability bf16", plainBackend{host}, runtime.MathBF16, false},
		{"capable tf32", tensorCores{host}, runtime.MathTF32, true},
		{"capable bf16", tensorCores{host}, runtime.MathBF16, true},
		{"capable but not a mode", tensorCores{host}, runtime.MathMode(9), false},
	}
	for _, c := range cases {
		if got := runtime.SupportsMath(c.impl, c.mode); got != c.want {
			t.Errorf("%s: SupportsMath(%v) = %v, want %v", c.name, c.mode, got, c.want)
		}
	}
}

func TestGemmMathChecks(t *testing.T) {
	dev := runtime.Device{Type: runtime.CPU}
	s, err := runtime.NewStream(dev)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Destroy()
	buf, _ := runtime.Malloc(dev, 8*6)
	defer runtime.Free(buf)
	ok := runtime.GemmArgs{M: 2, N: 3, K: 1, Alpha: 1, A: buf, B: buf, C: buf, LDA: 2, LDB: 1, LDC: 2, Type: runtime.Float32}
	if err := runtime.Gemm(s, ok); err != nil {
		t.Fatalf("float32 GEMM in the default mode: %v", err)
	}
	// Refused before any backend sees them: a reduced precision of
	// anything but float32, and a mode outside the list.
	invalid := []struct {
		name string
		mut  func(g *runtime.GemmArgs)
	}{
		{"tf32 of float64", func(g *runtime.GemmArgs) { g.Type, g.Math = runtime.Float64, runtime.MathTF32 }},
		{"bf16 of float16", func(g *runtime.GemmArgs) { g.Type, g.Math = runtime.Float16, runtime.MathBF16 }},
		{"bf16 of bfloat16", func(g *runtime.GemmArgs) { g.Type, g.Math = runtime.BFloat16, runtime.MathBF16 }},
		{"mode 3", func(g *runtime.GemmArgs) { g.Math = 3 }},
		{"mode -1", func(g *runtime.GemmArgs) { g.Math = -1 }},
	}
	for _, c := range invalid {
		g := ok
		c.mut(&g)
		if err := runtime.Gemm(s, g); !errors.Is(err, runtime.StatusInvalidArgument) {
			t.Errorf("%s: %v, want InvalidArgument", c.name, err)
		}
	}
	// Valid requests the cpu backend cannot honour: its own refusal.
	for _, m := range []runtime.MathMode{runtime.MathTF32, runtime.MathBF16} {
		g := ok
		g.Math = m
		err := runtime.Gemm(s, g)
		if !errors.Is(err, runtime.StatusNotSupported) || !strings.Contains(err.Error(), "cpu backend computes in float32") {
			t.Errorf("%s on cpu: %v, want NotSupported saying the cpu backend computes in float32", m, err)
		}
	}
	// A backend that does not know the field is refused any reduced
	// precision, rather than let it compute in fp32 unasked. (Its stream
	// uses the same buffer: s must be done with it first.)
	if err := s.Synchronize(t.Context()); err != nil {
		t.Fatal(err)
	}
	host, err := runtime.Lookup(runtime.CPU)
	if err != nil {
		t.Fatal(err)
	}
	ps, err := runtime.NewStreamWith(plainBackend{host}, dev)
	if err != nil {
		t.Fatal(err)
	}
	defer ps.Destroy()
	g := ok
	g.Math = runtime.MathTF32
	if err := runtime.Gemm(ps, g); !errors.Is(err, runtime.StatusNotSupported) {
		t.Errorf("tf32 on a backend without MathModes: %v, want NotSupported", err)
	}
	if err := runtime.Gemm(ps, ok); err != nil {
		t.Errorf("float32 on a backend without MathModes: %v", err)
	}
	if err := ps.Synchronize(t.Context()); err != nil {
		t.Fatal(err)
	}
}
