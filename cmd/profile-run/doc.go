// Command profile-run trains trainscope's built-in pipelined model on the
// best available backend and reports where each step's time went; wraps
// any training command and reports its NCCL collectives and p2p through
// trainscope's NCCL profiler plugin; and imports profiles written by
// torch.profiler or the C++ framework profiler.
//
// Usage:
//
//	profile-run [flags]                 the built-in trainer
//	profile-run [flags] -- CMD ARGS…    wrap a command (docs/wrap.md)
//	profile-run import [flags] FILE…    import profiles (docs/import.md)
//	profile-run report RUN_DIR [--html] a run's text report, or its HTML
//	                                    pipeline chart (docs/report-html.md)
//	profile-run compare BASE NEW        two runs' figures side by side; a CI gate
//	                                    on the step time (docs/compare.md)
//	profile-run version [-json]         this build, the host, the devices and
//	                                    libraries each backend finds here
//
// Run `profile-run -h` for the flags.
package main
