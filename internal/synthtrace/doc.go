// Package synthtrace makes trainer-shaped profiler records without running
// a trainer, for the exporters' benchmarks: large, deterministic inputs
// with the nesting, labels and point-to-point pairs of a real run, and
// the orders a profiler delivers them in, for tests of the sinks.
package synthtrace
