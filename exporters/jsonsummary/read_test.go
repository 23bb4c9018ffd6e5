package jsonsummary_test

import (
	"bytes"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/trainscope/trainscope/exporters/jsonsummary"
	"github.com/trainscope/trainscope/profiler"
)

// TestReadWhatWriteWrote: Read gives back the document Write wrote, a
// field a later version may add is ignored, and each malformed input is
// an error saying what is wrong (where, for JSON that does not parse).
func TestReadWhatWriteWrote(t *testing.T) {
	in := jsonsummary.Input{RunID: "r", Command: []string{"-steps", "3"},
		Steps: []profiler.StepStats{{RankSteps: profiler.RankSteps{Rank: 0, Stage: profiler.None, Steps: 3, Wall: 30 * time.Millisecond}, P50: 10 * time.Millisecond}}}
	var b bytes.Buffer
	if err := jsonsummary.Write(&b, in); err != nil {
		t.Fatal(err)
	}
	d, err := jsonsummary.Read(&b)
	if err != nil {
		t.Fatal(err)
	}
	if want := jsonsummary.Make(in); !reflect.DeepEqual(d, want) {
		t.Errorf("read %+v\nwrote %+v", d, want)
	}
	if d, err := jsonsummary.Read(strings.NewReader(`{"schema":"trainscope.summary/v1","later":{"x":1},"run_id":"z"}`)); err != nil || d.RunID != "z" {
		t.Errorf("a field this version does not know: %+v, %v", d, err)
	}
	for _, c := range []struct{ in, want string }{
		{``, "empty: no JSON document"},
		{`{"schema":"trainscope.summary/v1","steps":[`, "truncated"},
		{`{"schema": "trainscope.summary/v1", x}`, "not JSON at byte 37"},
		{`{"schema":"trainscope.summary/v1","steps":[{"rank":"zero"}]}`, `field steps.rank at byte 57: a JSON string where a whole number belongs`},
		{`{"run_id":"r"}`, `no "schema" field`},
		{`{"schema":"trainscope.summary/v2"}`, `schema "trainscope.summary/v2": written by another profile-run version`},
		{`{"schema":"otel"}`, `schema "otel": not a summary.json trainscope wrote`},
		{`[1, 2]`, "the document at byte 1: a JSON array where an object belongs"},
	} {
		if _, err := jsonsummary.Read(strings.NewReader(c.in)); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%q: %v; want an error with %q", c.in, err, c.want)
		}
	}
}

// FuzzRead: no input makes Read panic; what it accepts has the schema.
func FuzzRead(f *testing.F) {
	for _, s := range []string{
		`{"schema":"trainscope.summary/v1","command":[],"records":{},"steps":[{"rank":0,"steps":9,"p50_s":0.01,"busy_fraction":null}],"pipeline":{"stepless":false,"bubbles":[{"stage":null,"bubble_fraction":0.2}],"straggler":1},"ranges":[]}`,
		`{"schema":"trainscope.summary/v2"}`,
		`{"schema":"trainscope.summary/v1","steps":[`,
		``,
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		d, err := jsonsummary.Read(bytes.NewReader(b))
		if err == nil && d.Schema != jsonsummary.Schema {
			t.Errorf("accepted schema %q", d.Schema)
		}
		if err != nil && err.Error() == "" {
			t.Error("an error that says nothing")
		}
	})
}
