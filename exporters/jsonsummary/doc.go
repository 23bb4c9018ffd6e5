// Package jsonsummary writes a run's summary as one JSON document: the
// figures of the text report's summary (step times per rank, busy
// shares, the pipeline analysis' bubbles, overlap, collectives and
// stragglers, the ranges summed over ranks) for a program to read — a CI
// job that fails a change when the p50 step time or the bubble grows,
// a notebook comparing runs — where report.txt is for people.
//
// Times are seconds and shares fractions (0 to 1), as numbers; a figure
// that was not measured (a busy share without device-timed compute, an
// ideal bubble without a pipeline) is null, never 0. The document names
// its schema ("schema": "trainscope.summary/v1"); a field's meaning does
// not change within a schema, and fields may be added. docs/summary-json.md
// lists them.
package jsonsummary
