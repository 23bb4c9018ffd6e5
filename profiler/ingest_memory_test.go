package profiler

import (
	"context"
	"runtime"
	"testing"
	"time"
	"unsafe"

	"github.com/trainscope/trainscope/internal/testmem"
)

// TestIngestKeepsNoRoomForALargeBatch: a large Ingest (an imported
// profile) goes to the sinks in parts, and what the profiler keeps for
// its next pass is far smaller than the records ingested: with the
// records still alive, the heap grows by under a quarter of their size.
func TestIngestKeepsNoRoomForALargeBatch(t *testing.T) {
	const n = 200_000
	p, err := New(WithCollectInterval(0), WithMaxRecords(0))
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close(context.Background())
	var sink countSink
	if err := p.AddSink(&sink); err != nil {
		t.Fatal(err)
	}
	recs := make([]Record, n)
	for i := range recs {
		recs[i] = Record{ID: uint64(i + 1), Name: "r", HostStart: time.Duration(i), HostEnd: time.Duration(i + 1)}
	}
	before := testmem.LiveHeap()
	if err := p.Ingest(context.Background(), recs); err != nil {
		t.Fatal(err)
	}
	after := testmem.LiveHeap()
	runtime.KeepAlive(recs)
	// Sink's documented bound on a batch.
	if sink.records != n || sink.batches < 2 || sink.largest > 32768 {
		t.Errorf("the sink had %d records in %d batches, the largest of %d; want %d in several of at most 32768", sink.records, sink.batches, sink.largest, n)
	}
	one := uint64(n) * uint64(unsafe.Sizeof(Record{}))
	if after > before && after-before > one/4 {
		t.Errorf("the profiler holds %d bytes more after ingesting %d records (%d bytes), want under a quarter of them", after-before, n, one)
	}
}

// countSink counts what it consumes and keeps nothing.
type countSink struct{ records, batches, largest int }

func (s *countSink) Consume(b []Record) {
	s.records += len(b)
	s.batches++
	s.largest = max(s.largest, len(b))
}
