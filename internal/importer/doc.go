// Package importer reads profiles written by other profilers into
// profiler.Records, so that they reach the same report, pprof profile,
// Perfetto trace and metrics a trainscope run produces.
//
// Three formats are read, told apart by their content (Detect), gzipped or
// not:
//
//   - the text output of the C++ training framework trainscope grows from:
//     its call log (PrintRecords: "=== Kernel Call Log for Rank N ===") and
//     its summary report (Report: "=== Profiler Report for Rank N ==="),
//     in one file or several;
//   - Chrome trace JSON as torch.profiler's export_chrome_trace writes it
//     (Kineto): CPU ops, runtime calls and GPU kernels, with the collective
//     metadata PyTorch attaches to NCCL kernels;
//   - trainscope's own trace.json (exporters/chrometrace), read back into
//     the records it was written from (ParseTrainscope), so a run
//     directory can be analysed again after the run.
//
// Both JSON formats go through one reader of the Chrome trace-event
// format (chromeScanner), which locates malformed input the same way.
//
// A parser returns a Profile: records on the file's own clock, summary
// tables where the file has them, and warnings about what it could not
// carry over. Combine puts the records of several files on one timeline
// with IDs unique per rank; Profiler.Ingest takes them from there.
// Malformed input is a *ParseError naming the file and the line or byte
// offset (of a gzipped file's decompressed content, which the message
// says; a gzip stream cut short or corrupt is said to be so), never a
// panic. The other files of a trainscope run directory (summary.json,
// the reports, call logs, pprof profile and HTML page) are named for what
// they are, with the run's trace.json to import instead.
package importer
