// Package trainrun runs the built-in trainer with a profiler on the CPU
// backend and returns every record in the order the profiler's sinks
// received it, for tests that check what sinks compute against what is
// computed from the whole record list.
package trainrun
