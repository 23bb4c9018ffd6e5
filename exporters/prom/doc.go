// Package prom publishes a training run's profile as Prometheus metrics.
//
// An Exporter is a profiler.Sink: every finished record updates
// client_golang metrics as it arrives, off the recording hot path — range
// host and device durations and record counts by name; collective bytes
// and durations by rank, op and group, algorithm and bus bandwidth by op;
// step time; per-stage busy and idle seconds. WithDetail(true) labels
// ranges by name, kind, stage, chunk and phase, record counts by rank and
// name, and collectives and their bandwidths by rank, op, group and
// power-of-two message size (docs/metrics.md lists every metric and its
// labels). At scrape time a collector reads the
// profiler's Stats (records kept and pending, ranges dropped, overflow,
// event shortages), and other exporters can publish what they delivered
// and lost through AddDelivery.
//
// Every per-rank series carries rank and the labels NVIDIA's DCGM exporter
// uses for the same GPU — Hostname, gpu (device index) and UUID (where the
// backend implements runtime.DeviceDescriber) — so the two join in PromQL.
// No label takes per-step or per-microbatch values, so the number of series
// does not grow with the length of a run.
//
// Serve starts the /metrics endpoint (127.0.0.1:9464 by default; another
// host only when asked) and reports a port already in use as an error;
// Push sends the final values to a Pushgateway for batch jobs, with
// bounded retries. docs/metrics.md lists every metric and defines busy and
// idle time.
package prom
