package runtime

import "time"

// Impl is the backend interface one device type implements. Users do not
// call it directly: they use Stream, Event, Buffer and the package-level
// functions, which validate arguments and then call the registered Impl.
//
// Handles (streams, events, allocations) are opaque values owned by the
// backend; the runtime stores them in Stream, Event and Buffer and hands
// them back unchanged. Device indices are explicit on every call that needs
// one, so no caller depends on a per-thread current device.
//
// Every method returns nil on success or an error wrapping a Status (use
// Errorf or *Error); StatusNotReady from a query means "not yet", not
// failure.
type Impl interface {
	// Type is the device type this backend serves.
	Type() DeviceType
	// Init loads the backend on first use and is cheap afterwards. An error
	// wrapping StatusUnavailable means the backend does not apply on this
	// host (no driver, no library) and says what was tried; any other error
	// means it applies but failed to load.
	Init() error

	DeviceCount() (int, error)
	SetDevice(index int) error
	GetDevice() (int, error)
	DeviceSynchronize(index int) error

	// StreamCreate creates a stream on a device; lower priority numbers
	// run first, as in CUDA. StreamPriorityRange gives the valid range.
	StreamCreate(device, priority int) (any, error)
	StreamDestroy(stream any) error
	StreamPriorityRange(device int) (least, greatest int, err error)
	StreamSynchronize(stream any) error
	// StreamQuery returns nil when all work on the stream has completed
	// and an error wrapping StatusNotReady otherwise.
	StreamQuery(stream any) error
	// StreamWaitEvent makes future work on stream wait for event.
	StreamWaitEvent(stream, event any) error

	EventCreate(device int, flags EventFlag) (any, error)
	EventDestroy(event any) error
	// EventRecord captures the work enqueued on stream so far. It must
	// not block on the device: the profiler calls it on the hot path.
	EventRecord(event, stream any) error
	// EventQuery returns nil once the recorded work has completed and an
	// error wrapping StatusNotReady before.
	EventQuery(event any) error
	EventSynchronize(event any) error
	// EventElapsed returns the device time between two completed timing
	// events of one device.
	EventElapsed(start, end any) (time.Duration, error)

	// Malloc and Free manage device memory; the async variants order the
	// allocation on a stream.
	Malloc(device int, size int64) (any, error)
	Free(mem any) error
	MallocAsync(size int64, stream any) (any, error)
	FreeAsync(mem, stream any) error
	// Copies take a nil stream to mean "synchronous". Host slices passed to
	// an asynchronous copy must stay untouched until the stream reaches it.
	MemcpyHtoD(dst Buffer, src []byte, stream any) error
	MemcpyDtoH(dst []byte, src Buffer, stream any) error
	MemcpyDtoD(dst, src Buffer, stream any) error
	Memset(dst Buffer, value byte, stream any) error
	// MemoryStats is read when every device range ends, so it must be
	// cheap: counters the backend keeps, not a driver query.
	MemoryStats(device int) (MemoryStats, error)
	ResetPeakMemory(device int) error

	// Gemm computes C = alpha·op(A)·op(B) + beta·C on a stream, BLAS
	// style (column-major).
	Gemm(stream any, g GemmArgs) error
}

// MemoryStats describes a device's memory as the backend sees it.
type MemoryStats struct {
	InUse int64 // bytes allocated through the backend now
	Peak  int64 // high-water mark of InUse since the last reset
	Total int64 // device capacity, 0 where unknown
	Free  int64 // free capacity, 0 where unknown
}

// GemmArgs are the arguments of a GEMM in BLAS conventions: column-major
// matrices, op(A) is M×K, op(B) is K×N, C is M×N; leading dimensions in
// elements; buffers may be views (Buffer.Slice) of larger allocations.
type GemmArgs struct {
	TransA, TransB bool
	M, N, K        int
	Alpha, Beta    float32
	A, B, C        Buffer
	LDA, LDB, LDC  int
	Type           DataType
	// Math is the compute precision; a mode other than MathDefault needs
	// Type Float32 and a backend that supports it (see MathModes), and is
	// refused with StatusNotSupported elsewhere rather than ignored.
	Math MathMode
}

// MathModes is an optional backend capability: the reduced precisions its
// float32 GEMMs can compute in (GemmArgs.Math). Discover it with a type
// assertion, or ask SupportsMath; a backend without it computes float32
// GEMMs in MathDefault only.
type MathModes interface {
	// SupportsMath reports whether a float32 GEMM with Math m runs on
	// this backend. It is about the backend, not a device, and costs no
	// driver call.
	SupportsMath(m MathMode) bool
}

// Elementwise is an optional backend capability for the small vector
// kernels the built-in trainer needs besides GEMM. Discover it with a type
// assertion; the package-level helpers return StatusNotSupported where a
// backend lacks it. All operate on float32 elements, in stream order.
type Elementwise interface {
	// Tanh computes y[i] = tanh(x[i]).
	Tanh(stream any, x, y Buffer, n int) error
	// TanhBackward computes dx[i] = dy[i]·(1 − y[i]²).
	TanhBackward(stream any, y, dy, dx Buffer, n int) error
	// Axpy computes y[i] += alpha·x[i].
	Axpy(stream any, alpha float32, x, y Buffer, n int) error
	// Scale computes x[i] *= alpha.
	Scale(stream any, alpha float32, x Buffer, n int) error
	// Dot computes result[0] = Σ x[i]·y[i], written on the device in
	// stream order: nothing comes back to the host.
	Dot(stream any, x, y, result Buffer, n int) error
}

// Sleeper is an optional backend capability: a stream that holds still
// for a given time, in stream order, without computing — known device
// time for tests and for checking what a profiler measures (the built-in
// trainer's ActionDelay and StragglerDelay). Discover it with a type
// assertion or through the package-level Sleep.
type Sleeper interface {
	// Sleep enqueues a wait of d on the stream: work enqueued after it
	// starts no sooner than d after the sleep began on the device.
	Sleep(stream any, d time.Duration) error
}

// MemoryDescriber is an optional backend capability: how much memory a
// device can allocate from, so that a job too large for it can be refused
// before it starts. Discover it with a type assertion.
type MemoryDescriber interface {
	// DeviceMemory asks the system (not the backend's own counters, as
	// MemoryStats does), so it may cost a driver call.
	DeviceMemory(index int) (DeviceMemory, error)
}

// DeviceMemory is the memory a device allocates from.
type DeviceMemory struct {
	Total     int64 // bytes; 0 where unknown
	Available int64 // bytes new allocations can still get; 0 where unknown, unless AvailableKnown
	// AvailableKnown says Available was measured: 0 is then no memory
	// left, not an unknown amount (a GPU another job filled, a cpu
	// device whose WithMemoryLimit is taken).
	AvailableKnown bool
	// Host reports that the memory is the host's, shared by every device
	// of the backend and by the host's own allocations (the CPU
	// backend's devices): what each of them allocates counts against it.
	Host bool
}

// LibraryDescriber is an optional capability, of a device backend or a
// collective one, that names the vendor libraries it loaded and their
// versions, so that a run's summary says what it ran on and two runs'
// comparison can tell a new driver from a slower step. Discover it with a
// type assertion.
type LibraryDescriber interface {
	// Libraries lists the libraries in the order they are loaded; one
	// that failed to load has its Problem set. Before the backend is
	// initialised it returns nothing.
	Libraries() []Library
}

// Library is a vendor library a backend loaded, or tried to.
type Library struct {
	Name    string // "CUDA runtime", "cuBLAS", "NCCL"
	Version string // "13.0", "2.28.3"; "" where unknown
	Path    string // the file loaded; "" where unknown
	Problem string // why it did not load; "" where it did
}

// DeviceDescriber is an optional backend capability that names devices the
// way other tools do, so metrics can join with them (NVIDIA's DCGM exporter
// labels GPUs by index and UUID). Discover it with a type assertion.
type DeviceDescriber interface {
	// DeviceName is the product name, e.g. "NVIDIA H200".
	DeviceName(index int) (string, error)
	// DeviceUUID is the device's UUID as nvidia-smi prints it
	// ("GPU-…"), or an error wrapping StatusNotSupported.
	DeviceUUID(index int) (string, error)
}
