package cuda

import (
	"os"

	"github.com/trainscope/trainscope/runtime/cuda/dl"
)

// Environment variables that override the library search.
const (
	EnvCudartLib = "TRAINSCOPE_CUDA_LIB"        // path of libcudart
	EnvCublasLib = "TRAINSCOPE_CUBLAS_LIB"      // path of libcublas
	EnvDriverLib = "TRAINSCOPE_CUDA_DRIVER_LIB" // path of libcuda

	// EnvModuleLoading is CUDA's own variable choosing when kernels are
	// loaded: EAGER (at initialisation) or LAZY (at first launch, CUDA's
	// default since 12.2). See WithLazyLoading.
	EnvModuleLoading = "CUDA_MODULE_LOADING"

	// EnvDeviceMaxConnections is CUDA's own variable for how many
	// hardware work queues a device's streams are spread over (CUDA's
	// default 8, at most 32). See WithDeviceConnections.
	EnvDeviceMaxConnections = "CUDA_DEVICE_MAX_CONNECTIONS"
)

// Minimum versions: CUDA 12.0 runtime (stream-ordered allocation, the
// error-name API, cudaSetDevice initialising the context).
const minRuntimeVersion = 12000

// Option configures New. Options are sealed: only this package makes them.
type Option interface{ apply(*config) }

type config struct {
	cudart, cublas, driver string // explicit library paths
	tf32                   bool
	lazy                   bool
	connections            int // CUDA_DEVICE_MAX_CONNECTIONS to set; ≤ 0: leave it to CUDA
	minVersion             int

	// The libcudart candidates without an explicit path, and what binds
	// one (bindCudart where nil): tests put fakes here.
	cudartDefaults []string
	bindRuntime    func(*dl.Library) (*cudart, error)
}

type optionFunc func(*config)

func (f optionFunc) apply(c *config) { f(c) }

// WithLibrary loads libcudart from path and nowhere else.
func WithLibrary(path string) Option { return optionFunc(func(c *config) { c.cudart = path }) }

// WithCUBLASLibrary loads libcublas from path and nowhere else.
func WithCUBLASLibrary(path string) Option { return optionFunc(func(c *config) { c.cublas = path }) }

// WithDriverLibrary loads the CUDA driver library (libcuda) from path.
func WithDriverLibrary(path string) Option { return optionFunc(func(c *config) { c.driver = path }) }

// WithTF32 lets float32 GEMMs use TF32 tensor cores (10-bit mantissa
// inputs, fp32 accumulation). Off by default: float32 GEMMs are computed
// in full fp32, so their results agree with the CPU backend's.
//
// It changes what runtime.MathDefault means for this backend's float32
// GEMMs, and nothing else: a GEMM that names its precision
// (runtime.GemmArgs.Math MathTF32 or MathBF16) gets that precision with
// or without it. Per call is the finer choice; WithTF32 remains for code
// that cannot set the field.
func WithTF32(on bool) Option { return optionFunc(func(c *config) { c.tf32 = on }) }

// WithLazyLoading(true) leaves CUDA's module loading as the environment
// has it. By default Init sets CUDA_MODULE_LOADING=EAGER when the variable
// is unset, before CUDA initialises: a kernel loaded lazily, at its first
// launch, waits for every stream of the device to drain, and a NCCL kernel
// waiting for a peer never drains until that peer's host thread launches
// its side. Two ranks in one process can then block each other for good
// (each in its first launch of some cuBLAS kernel). Eager loading costs
// start-up time and device memory for every kernel of every library
// loaded. A value set by the user is always kept.
func WithLazyLoading(on bool) Option { return optionFunc(func(c *config) { c.lazy = on }) }

// WithDeviceConnections(n) sets CUDA_DEVICE_MAX_CONNECTIONS=n at Init
// when the variable is unset (n ≤ 0, the default: leave it to CUDA, which
// uses 8). It is how many hardware work queues a device's streams are
// spread over; streams beyond that many share a queue, and a kernel then
// waits behind a long kernel of another stream it has no dependency on.
// Ranks sharing one GPU (each a compute stream and a stream per process
// group) pass 8 streams quickly. 32, the most, keeps them independent;
// it also cost the launch-bound default trainer job about 10 % on an H200
// (docs/gpu.md), so it is not the default. A value set by the user is
// always kept.
func WithDeviceConnections(n int) Option {
	return optionFunc(func(c *config) { c.connections = n })
}

func newConfig(opts []Option) config {
	c := config{minVersion: minRuntimeVersion, cudartDefaults: []string{
		"libcudart.so.13", "libcudart.so.12", "/usr/local/cuda/lib64/libcudart.so*"}}
	for _, o := range opts {
		if o != nil {
			o.apply(&c)
		}
	}
	return c
}

// candidates is the search list for one library: the explicit path alone
// when one is given (an option, else the environment variable), the
// defaults otherwise.
func candidates(explicit, env string, defaults ...string) []string {
	if explicit != "" {
		return []string{explicit}
	}
	if p := os.Getenv(env); p != "" {
		return []string{p}
	}
	return defaults
}
