package otel

import (
	"context"
	"fmt"
	"math"
	"strings"
	"testing"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/sdk/resource"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/trace"

	"github.com/trainscope/trainscope/profiler"
	"github.com/trainscope/trainscope/runtime"
)

var cuda0 = runtime.Device{Type: runtime.CUDA, Index: 0}

// stepTree is one rank's step in post-order, as the profiler delivers
// host records: step → forward (device, microbatch 1) → AllReduce.
func stepTree(rank int) []profiler.Record {
	labels := profiler.Labels{Step: 3, Microbatch: 1, Stage: int16(rank), Chunk: 0, Phase: profiler.Forward}
	ar := profiler.Record{
		ID: 3, Parent: 2, Depth: 2, Name: "AllReduce", Kind: profiler.KindCollective, Rank: rank, Device: cuda0, Labels: labels,
		HostStart: 30 * time.Microsecond, HostEnd: 40 * time.Microsecond,
		HasDevice: true, DeviceStart: 35 * time.Microsecond, DeviceEnd: 90 * time.Microsecond,
		Collective: profiler.Collective{Op: "AllReduce", Bytes: 4096, Count: 1024, DType: "float32", Peer: -1, Root: -1,
			Group: "dp0", GroupSize: 3, GroupRank: int32(rank), Seq: 7, BusFactor: 4.0 / 3},
		AlgBandwidth: 4096 / 55e-6, BusBandwidth: 4096 / 55e-6 * 4 / 3,
	}
	fwd := profiler.Record{
		ID: 2, Parent: 1, Depth: 1, Name: "forward", Kind: profiler.KindDevice, Rank: rank, Device: cuda0, Labels: labels,
		HostStart: 20 * time.Microsecond, HostEnd: 50 * time.Microsecond,
		HasDevice: true, DeviceStart: 25 * time.Microsecond, DeviceEnd: 95 * time.Microsecond, PeakMemory: 1 << 20,
	}
	step := profiler.Record{
		ID: 1, Name: "step", Kind: profiler.KindHost, Rank: rank, Device: cuda0,
		Labels:    profiler.Labels{Step: 3, Microbatch: profiler.None, Stage: int16(rank), Chunk: profiler.None},
		HostStart: 10 * time.Microsecond, HostEnd: 100 * time.Microsecond,
	}
	return []profiler.Record{ar, fwd, step}
}

func testBuilder(t *testing.T, runID string) *builder {
	t.Helper()
	base := resource.NewSchemaless(attribute.String("service.name", "test"))
	return newBuilder(runID, time.Unix(1000, 0), DefaultMaxLinks, base)
}

type spanKey struct {
	rank  int64
	id    int64
	clock string
}

func keyOf(t *testing.T, s sdktrace.ReadOnlySpan) spanKey {
	t.Helper()
	a := attrMap(s.Attributes())
	k := spanKey{rank: a[KeyRank].AsInt64(), id: a[KeyRangeID].AsInt64(), clock: a[KeyClock].AsString()}
	if k.clock == "" {
		t.Fatalf("span %s has no %s", s.Name(), KeyClock)
	}
	return k
}

func attrMap(kvs []attribute.KeyValue) map[attribute.Key]attribute.Value {
	m := map[attribute.Key]attribute.Value{}
	for _, kv := range kvs {
		m[kv.Key] = kv.Value
	}
	return m
}

func TestBuildTree(t *testing.T) {
	b := testBuilder(t, "run-a")
	var recs []profiler.Record
	for rank := range 3 {
		recs = append(recs, stepTree(rank)...)
	}
	spans := b.build(recs, nil)
	// Three records per rank, two of them device-timed.
	if len(spans) != 3*5 {
		t.Fatalf("%d spans, want 15", len(spans))
	}
	byKey := map[spanKey]sdktrace.ReadOnlySpan{}
	byID := map[trace.SpanID]sdktrace.ReadOnlySpan{}
	for _, s := range spans {
		byKey[keyOf(t, s)] = s
		if _, dup := byID[s.SpanContext().SpanID()]; dup {
			t.Fatalf("span id %s twice", s.SpanContext().SpanID())
		}
		byID[s.SpanContext().SpanID()] = s
		if !s.SpanContext().IsValid() || !s.SpanContext().IsSampled() {
			t.Errorf("%s: span context %v not valid and sampled", s.Name(), s.SpanContext())
		}
	}
	tid := spans[0].SpanContext().TraceID()
	epoch := time.Unix(1000, 0)
	for rank := int64(0); rank < 3; rank++ {
		step, fwd, ar := byKey[spanKey{rank, 1, "host"}], byKey[spanKey{rank, 2, "host"}], byKey[spanKey{rank, 3, "host"}]
		fwdDev, arDev := byKey[spanKey{rank, 2, "device"}], byKey[spanKey{rank, 3, "device"}]
		for _, s := range []sdktrace.ReadOnlySpan{step, fwd, ar, fwdDev, arDev} {
			if s == nil {
				t.Fatalf("rank %d: a span is missing: %v", rank, byKey)
			}
			if s.SpanContext().TraceID() != tid {
				t.Errorf("rank %d %s: trace %s, want every span of step 3 in %s", rank, s.Name(), s.SpanContext().TraceID(), tid)
			}
		}
		parents := []struct {
			child, parent sdktrace.ReadOnlySpan
		}{{fwd, step}, {ar, fwd}, {fwdDev, fwd}, {arDev, ar}}
		for _, p := range parents {
			if p.child.Parent().SpanID() != p.parent.SpanContext().SpanID() {
				t.Errorf("rank %d: %s's parent is %v, want %s", rank, p.child.Name(), byID[p.child.Parent().SpanID()], p.parent.Name())
			}
		}
		if step.Parent().IsValid() {
			t.Errorf("rank %d: step has parent %v", rank, step.Parent())
		}
		if fwdDev.Name() != "forward [device]" || arDev.Name() != "AllReduce [device]" {
			t.Errorf("device span names %q, %q", fwdDev.Name(), arDev.Name())
		}
		times := []struct {
			s          sdktrace.ReadOnlySpan
			start, end time.Duration
		}{
			{step, 10 * time.Microsecond, 100 * time.Microsecond},
			{fwd, 20 * time.Microsecond, 50 * time.Microsecond},
			{fwdDev, 25 * time.Microsecond, 95 * time.Microsecond},
			{arDev, 35 * time.Microsecond, 90 * time.Microsecond},
		}
		for _, c := range times {
			if !c.s.StartTime().Equal(epoch.Add(c.start)) || !c.s.EndTime().Equal(epoch.Add(c.end)) {
				t.Errorf("%s: %v–%v, want epoch+%v–%v", c.s.Name(), c.s.StartTime(), c.s.EndTime(), c.start, c.end)
			}
		}
		res := attrMap(step.Resource().Attributes())
		if got := res["service.instance.id"].AsString(); got != "run-a/rank-"+string(rune('0'+rank)) {
			t.Errorf("rank %d: service.instance.id %q", rank, got)
		}
		if res["service.name"].AsString() != "test" || res[KeyRank].AsInt64() != rank {
			t.Errorf("rank %d: resource %v", rank, res)
		}

		// The collective links to the two other ranks' AllReduce spans.
		links := ar.Links()
		if len(links) != 2 || ar.DroppedLinks() != 0 {
			t.Fatalf("rank %d: %d links (%d dropped), want 2", rank, len(links), ar.DroppedLinks())
		}
		seen := map[int64]bool{}
		for _, l := range links {
			peer := byID[l.SpanContext.SpanID()]
			if peer == nil || l.SpanContext.TraceID() != tid {
				t.Fatalf("rank %d: link to %v, which is no span of this batch", rank, l.SpanContext)
			}
			k := keyOf(t, peer)
			if peer.Name() != "AllReduce" || k.clock != "host" || k.rank == rank {
				t.Errorf("rank %d: link to %s on rank %d (%s)", rank, peer.Name(), k.rank, k.clock)
			}
			seen[k.rank] = true
		}
		if len(seen) != 2 {
			t.Errorf("rank %d links to ranks %v", rank, seen)
		}
		if len(fwd.Links()) != 0 || len(arDev.Links()) != 0 {
			t.Errorf("links on non-collective spans")
		}
	}
}

func TestBuildAttributes(t *testing.T) {
	b := testBuilder(t, "run-a")
	recs := stepTree(1)
	recs[2].Tag = "warmup"
	spans := b.build(recs, nil)
	get := func(name string) map[attribute.Key]attribute.Value {
		for _, s := range spans {
			if s.Name() == name {
				return attrMap(s.Attributes())
			}
		}
		t.Fatalf("no span %q", name)
		return nil
	}
	ar := get("AllReduce")
	want := map[attribute.Key]attribute.Value{
		KeyRank:       attribute.IntValue(1),
		KeyRangeID:    attribute.Int64Value(3),
		KeyKind:       attribute.StringValue("collective"),
		KeyClock:      attribute.StringValue("host"),
		KeyDevice:     attribute.StringValue("cuda:0"),
		KeyStep:       attribute.Int64Value(3),
		KeyStage:      attribute.Int64Value(1),
		KeyChunk:      attribute.Int64Value(0),
		KeyMicrobatch: attribute.Int64Value(1),
		KeyPhase:      attribute.StringValue("forward"),
		KeyOp:         attribute.StringValue("AllReduce"),
		KeyBytes:      attribute.Int64Value(4096),
		KeyCount:      attribute.Int64Value(1024),
		KeyDType:      attribute.StringValue("float32"),
		KeyGroup:      attribute.StringValue("dp0"),
		KeyGroupSize:  attribute.Int64Value(3),
		KeyGroupRank:  attribute.Int64Value(1),
		KeySeq:        attribute.Int64Value(7),
		KeyAlgBW:      attribute.Float64Value(4096 / 55e-6),
		KeyBusBW:      attribute.Float64Value(4096 / 55e-6 * 4 / 3),
	}
	if len(ar) != len(want) {
		t.Errorf("AllReduce has %d attributes, want %d: %v", len(ar), len(want), ar)
	}
	for k, v := range want {
		if ar[k] != v {
			t.Errorf("AllReduce %s = %v, want %v", k, ar[k].String(), v.String())
		}
	}
	arDev := get("AllReduce [device]")
	if len(arDev) != 3 || arDev[KeyClock].AsString() != "device" || arDev[KeyRank].AsInt64() != 1 || arDev[KeyRangeID].AsInt64() != 3 {
		t.Errorf("AllReduce [device] attributes %v, want only clock, rank and range id", arDev)
	}
	if get("forward")[KeyPeakMemory].AsInt64() != 1<<20 {
		t.Errorf("forward: no peak memory")
	}
	step := get("step")
	for _, k := range []attribute.Key{KeyChunk, KeyMicrobatch, KeyPhase, KeyOp, KeyPeakMemory} {
		if _, ok := step[k]; ok {
			t.Errorf("step carries unset %s = %v", k, step[k].String())
		}
	}
	if step[KeyTag].AsString() != "warmup" || step[KeyStep].AsInt64() != 3 {
		t.Errorf("step attributes %v", step)
	}
}

func TestBuildP2PAndRunLevel(t *testing.T) {
	b := testBuilder(t, "run-a")
	recs := []profiler.Record{
		{ID: 1, Name: "setup", Rank: 0, Labels: profiler.NoLabels, HostStart: 1, HostEnd: 2},
		{ID: 2, Name: "Send", Kind: profiler.KindP2P, Rank: 0, Labels: profiler.Labels{Step: 0, Microbatch: profiler.None, Stage: profiler.None, Chunk: profiler.None},
			HostStart: 10 * time.Microsecond, HostEnd: 12 * time.Microsecond, HasDevice: true, DeviceStart: 20 * time.Microsecond, DeviceEnd: 70 * time.Microsecond,
			Collective: profiler.Collective{Op: "Send", Bytes: 8, Peer: 1, Root: -1, Group: "pp0", GroupSize: 2, Seq: 0, TransferEnd: 570 * time.Microsecond}},
		{ID: 3, Name: "setup", Rank: 1, Labels: profiler.NoLabels, HostStart: 1, HostEnd: 2},
	}
	spans := b.build(recs, nil) // setup, Send, Send [device], setup
	if len(spans) != 4 || spans[2].Name() != "Send"+DeviceSuffix {
		t.Fatalf("%d spans, the third %q", len(spans), spans[min(2, len(spans)-1)].Name())
	}
	if spans[0].SpanContext().TraceID() != spans[3].SpanContext().TraceID() {
		t.Errorf("records without a step are not in one run-level trace")
	}
	if spans[0].SpanContext().TraceID() == spans[1].SpanContext().TraceID() {
		t.Errorf("step 0 shares the run-level trace")
	}
	send := attrMap(spans[1].Attributes())
	if send[KeyPeer].AsInt64() != 1 || send[KeyOp].AsString() != "Send" {
		t.Errorf("Send attributes %v", send)
	}
	if _, ok := send[KeyRoot]; ok {
		t.Errorf("Send has ccl.root")
	}
	// The transfer ended 500 µs after the kernel's 70 µs end.
	if got := send[KeyTransferEnd].AsFloat64(); math.Abs(got-500e-6) > 1e-12 {
		t.Errorf("Send %s = %v, want 500e-6", KeyTransferEnd, got)
	}
	if len(spans[1].Links()) != 0 {
		t.Errorf("Send has links: point-to-point calls are not matched by sequence number")
	}
}

func TestIDsDeterministic(t *testing.T) {
	recs := stepTree(0)
	a := testBuilder(t, "run-a").build(recs, nil)
	a2 := testBuilder(t, "run-a").build(recs, nil)
	b := testBuilder(t, "run-b").build(recs, nil)
	for i := range a {
		if !a[i].SpanContext().Equal(a2[i].SpanContext()) || !a[i].Parent().Equal(a2[i].Parent()) {
			t.Errorf("%s: ids differ between two builds of one run", a[i].Name())
		}
		if a[i].SpanContext().SpanID() == b[i].SpanContext().SpanID() || a[i].SpanContext().TraceID() == b[i].SpanContext().TraceID() {
			t.Errorf("%s: ids equal across runs", a[i].Name())
		}
	}
	// Distinct keys give distinct span ids: a collision would merge spans.
	s := newIDs("run-a")
	seen := map[trace.SpanID]bool{}
	for rank := range 64 {
		for id := uint64(1); id <= 2000; id++ {
			for _, dev := range []bool{false, true} {
				sid := s.spanID(rank, id, dev)
				if seen[sid] {
					t.Fatalf("span id collision at rank %d id %d", rank, id)
				}
				seen[sid] = true
			}
		}
	}
}

func TestPeerLinksBounded(t *testing.T) {
	base := resource.NewSchemaless()
	for _, c := range []struct{ size, self, max, want int }{
		{2, 0, 32, 1}, {2, 1, 32, 1}, {8, 3, 32, 7}, {8, 3, 4, 4}, {100, 0, 32, 32}, {8, 0, -1, 0},
	} {
		b := newBuilder("r", time.Unix(0, 0), c.max, base)
		r := profiler.Record{Kind: profiler.KindCollective, Collective: profiler.Collective{Group: "g", GroupSize: int32(c.size), GroupRank: int32(c.self), Seq: 1}}
		links, dropped := b.peerLinks(trace.TraceID{1}, &r)
		if len(links) != c.want || dropped != c.size-1-c.want {
			t.Errorf("%+v: %d links, %d dropped", c, len(links), dropped)
		}
		seen := map[trace.SpanID]bool{b.spanID(&r): true}
		for _, l := range links {
			if seen[l.SpanContext.SpanID()] {
				t.Errorf("%+v: link to itself or twice", c)
			}
			seen[l.SpanContext.SpanID()] = true
		}
	}
}

func TestResource(t *testing.T) {
	epoch := time.Unix(1, 0)
	cases := []struct {
		name      string
		env       map[string]string
		cfg       Config
		wantName  string
		wantExtra map[string]string
	}{
		{name: "default", wantName: "profile-run"},
		{name: "env", env: map[string]string{"OTEL_SERVICE_NAME": "from-env", "OTEL_RESOURCE_ATTRIBUTES": "team=ml,service.name=ignored"},
			wantName: "from-env", wantExtra: map[string]string{"team": "ml"}},
		{name: "resource attributes name", env: map[string]string{"OTEL_RESOURCE_ATTRIBUTES": "service.name=attr"}, wantName: "attr"},
		{name: "config wins", env: map[string]string{"OTEL_SERVICE_NAME": "from-env"}, cfg: Config{ServiceName: "mine",
			ResourceAttributes: []attribute.KeyValue{attribute.String("cluster", "a")}}, wantName: "mine", wantExtra: map[string]string{"cluster": "a"}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			t.Setenv("OTEL_SERVICE_NAME", "")
			t.Setenv("OTEL_RESOURCE_ATTRIBUTES", "")
			for k, v := range c.env {
				t.Setenv(k, v)
			}
			cfg := c.cfg
			cfg.Epoch, cfg.RunID = epoch, "run-r"
			res, err := baseResource(context.Background(), cfg)
			if err != nil {
				t.Fatal(err)
			}
			b := newBuilder("run-r", epoch, 1, res)
			a := attrMap(b.resource(2).Attributes())
			if a["service.name"].AsString() != c.wantName {
				t.Errorf("service.name %q, want %q", a["service.name"].AsString(), c.wantName)
			}
			if a["service.instance.id"].AsString() != "run-r/rank-2" || a[KeyRunID].AsString() != "run-r" || a[KeyRank].AsInt64() != 2 {
				t.Errorf("resource %v", a)
			}
			if a["host.name"].AsString() == "" || a["process.pid"].AsInt64() == 0 {
				t.Errorf("no host.name or process.pid: %v", a)
			}
			for k, v := range c.wantExtra {
				if a[attribute.Key(k)].AsString() != v {
					t.Errorf("%s = %q, want %q", k, a[attribute.Key(k)].AsString(), v)
				}
			}
		})
	}
	t.Run("bad env", func(t *testing.T) {
		t.Setenv("OTEL_RESOURCE_ATTRIBUTES", "no-equals-sign")
		if _, err := New(context.Background(), nil, Config{Epoch: epoch}); err == nil {
			t.Errorf("New accepted OTEL_RESOURCE_ATTRIBUTES=no-equals-sign")
		}
	})
}

// A run id that is not UTF-8 reaches the resource with each bad byte
// replaced by U+FFFD, as a range's name does; the ids still derive from
// the run id as given, so they agree with every other exporter's.
func TestResourceNotUTF8(t *testing.T) {
	t.Setenv("OTEL_SERVICE_NAME", "")
	t.Setenv("OTEL_RESOURCE_ATTRIBUTES", "")
	epoch := time.Unix(1, 0)
	res, err := baseResource(context.Background(), Config{Epoch: epoch, RunID: "r\xe9sum\xe9", ServiceName: "svc-\xff"})
	if err != nil {
		t.Fatal(err)
	}
	b := newBuilder("r\xe9sum\xe9", epoch, 1, res)
	a := attrMap(b.resource(2).Attributes())
	if got := a[KeyRunID].AsString(); got != "r\uFFFDsum\uFFFD" {
		t.Errorf("%s = %q", KeyRunID, got)
	}
	if got := a["service.instance.id"].AsString(); got != "r\uFFFDsum\uFFFD/rank-2" {
		t.Errorf("service.instance.id = %q", got)
	}
	if got := a["service.name"].AsString(); got != "svc-\uFFFD" {
		t.Errorf("service.name = %q", got)
	}
	if b.ids != newIDs("r\xe9sum\xe9") || b.ids == newIDs("r\uFFFDsum\uFFFD") {
		t.Errorf("the ids do not derive from the run id as given")
	}
}

// A cut-short range's span has status Error saying so; the others keep an
// unset status.
func TestBuildCutShortStatus(t *testing.T) {
	b := testBuilder(t, "run-a")
	recs := stepTree(1)
	cut := 0
	for i := range recs {
		if recs[i].Name == profiler.StepName {
			recs[i].CutShort = true
			cut++
		}
	}
	if cut != 1 {
		t.Fatalf("%d step ranges in the tree", cut)
	}
	for _, s := range b.build(recs, nil) {
		st := s.Status()
		if s.Name() == profiler.StepName {
			if st.Code != codes.Error || !strings.Contains(st.Description, "cut short") {
				t.Errorf("step span status %+v, want Error saying it was cut short", st)
			}
		} else if st.Code != codes.Unset {
			t.Errorf("%s: status %+v, want unset", s.Name(), st)
		}
	}
}

// TestBuildHostlessKernel: a wrapped job's kernel (CUPTI) has no host
// range: one span on the device clock, not a zero-length host span with
// a device child.
func TestBuildHostlessKernel(t *testing.T) {
	b := testBuilder(t, "run-k")
	k := profiler.Record{ID: 9, Name: "cutlass::Kernel2", Kind: profiler.KindKernel, Rank: 1,
		Device: runtime.Device{Type: runtime.CUDA, Index: 0}, Stream: 7, Labels: profiler.NoLabels,
		HostStart: 50 * time.Microsecond, HostEnd: 50 * time.Microsecond,
		HasDevice: true, DeviceStart: 50 * time.Microsecond, DeviceEnd: 80 * time.Microsecond}
	k.Step = 2
	spans := b.build([]profiler.Record{k}, nil)
	if len(spans) != 1 {
		t.Fatalf("%d spans, want 1", len(spans))
	}
	s := spans[0]
	epoch := time.Unix(1000, 0)
	if s.Name() != "cutlass::Kernel2" || !s.StartTime().Equal(epoch.Add(50*time.Microsecond)) || !s.EndTime().Equal(epoch.Add(80*time.Microsecond)) {
		t.Errorf("span %s %v–%v", s.Name(), s.StartTime(), s.EndTime())
	}
	if got := keyOf(t, s); got != (spanKey{1, 9, ClockDevice}) {
		t.Errorf("span key %+v, want rank 1, id 9, device clock", got)
	}
}

// TestSameNamedCommunicatorsSpans: a collective's span id is shared by its
// ranks (so that their spans link), and collectives of two communicators
// with one name, the same sequence number and group rank — two of
// Megatron-LM's data-parallel groups — get different ones; a rank's link
// points at its own communicator's peer.
func TestSameNamedCommunicatorsSpans(t *testing.T) {
	b := testBuilder(t, "run")
	coll := func(rank int, gid uint64, grank int32) *profiler.Record {
		return &profiler.Record{Kind: profiler.KindCollective, Rank: rank,
			Collective: profiler.Collective{Op: "AllReduce", Group: "dp", GroupID: gid, GroupSize: 2, GroupRank: grank, Seq: 4}}
	}
	a0, a1 := coll(0, 0xa, 0), coll(2, 0xa, 1)
	c0, c1 := coll(1, 0xc, 0), coll(3, 0xc, 1)
	if b.spanID(a0) == b.spanID(c0) || b.spanID(a1) == b.spanID(c1) {
		t.Fatal("collectives of two communicators named alike share a span id")
	}
	links, _ := b.peerLinks(trace.TraceID{1}, a0)
	if len(links) != 1 || links[0].SpanContext.SpanID() != b.spanID(a1) {
		t.Errorf("rank 0's link %v, want its communicator's peer %v", links, b.spanID(a1))
	}
	// The span says which communicator, as the trace does.
	if got := attrMap(b.appendAttrs(nil, a0))[KeyGroupID].AsString(); got != "a" {
		t.Errorf("%s = %q, want \"a\"", KeyGroupID, got)
	}
	// Without a communicator id, the name alone: as before.
	n0, n1 := coll(0, 0, 0), coll(1, 0, 0)
	if b.spanID(n0) != b.spanID(n1) {
		t.Error("one name, no communicator id: the span ids differ")
	}
}

// The analysis span of step s on rank r took the id of record s's host
// span on rank r (a flag bit of its key fell outside the bits the key
// keeps): in a step holding that record the trace had two spans of one
// id. Now no record of the step's ranks shares an analysis span's id.
func TestAnalysisSpanIDsApartFromRecords(t *testing.T) {
	b := testBuilder(t, "run")
	const step = 1010
	var recs []profiler.Record
	for rank := range 2 {
		for id := uint64(1); id <= 2000; id++ {
			recs = append(recs, profiler.Record{ID: id, Rank: rank, Name: "r", Labels: profiler.Labels{Step: step}, HostStart: time.Duration(id), HostEnd: time.Duration(id + 1)})
		}
	}
	ids := map[trace.SpanID]string{}
	for _, s := range b.build(recs, nil) {
		ids[s.SpanContext().SpanID()] = s.Name()
	}
	var q []analysisSpan
	for rank := range 2 {
		q = append(q, analysisSpan{rank: rank, step: step, stepRange: 1, end: time.Millisecond})
	}
	for _, s := range b.analysisSpans(q, nil) {
		if name, ok := ids[s.SpanContext().SpanID()]; ok {
			t.Errorf("analysis span %v has the id of a record's span %q", s.SpanContext().SpanID(), name)
		}
		ids[s.SpanContext().SpanID()] = s.Name()
	}
	if len(ids) != 2*2000+2 {
		t.Errorf("%d distinct span ids, want %d", len(ids), 2*2000+2)
	}
}

// Names that never repeat keep the builder's caches bounded.
func TestBuilderCachesBounded(t *testing.T) {
	b := testBuilder(t, "run")
	for i := range 3 * maxCached {
		name := fmt.Sprintf("matmul step %d", i)
		if got := b.deviceName(name); got != name+DeviceSuffix {
			t.Fatalf("deviceName(%q) = %q", name, got)
		}
		if got := b.groupHash(name); got != groupHash(name) {
			t.Fatalf("groupHash(%q) differs from the uncached hash", name)
		}
	}
	if len(b.deviceNames) > maxCached || len(b.groups) > maxCached {
		t.Errorf("caches hold %d device names and %d groups, want at most %d each", len(b.deviceNames), len(b.groups), maxCached)
	}
}

// The spans' scope carries trainscope's version: a test binary of this
// module, built from a checkout, is the main module at "(devel)".
func TestScopeVersion(t *testing.T) {
	b := newBuilder("run", time.Unix(0, 0), 0, resource.Empty())
	if b.scope.Name != "github.com/trainscope/trainscope/exporters/otel" || b.scope.Version != "(devel)" {
		t.Errorf("scope %+v, want this package at (devel)", b.scope)
	}
}
