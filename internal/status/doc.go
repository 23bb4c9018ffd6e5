// Package status is what runtime.Status and ccl.Status share: the name of
// a code (and, for a value outside a package's list, a name that says so),
// the convention that non-negative codes are normal outcomes, and the
// error type that wraps a code so that errors.Is and errors.As find it.
//
// Each package keeps its own Status type and values; it describes them to
// this package with a Table, an empty struct type whose methods give the
// package's name and the names of its codes.
package status
