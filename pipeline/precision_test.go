package pipeline

import (
	"context"
	"fmt"
	"slices"
	"testing"

	"github.com/trainscope/trainscope/runtime"
)

// The cpu backend computes in float32 only: asking for TF32 or bf16 gets
// float32 and a one-line reason.
func TestEffectivePrecisionOnCPU(t *testing.T) {
	c := smallConfig(2, 1, 1, Schedule1F1B)
	if m, why := c.EffectivePrecision(); m != runtime.MathDefault || why != "" {
		t.Errorf("float32: EffectivePrecision() = %v, %q; want float32 and no reason", m, why)
	}
	asFlag := func(field string, value any) string {
		if field != "Precision" {
			t.Errorf("reason names field %q", field)
		}
		return fmt.Sprintf("-dtype %v", value)
	}
	for _, mode := range []runtime.MathMode{runtime.MathTF32, runtime.MathBF16} {
		c.Precision = mode
		m, why := c.EffectivePrecision()
		want := "the cpu backend computes in float32; Precision=" + mode.String() + " not available there, using float32"
		if m != runtime.MathDefault || why != want {
			t.Errorf("%s: EffectivePrecision() = %v, %q; want float32, %q", mode, m, why, want)
		}
		m, why = c.EffectivePrecisionExplained(asFlag)
		want = "the cpu backend computes in float32; -dtype " + mode.String() + " not available there, using float32"
		if m != runtime.MathDefault || why != want {
			t.Errorf("%s: EffectivePrecisionExplained() = %v, %q; want float32, %q", mode, m, why, want)
		}
	}
}

// A run that asks for bf16 on the cpu backend trains in float32: the same
// losses, bit for bit, as a run that asks for nothing, and the trainer's
// configuration says float32.
func TestTrainBF16OnCPUUsesFloat32(t *testing.T) {
	base := smallConfig(2, 2, 1, Schedule1F1B)
	want, err := Train(context.Background(), base)
	if err != nil {
		t.Fatal(err)
	}
	cfg := base
	cfg.Precision = runtime.MathBF16
	tr, err := NewTrainer(context.Background(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	if p := tr.Config().Precision; p != runtime.MathDefault {
		t.Errorf("Trainer.Config().Precision = %v, want float32", p)
	}
	var got []float64
	for range cfg.Steps {
		sr, err := tr.Step(context.Background())
		if err != nil {
			t.Fatal(err)
		}
		got = append(got, sr.Loss)
	}
	if err := tr.Close(); err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(got, want.Losses) {
		t.Errorf("losses with bf16 asked for %v, float32 %v", got, want.Losses)
	}
}
