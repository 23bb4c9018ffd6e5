// Package runtime is trainscope's device-runtime layer: device types,
// devices, streams, events, buffers and the backend interface Impl that each
// device type registers once.
//
// Streams and events are created and destroyed through their own types
// (NewStream, NewEvent, Destroy) rather than through the backend, status
// codes live inside error values (use errors.Is with a Status), and the
// String of a status outside the list says so.
//
// A backend registers in init and does no other work there; it loads its
// native libraries on first use (Impl.Init), so importing a GPU backend on a
// machine without a driver is harmless: Init reports it unavailable.
//
// Users address a backend through the package-level helpers, which look up
// the registered Impl for a Device's type:
//
//	s, err := runtime.NewStream(dev)
//	ev, err := runtime.NewEvent(dev, runtime.EventDefault)
//	err = ev.Record(s)
//
// Package runtime shares its name with Go's own runtime package; import it
// under another name (trt, say) where both are needed.
package runtime
