// Package runcompare compares two runs' summaries (summary.json, written
// by exporters/jsonsummary): the step time, busy share, bubble,
// communication and waiting, the straggler, what was dropped, and the
// ranges whose time per step changed most — the question after a
// change to a model, a launcher or a cluster: did the step get faster,
// and where did the time move?
//
// It says where the two runs are not alike (a different job, backend or
// command, an interrupted run, few steps), so that a change of figures
// is not read as a change of speed when the jobs differ. Gate turns the
// comparison into a pass or fail for a CI job: the slowest rank's median
// step time may grow by at most a given share.
package runcompare
