package profiler

import (
	"context"
	"testing"
	"time"
	"unsafe"

	"github.com/trainscope/trainscope/internal/testmem"
)

// TestIngestKeepsNoRoomForALargeBatch: the batch of a large Ingest (an
// imported profile) is not kept once its sinks have consumed it.
func TestIngestKeepsNoRoomForALargeBatch(t *testing.T) {
	const n = 200_000
	p, err := New(WithCollectInterval(0), WithMaxRecords(0))
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close(context.Background())
	if err := p.AddSink(discardSink{}); err != nil {
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
	recs = nil
	after := testmem.LiveHeap()
	// The records themselves: what a batch kept for the next pass holds.
	one := uint64(n) * uint64(unsafe.Sizeof(Record{}))
	if after > before && after-before > one/10 {
		t.Errorf("the profiler holds %d bytes more after ingesting %d records (%d bytes), want under a tenth of them", after-before, n, one)
	}
}

// discardSink consumes and keeps nothing.
type discardSink struct{}

func (discardSink) Consume([]Record) {}
