package otel

import (
	"strconv"
	"strings"
	"time"
	"unicode/utf8"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/sdk/instrumentation"
	"go.opentelemetry.io/otel/sdk/resource"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/trace"

	"github.com/trainscope/trainscope/internal/buildinfo"
	"github.com/trainscope/trainscope/profiler"
	"github.com/trainscope/trainscope/runtime"
)

// Attribute keys. Every span carries the training.* keys that apply (an
// unset label, profiler.None, is left out); collective and point-to-point
// spans add the ccl.* keys. docs/otel.md lists them with their types.
const (
	KeyRank       = attribute.Key("training.rank")
	KeyRangeID    = attribute.Key("training.range_id")
	KeyKind       = attribute.Key("training.kind")
	KeyClock      = attribute.Key("training.clock")
	KeyDevice     = attribute.Key("training.device")
	KeyStep       = attribute.Key("training.step")
	KeyStage      = attribute.Key("training.stage")
	KeyChunk      = attribute.Key("training.chunk")
	KeyMicrobatch = attribute.Key("training.microbatch")
	KeyPhase      = attribute.Key("training.phase")
	KeyTag        = attribute.Key("training.tag")
	KeyPeakMemory = attribute.Key("training.device.memory.peak")
	KeyRunID      = attribute.Key("training.run_id")

	KeyOp    = attribute.Key("ccl.op")
	KeyBytes = attribute.Key("ccl.bytes")
	KeyCount = attribute.Key("ccl.count")
	KeyDType = attribute.Key("ccl.dtype")
	KeyPeer  = attribute.Key("ccl.peer")
	KeyRoot  = attribute.Key("ccl.root")
	KeyGroup = attribute.Key("ccl.group")
	// KeyGroupID is the communicator, as hexadecimal text, where
	// communicators share a name (profiler.Collective.GroupID).
	KeyGroupID   = attribute.Key("ccl.group_id")
	KeyGroupSize = attribute.Key("ccl.group_size")
	KeyGroupRank = attribute.Key("ccl.group_rank")
	KeySeq       = attribute.Key("ccl.seq")
	KeyAlgBW     = attribute.Key("ccl.algbw")
	KeyBusBW     = attribute.Key("ccl.busbw")
	// KeyTransferEnd is, for a p2p or an all-to-all over a network
	// transport, how long after its device span the transfer ended
	// (NCCL's proxy), in seconds; negative when before.
	KeyTransferEnd = attribute.Key("ccl.transfer_end_after_device")
)

// Values of training.clock: which clock a span's start and end come from.
const (
	ClockHost   = "host"
	ClockDevice = "device"
)

// DeviceSuffix ends the name of the child span that holds a device-timed
// range's device interval: "forward" has a child "forward [device]".
const DeviceSuffix = " [device]"

// scopeName is the instrumentation scope of every span.
const scopeName = "github.com/trainscope/trainscope/exporters/otel"

// maxAttrs bounds the attributes of one span: the training.* keys and the
// ccl.* keys together.
const maxAttrs = 26

// deviceAttrs is the number of attributes of a device span.
const deviceAttrs = 3

// builder turns records into spans. It is used by one goroutine at a time
// (the exporter's), so its caches need no lock.
type builder struct {
	ids      ids
	epoch    time.Time
	maxLinks int
	base     *resource.Resource
	runID    string
	scope    instrumentation.Scope

	resources   map[int]*resource.Resource
	devices     map[runtime.Device]string
	groups      map[string]uint64
	deviceNames map[string]string
}

func newBuilder(runID string, epoch time.Time, maxLinks int, base *resource.Resource) *builder {
	return &builder{
		ids:         newIDs(runID),
		epoch:       epoch,
		maxLinks:    maxLinks,
		base:        base,
		runID:       runID,
		scope:       instrumentation.Scope{Name: scopeName, Version: buildinfo.Version()},
		resources:   map[int]*resource.Resource{},
		devices:     map[runtime.Device]string{},
		groups:      map[string]uint64{},
		deviceNames: map[string]string{},
	}
}

// spansOf is the number of spans a record becomes: one, and a second for
// its device interval when it has one.
func spansOf(r *profiler.Record) int {
	if r.HasDevice && !hostless(r) {
		return 2
	}
	return 1
}

// hostless reports a traced kernel with no host range of its own (a
// wrapped job's, through CUPTI): it becomes one span, on the device
// clock, not a zero-length host span with a device child.
func hostless(r *profiler.Record) bool {
	return r.Kind == profiler.KindKernel && r.HasDevice && r.HostEnd == r.HostStart
}

// build appends the spans of recs to out. The attributes of the whole
// batch share one allocation.
func (b *builder) build(recs []profiler.Record, out []sdktrace.ReadOnlySpan) []sdktrace.ReadOnlySpan {
	n := 0
	for i := range recs {
		n += spansOf(&recs[i])
	}
	slab := make([]attribute.KeyValue, 0, len(recs)*maxAttrs+(n-len(recs))*deviceAttrs)
	spans := make([]span, n)
	for i := range recs {
		r := &recs[i]
		start := len(slab)
		slab = b.appendAttrs(slab, r)
		attrs := slab[start:len(slab):len(slab)]

		tid := b.ids.traceID(r.Step)
		host := &spans[0]
		spans = spans[1:]
		*host = span{
			name:     utf8Text(r.Name),
			sc:       spanContext(tid, b.spanID(r)),
			start:    b.epoch.Add(r.HostStart),
			end:      b.epoch.Add(r.HostEnd),
			attrs:    attrs,
			cutShort: r.CutShort,
			res:      b.resource(r.Rank),
			scope:    &b.scope,
		}
		if r.Parent != 0 {
			host.parent = spanContext(tid, b.ids.spanID(r.Rank, r.Parent, false))
		} else if r.Step < profiler.None {
			// A cycle's outermost records hang from its rank's cycle span.
			host.parent = spanContext(tid, b.ids.analysisSpanID(r.Rank, r.Step))
		}
		if r.Kind == profiler.KindCollective && r.Collective.Group != "" {
			host.links, host.droppedLinks = b.peerLinks(tid, r)
		}
		if hostless(r) {
			host.start, host.end = b.epoch.Add(r.DeviceStart), b.epoch.Add(r.DeviceEnd)
			attrs[len(attrs)-1] = KeyClock.String(ClockDevice) // appendAttrs ends with the clock
			out = append(out, host)
			continue
		}
		out = append(out, host)

		if r.HasDevice {
			// The device span is a timing child: its parent holds every
			// label, so it carries only what identifies it. Each attribute
			// costs the OTLP encoder three messages, on both ends.
			start := len(slab)
			slab = append(slab, attrs[0], attrs[1], KeyClock.String(ClockDevice))
			dev := &spans[0]
			spans = spans[1:]
			*dev = span{
				name:   b.deviceName(r.Name),
				sc:     spanContext(tid, b.ids.spanID(r.Rank, r.ID, true)),
				parent: host.sc,
				start:  b.epoch.Add(r.DeviceStart),
				end:    b.epoch.Add(r.DeviceEnd),
				attrs:  slab[start:len(slab):len(slab)],
				res:    host.res,
				scope:  &b.scope,
			}
			out = append(out, dev)
		}
	}
	return out
}

// spanID is the id of a record's own (host) span.
func (b *builder) spanID(r *profiler.Record) trace.SpanID {
	if r.Kind == profiler.KindCollective && r.Collective.Group != "" {
		return b.ids.collectiveSpanID(b.collGroup(&r.Collective), r.Collective.Seq, r.Collective.GroupRank)
	}
	return b.ids.spanID(r.Rank, r.ID, false)
}

// peerLinks links a collective's span to the spans of the same collective
// on the other ranks of its group, nearest group ranks first (in ring
// order), at most maxLinks; it returns how many were left out.
func (b *builder) peerLinks(tid trace.TraceID, r *profiler.Record) ([]sdktrace.Link, int) {
	c := &r.Collective
	n := int(c.GroupSize)
	if n < 2 || b.maxLinks < 0 {
		return nil, max(n-1, 0)
	}
	want := min(n-1, b.maxLinks)
	links := make([]sdktrace.Link, 0, want)
	gh := b.collGroup(c)
	self := int(c.GroupRank)
	add := func(peer int) {
		if len(links) < want {
			links = append(links, sdktrace.Link{SpanContext: spanContext(tid, b.ids.collectiveSpanID(gh, c.Seq, int32(peer)))})
		}
	}
	for d := 1; d <= n/2 && len(links) < want; d++ {
		add((self + d) % n)
		if back := (self - d + n) % n; back != (self+d)%n {
			add(back)
		}
	}
	return links, n - 1 - len(links)
}

// appendAttrs appends a record's attributes; rank and range id first, which
// the device span shares.
func (b *builder) appendAttrs(a []attribute.KeyValue, r *profiler.Record) []attribute.KeyValue {
	a = append(a,
		KeyRank.Int(r.Rank),
		KeyRangeID.Int64(int64(r.ID)),
		KeyKind.String(r.Kind.String()),
		KeyDevice.String(b.deviceString(r.Device)),
	)
	if k, ok := cycleOf(r.Step); ok {
		a = append(a, KeyCycle.Int64(k))
	} else if r.Step != profiler.None {
		a = append(a, KeyStep.Int64(int64(r.Step)))
	}
	if r.Stage != profiler.None {
		a = append(a, KeyStage.Int64(int64(r.Stage)))
	}
	if r.Chunk != profiler.None {
		a = append(a, KeyChunk.Int64(int64(r.Chunk)))
	}
	if r.Microbatch != profiler.None {
		a = append(a, KeyMicrobatch.Int64(int64(r.Microbatch)))
	}
	if r.Phase != profiler.PhaseNone {
		a = append(a, KeyPhase.String(r.Phase.String()))
	}
	if r.Tag != "" {
		a = append(a, KeyTag.String(utf8Text(r.Tag)))
	}
	if r.PeakMemory > 0 {
		a = append(a, KeyPeakMemory.Int64(r.PeakMemory))
	}
	if r.Kind == profiler.KindCollective || r.Kind == profiler.KindP2P {
		c := &r.Collective
		a = append(a,
			KeyOp.String(utf8Text(c.Op)),
			KeyBytes.Int64(c.Bytes),
			KeyCount.Int64(c.Count),
			KeyDType.String(utf8Text(c.DType)),
			KeyGroup.String(utf8Text(c.Group)),
			KeyGroupSize.Int64(int64(c.GroupSize)),
			KeyGroupRank.Int64(int64(c.GroupRank)),
			KeySeq.Int64(int64(c.Seq)),
			KeyAlgBW.Float64(r.AlgBandwidth),
			KeyBusBW.Float64(r.BusBandwidth),
		)
		if c.GroupID != 0 {
			a = append(a, KeyGroupID.String(strconv.FormatUint(c.GroupID, 16)))
		}
		if c.Peer >= 0 {
			a = append(a, KeyPeer.Int64(int64(c.Peer)))
		}
		if c.Root >= 0 {
			a = append(a, KeyRoot.Int64(int64(c.Root)))
		}
		if c.TransferEnd != 0 && r.HasDevice {
			a = append(a, KeyTransferEnd.Float64((c.TransferEnd - r.DeviceEnd).Seconds()))
		}
	}
	return append(a, KeyClock.String(ClockHost))
}

// resource is the rank's resource: the process-wide one plus the rank's
// service.instance.id and training.rank.
func (b *builder) resource(rank int) *resource.Resource {
	if res, ok := b.resources[rank]; ok {
		return res
	}
	res, err := resource.Merge(b.base, resource.NewSchemaless(
		attribute.String("service.instance.id", utf8Text(instanceID(b.runID, rank))),
		KeyRank.Int(rank),
	))
	if err != nil {
		// Merge fails only on conflicting schema URLs, and the rank's
		// part has none.
		res = b.base
	}
	b.resources[rank] = res
	return res
}

// instanceID is service.instance.id of a rank: unique per run and rank.
func instanceID(runID string, rank int) string {
	return runID + "/rank-" + strconv.Itoa(rank)
}

func (b *builder) deviceString(d runtime.Device) string {
	s, ok := b.devices[d]
	if !ok {
		s = d.String()
		b.devices[d] = s
	}
	return s
}

// utf8Text is s as valid UTF-8. OTLP's protobuf strings must be: one
// name that is not (from an imported file, say) fails the export of its
// whole batch.
func utf8Text(s string) string {
	if utf8.ValidString(s) {
		return s
	}
	return strings.ToValidUTF8(s, "\uFFFD")
}

// maxCached bounds the builder's caches of names and group hashes: they
// save work for the names a run repeats, and a run whose names never
// repeat ("matmul step N") must not grow them without end. A full cache
// starts over.
const maxCached = 4096

func (b *builder) deviceName(name string) string {
	s, ok := b.deviceNames[name]
	if !ok {
		s = utf8Text(name) + DeviceSuffix
		if len(b.deviceNames) >= maxCached {
			clear(b.deviceNames)
		}
		b.deviceNames[name] = s
	}
	return s
}

func (b *builder) groupHash(g string) uint64 {
	h, ok := b.groups[g]
	if !ok {
		h = groupHash(g)
		if len(b.groups) >= maxCached {
			clear(b.groups)
		}
		b.groups[g] = h
	}
	return h
}

// collGroup identifies c's group in span ids: its name's hash, mixed with
// its communicator where one is given (names may repeat).
func (b *builder) collGroup(c *profiler.Collective) uint64 {
	h := b.groupHash(c.Group)
	if id := c.GroupID; id != 0 {
		// splitmix64's finaliser: communicators that differ in a bit
		// differ everywhere.
		id ^= id >> 30
		id *= 0xbf58476d1ce4e5b9
		id ^= id >> 27
		id *= 0x94d049bb133111eb
		id ^= id >> 31
		h ^= id
	}
	return h
}

func spanContext(tid trace.TraceID, sid trace.SpanID) trace.SpanContext {
	return trace.NewSpanContext(trace.SpanContextConfig{TraceID: tid, SpanID: sid, TraceFlags: trace.FlagsSampled})
}
