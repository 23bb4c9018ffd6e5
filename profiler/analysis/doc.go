// Package analysis computes, per training step and per rank, where a
// pipelined step's time went, from profiler.Record values: the busy and
// idle time of each stream (by the profiler's one definition of busy,
// profiler.BusyIntervals), the pipeline bubble of each stage and VPP
// chunk beside the schedule's ideal (p−1)/(v·m+p−1), the overlap of
// computation with communication, every collective matched across its
// ranks by group and sequence number (arrival skew, and its duration
// split into waiting for the last rank and transfer), and a straggler
// score per rank: the share of the others' waiting it caused, by arriving
// last or by holding up, through a receive or an earlier collective, the
// rank that arrived last. A pipeline without collectives is compared
// stage by stage instead (Summary.Balance): it goes at the pace of its
// slowest stage.
//
// It works offline over a list of records (Analyze) and online as a
// profiler.Sink (NewSink) that keeps only the records of steps not yet
// analysed, within a cap, and the run's totals (Summary). Records from
// several processes or hosts can be put on one clock first
// (EstimateOffsets, WithClockAlignment): all participants leave a
// collective at nearly the same instant.
//
// Bad input is said, not hidden: a step that lacks a rank, a collective
// that lacks a participant, a rank whose step range never came, records
// dropped at the cap — each is a Problem of its step, whose figures the
// run's totals then leave out.
package analysis
