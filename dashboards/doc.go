// Package dashboards holds trainscope's Grafana dashboards and the
// provisioning files that load them, embedded so that tests and programs
// can read them without a path.
//
// training-overview.json shows step time, per-stage busy and idle time and
// the pipeline bubble, a per-rank straggler view, and for a wrapped job
// that marks no steps the step time from the cycle of its collectives;
// collectives.json shows bus and algorithm bandwidth by op and message
// size, a latency heatmap and per-rank skew. Both take their Prometheus from a
// ${datasource} variable and filter by Hostname, rank and group variables
// (label_values queries, "All" matching every value). The metrics are
// those of package exporters/prom, described in docs/metrics.md.
//
// To use them, copy provisioning/datasources/*.yaml and
// provisioning/dashboards/*.yaml into Grafana's provisioning directories
// and the JSON files into the path the dashboard provider names, or
// import the JSON files in Grafana's UI.
package dashboards
