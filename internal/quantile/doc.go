// Package quantile reads quantiles out of a DDSketch by nearest rank.
//
// A sketch's GetValueAtQuantile(q) answers for the ⌊q·(n−1)⌋-th value
// (0-based) of n: with 10 step times its p99 is the ninth, below the
// longest, though only 90% of the steps took at most that long. The
// reports name quantiles as a reader takes them, by nearest rank: the
// ⌈q·n⌉-th smallest, so that at least a share q of the values lie at or
// below it.
package quantile
