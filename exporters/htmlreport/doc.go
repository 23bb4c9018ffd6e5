// Package htmlreport writes a run's records as one self-contained HTML
// page: a pipeline Gantt chart per step (a row per rank, a lane per VPP
// chunk with its forward and backward blocks coloured by microbatch,
// collectives and point-to-point transfers below, the bubble shaded), the
// pipeline analysis (profiler/analysis: bubbles per stage and chunk,
// overlap, collectives, stragglers) and the top ranges. Everything the
// page needs — CSS, a few lines of script, inline SVG — is in the file;
// its Content-Security-Policy forbids fetching anything else.
//
// Each block is an SVG rect with the class "blk" and "fwd" or "bwd",
// its hover title holding rank, step, chunk, microbatch and times; an
// action nested in another device-timed range is a block too unless it
// is part of an enclosing action with its labels (that action's kernels),
// and one inside an action with other labels on its lane is a thinner bar
// on that block, with the class "in" as well. The script counts the
// blocks the browser laid out with a non-zero width into
// <output id="drawn">, so a headless browser can check the chart
// rendered.
package htmlreport
