// Package buildinfo says which build of trainscope is running, as the Go
// toolchain recorded it in the binary: the trainscope module's version
// (the main module's for profile-run, a dependency's in another program)
// and, where the build recorded them, the commit it was built from and
// whether it had changes not committed. Summaries, span scopes and the
// run's info metric carry it, so two runs can be told apart by the tool
// that measured them.
package buildinfo
