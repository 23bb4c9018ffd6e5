// Package chrometrace writes profiler records as a Chrome trace-event JSON
// file (the JSON Object Format: "traceEvents" and "displayTimeUnit"), the
// timeline format that the Perfetto UI (ui.perfetto.dev) and the legacy
// chrome://tracing viewer open.
//
// Each rank is a process, named "rank N (device)". Its tracks (threads)
// are:
//
//   - host: every range of the rank at its host start and end, nested as
//     the ranges were; one complete ("X") event per record;
//   - "<device> compute": the device-timed ranges (Kind device) at their
//     device times;
//   - "<device> communication": collective and point-to-point ranges at
//     their device times (ccl issues them on the process group's stream).
//
// Complete events on one track always nest properly: where ranges of one
// track would overlap without nesting (device work of two streams, two
// recorders of one rank, or the operations of one GroupStart/GroupEnd
// group, which run at once), the later one goes to an extra lane of the
// track, "host (2)", "cpu:0 compute (2)", "cpu:0 communication (2)". A
// group's calls timed with one pair of events (ccl times a group around
// its launch) share their interval and nest. Events carry the record's
// labels, collective fields and bandwidths as args, and device-timed
// records their stream ("stream", runtime.Stream.ID) and the other
// timeline's duration ("device_us" on the host event, "host_us" on the
// device event), and a host-only record on a device other than its
// rank's (the one its process is named after) that device ("device"), so
// a reader can put each record back together. A device range whose device
// work had not finished when the profiler gave up on it
// (Record.DeviceUnfinished: a kernel that hangs) is on the host track
// only, with "device_unfinished": true.
//
// Flow arrows join each Send to its matching Recv and the participants of
// each collective, bound to their device events where they have device
// times (host events otherwise), with flow_out/flow_in and a bind_id on the
// complete events themselves. The k-th Send from group rank a to group
// rank b in a process group matches the k-th Recv on b from a in that
// group; a collective's participants share its group and sequence number.
// An arrow leaves the event that starts first: Perfetto draws every arrow
// from the earlier slice, so a Recv posted before its Send points to the
// Send.
//
// Times are microseconds since the profiler's epoch with nanosecond
// precision; each is written a quarter of a nanosecond above its exact
// value, so a reader that truncates (Perfetto before v51) or rounds
// (Perfetto since v51) gets the exact nanosecond back.
package chrometrace
