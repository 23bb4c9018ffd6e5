package cuda

import (
	"fmt"
	"os"
	"strings"

	"github.com/trainscope/trainscope/runtime"
	"github.com/trainscope/trainscope/runtime/cuda/dl"
)

var _ runtime.LibraryDescriber = (*Impl)(nil)

// kernelModuleVersion is where the NVIDIA kernel module says its version
// (the driver version nvidia-smi prints, 580.95.05).
const kernelModuleVersion = "/proc/driver/nvidia/version"

// Libraries names what the backend runs on, once Init has succeeded (each
// with the file the process mapped, not the name it was opened by): the
// CUDA runtime (libcudart), the CUDA version the driver supports and the
// NVIDIA driver's own version where the kernel module says it, and cuBLAS
// (loaded here if no GEMM has loaded it yet, so that a missing libcublas
// shows before a run needs it).
func (m *Impl) Libraries() []runtime.Library {
	if !m.loaded.Load() {
		return nil
	}
	libs := []runtime.Library{{Name: "CUDA runtime", Version: versionString(m.runtimeVersion), Path: m.rt.lib.File("cudaRuntimeGetVersion")}}
	drv := runtime.Library{Name: "CUDA driver", Version: versionString(m.driverVersion)}
	if d, err := m.driverAPI("Libraries"); err != nil {
		drv.Problem = err.Error()
	} else {
		drv.Path = d.lib.File("cuInit")
	}
	libs = append(libs, drv)
	if v := nvidiaDriverVersion(kernelModuleVersion); v != "" {
		libs = append(libs, runtime.Library{Name: "NVIDIA driver", Version: v})
	}
	blas := runtime.Library{Name: "cuBLAS"}
	if b, err := m.cublasAPI("Libraries"); err != nil {
		blas.Problem = err.Error()
	} else {
		blas.Path = b.lib.File("cublasCreate_v2")
		blas.Version = cublasVersion(b)
	}
	return append(libs, blas)
}

// cublasVersion is cuBLAS's version as major.minor.patch, "" where the
// library does not say (cublasGetProperty, CUDA 8 on).
func cublasVersion(b *cublas) string {
	if b.getProperty == 0 {
		return ""
	}
	f := dl.Get()
	defer f.Put()
	var v [3]int32
	for i := range v { // MAJOR_VERSION, MINOR_VERSION, PATCH_LEVEL
		if rc := int32(f.Call(b.getProperty, uintptr(i), f.OutPtr(i))); rc != 0 {
			return ""
		}
		v[i] = int32(f.Out[i])
	}
	return fmt.Sprintf("%d.%d.%d", v[0], v[1], v[2])
}

// nvidiaDriverVersion reads the driver version from the kernel module's
// line "NVRM version: NVIDIA UNIX x86_64 Kernel Module  580.95.05  Tue
// …"; "" where the file is not there or says no version.
func nvidiaDriverVersion(path string) string {
	b, err := os.ReadFile(path)
	if err != nil {
		return ""
	}
	for line := range strings.Lines(string(b)) {
		rest, ok := strings.CutPrefix(line, "NVRM version:")
		if !ok {
			continue
		}
		if _, after, ok := strings.Cut(rest, "Kernel Module"); ok {
			rest = after
		}
		for _, w := range strings.Fields(rest) {
			if w != "" && w[0] >= '0' && w[0] <= '9' && strings.Contains(w, ".") {
				return w
			}
		}
	}
	return ""
}
