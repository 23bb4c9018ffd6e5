// Package synthtrace makes trainer-shaped profiler records without running
// a trainer, for the exporters' benchmarks: large, deterministic inputs
// with the nesting, labels and point-to-point pairs of a real run.
package synthtrace
