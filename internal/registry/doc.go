// Package registry is the table behind trainscope's backend registries
// (runtime.Registry, ccl.Registry): one backend per key, registered once,
// each backend reporting the key it serves. The public registries wrap its
// errors in their own status types.
package registry
