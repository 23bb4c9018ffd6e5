package importer

import (
	"bytes"
	"context"
	"testing"
	"time"

	"github.com/trainscope/trainscope/exporters/chrometrace"
	"github.com/trainscope/trainscope/profiler"
	"github.com/trainscope/trainscope/runtime"
	"github.com/trainscope/trainscope/runtime/cpu"
)

// Ranges of a tag set inside a step range, recorded, written and read
// back: each returns marked outermost in its report group as the recorder
// marked it, so the imported report's group shares are the run's.
func TestTrainscopeGroupNesting(t *testing.T) {
	p, err := profiler.New(profiler.WithCollectInterval(0))
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close(context.Background())
	dev := runtime.Device{Type: runtime.CPU, Index: 0}
	r, err := p.NewRecorder(0, dev)
	if err != nil {
		t.Fatal(err)
	}
	s, err := runtime.NewStream(dev)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Destroy()
	work := func() {
		if err := cpu.Enqueue(s, func() { time.Sleep(200 * time.Microsecond) }); err != nil {
			t.Fatal(err)
		}
	}
	r.SetStep(0)
	r.StartDevice("forward", s)
	work()
	p.SetTag("opt")
	r.Start("adam")
	r.StartDevice("update", s)
	work()
	r.End()
	r.End()
	p.SetTag("")
	r.Start("loss")
	time.Sleep(50 * time.Microsecond)
	r.End()
	r.End()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := p.Flush(ctx); err != nil {
		t.Fatal(err)
	}
	orig := p.Snapshot()
	want := map[string][2]bool{} // OuterInGroup, DeviceOuterInGroup
	for _, rec := range orig {
		want[rec.Name] = [2]bool{rec.OuterInGroup, rec.DeviceOuterInGroup}
	}
	if w := want["adam"]; !w[0] {
		t.Fatalf("the recorder did not mark adam outermost in its group: %v", want)
	}
	if w := want["update"]; !w[1] {
		t.Fatalf("the recorder did not mark update's device time outermost in its group: %v", want)
	}
	var buf bytes.Buffer
	if _, err := chrometrace.Write(&buf, orig); err != nil {
		t.Fatal(err)
	}
	prof, err := Load("trace.json", &buf)
	if err != nil {
		t.Fatal(err)
	}
	if len(prof.Records) != len(orig) {
		t.Fatalf("%d records read back, %d written", len(prof.Records), len(orig))
	}
	for _, rec := range prof.Records {
		if got := [2]bool{rec.OuterInGroup, rec.DeviceOuterInGroup}; got != want[rec.Name] {
			t.Errorf("%s read back with OuterInGroup, DeviceOuterInGroup = %v, written %v", rec.Name, got, want[rec.Name])
		}
	}
	a, b := profiler.Summarize(orig), profiler.Summarize(prof.Records)
	if len(a) != len(b) {
		t.Fatalf("%d groups read back, %d written", len(b), len(a))
	}
	for i := range a {
		if a[i].Tag != b[i].Tag || a[i].HostTotal != b[i].HostTotal || a[i].DeviceTotal != b[i].DeviceTotal {
			t.Errorf("group read back %q host %v device %v, written %q host %v device %v",
				b[i].Tag, b[i].HostTotal, b[i].DeviceTotal, a[i].Tag, a[i].HostTotal, a[i].DeviceTotal)
		}
	}
}
