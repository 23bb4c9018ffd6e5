package profiler

import (
	"context"
	"fmt"
)

// Ingest adds records made outside this profiler's recorders — a wrapped
// process's NCCL calls, an imported profile — to the same path recorded
// ranges take: the bounded store and every sink, in the next delivery,
// with the bandwidths of collectives computed from their times as for
// recorded ones (AlgBandwidth and BusBandwidth are overwritten). Times
// must be on this profiler's clock (durations since Epoch); the caller
// places them there.
//
// A record must name its range, have a rank ≥ 0, an ID ≥ 1 unique within
// its rank and source, and intervals that do not end before they start;
// the first record that does not is reported by its position, and none of
// recs is ingested. After Close, Ingest returns ErrClosed. It waits for
// the collector, which a sink stuck in Consume holds, only until ctx ends:
// then none of recs is ingested, and the error says so.
func (p *Profiler) Ingest(ctx context.Context, recs []Record) error {
	if p == nil {
		return nil
	}
	for i := range recs {
		r := &recs[i]
		switch {
		case r.Name == "":
			return fmt.Errorf("profiler: Ingest: record %d has no name", i)
		case r.Rank < 0:
			return fmt.Errorf("profiler: Ingest: record %d (%s) has rank %d", i, r.Name, r.Rank)
		case r.ID == 0:
			return fmt.Errorf("profiler: Ingest: record %d (%s) has ID 0 (IDs start at 1)", i, r.Name)
		case r.HostEnd < r.HostStart:
			return fmt.Errorf("profiler: Ingest: record %d (%s) ends on the host %v before it starts", i, r.Name, r.HostStart-r.HostEnd)
		case r.HasDevice && r.DeviceEnd < r.DeviceStart:
			return fmt.Errorf("profiler: Ingest: record %d (%s) ends on the device %v before it starts", i, r.Name, r.DeviceStart-r.DeviceEnd)
		}
	}
	if !p.lockBy(ctx, 0) {
		return fmt.Errorf("profiler: Ingest: the collector is still delivering to a sink that has not returned from Consume, so none of its %d record(s) was ingested: %w", len(recs), ctx.Err())
	}
	defer p.unlock()
	select {
	case <-p.stop:
		return ErrClosed
	default:
	}
	for _, rec := range recs {
		finishBandwidth(&rec)
		p.collected.Add(1)
		p.keepLocked(rec)
	}
	p.deliverLocked()
	return nil
}
