package importer

import (
	"bytes"
	"errors"
	"regexp"
	"testing"

	"github.com/google/pprof/profile"
)

// The files of a trainscope run directory other than its trace are no
// profile Load reads; each is named for what it is, with the trace.json
// to import instead. summary.json is JSON, but no Kineto trace: it used
// to fail as one, at its end, with "no traceEvents".
func TestLoadRunDirectoryFiles(t *testing.T) {
	prof := &profile.Profile{
		SampleType: []*profile.ValueType{{Type: "host_time", Unit: "nanoseconds"}},
		PeriodType: &profile.ValueType{Type: "host_time", Unit: "nanoseconds"},
		Function:   []*profile.Function{{ID: 1, Name: "forward"}},
		Location:   []*profile.Location{{ID: 1}},
	}
	prof.Location[0].Line = []profile.Line{{Function: prof.Function[0]}}
	prof.Sample = []*profile.Sample{{Location: prof.Location, Value: []int64{1500}}}
	var pprofZ, pprofPlain bytes.Buffer
	if err := prof.Write(&pprofZ); err != nil {
		t.Fatal(err)
	}
	if err := prof.WriteUncompressed(&pprofPlain); err != nil {
		t.Fatal(err)
	}
	const summary = `{
  "schema": "trainscope.summary/v1",
  "run_id": "20261206-025720-663386",
  "command": ["-steps", "3"],
  "records": {"collected": 2715, "dropped": 0, "host_only": 0, "backend_errors": 0},
  "steps": [],
  "ranges": []
}
`
	for _, tc := range []struct {
		name, content string
		want          string // regexp on the message, after "path:1: not a profile … JSON): "
	}{
		{"summary.json", summary, `^this is a trainscope run summary \(summary\.json: the run's figures, for profile-run compare, not its ranges\); import its run's trace\.json instead`},
		{"summary.json of a later schema", `{"schema":"trainscope.summary/v2"}`, `^this is a trainscope run summary`},
		{"report.html", "<!DOCTYPE html>\n<html lang=\"en\">\n<head>\n<meta charset=\"utf-8\">\n<title>trainscope · 20261206-025720-663386</title>", `^this is a trainscope HTML report \(profile-run report --html\); import its run's trace\.json instead$`},
		{"profile.pb.gz", pprofZ.String(), `^this is a pprof profile \(a run's profile\.pb\.gz: .*\); import its run's trace\.json instead \(go tool pprof reads the profile\)$`},
		{"profile.pb", pprofPlain.String(), `^this is a pprof profile`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := Load(tc.name, bytes.NewReader([]byte(tc.content)))
			var pe *ParseError
			if !errors.As(err, &pe) || pe.Path != tc.name || pe.Line != 1 || !errors.Is(err, ErrUnknownFormat) {
				t.Fatalf("%v (%T), want a ParseError at %s:1 wrapping ErrUnknownFormat", err, err, tc.name)
			}
			msg, ok := bytes.CutPrefix([]byte(err.Error()), []byte(tc.name+":1: "+ErrUnknownFormat.Error()+": "))
			if !ok || !regexp.MustCompile(tc.want).Match(msg) {
				t.Errorf("%q\nwant it to say %q", err, tc.want)
			}
		})
	}
	// Any other JSON is still read as a Kineto trace: a "schema" of
	// another program's is not trainscope's summary.
	if f := Detect([]byte(`{"schema": "other/v1", "traceEvents": []}`)); f != FormatKineto {
		t.Errorf("another schema's JSON: %v, want %v", f, FormatKineto)
	}
}
