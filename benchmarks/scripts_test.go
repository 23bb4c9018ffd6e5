package benchmarks

import (
	"os"
	"os/exec"
	"testing"
)

// TestTorchScripts runs the Python tests of benchmarks/torch: the PyTorch
// twin of the built-in trainer (its arguments everywhere; its training
// where PyTorch is importable) and the summary of scripts/gpu-bench.sh on
// fabricated results.
func TestTorchScripts(t *testing.T) {
	py, err := exec.LookPath("python3")
	if err != nil {
		t.Skip("python3 not found: the tests of benchmarks/torch are Python's")
	}
	if err := exec.Command(py, "-c", "import sys; sys.exit(sys.version_info < (3, 8))").Run(); err != nil {
		t.Skip("python3 is older than 3.8, which benchmarks/torch needs")
	}
	// From the repository root: from here, the directory torch would be
	// imported in place of PyTorch.
	cmd := exec.Command(py, "-B", "-m", "unittest", "discover", "-s", "benchmarks/torch", "-p", "test_*.py")
	cmd.Dir = ".."
	cmd.Env = append(os.Environ(), "PYTHONDONTWRITEBYTECODE=1")
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("python3 -m unittest: %v\n%s", err, out)
	}
	t.Logf("%s", out)
}

// TestWrapcheckDoctests runs the doctests of scripts/wrapcheck.py, the
// checker of a wrapped job's figures on the GPU machine.
func TestWrapcheckDoctests(t *testing.T) {
	py, err := exec.LookPath("python3")
	if err != nil {
		t.Skip("python3 not found: scripts/wrapcheck.py is Python")
	}
	cmd := exec.Command(py, "-B", "-m", "doctest", "scripts/wrapcheck.py")
	cmd.Dir = ".."
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("python3 -m doctest scripts/wrapcheck.py: %v\n%s", err, out)
	}
}

// TestGPUBenchScriptParses checks the syntax of scripts/gpu-bench.sh, which
// only runs for real on a GPU machine.
func TestGPUBenchScriptParses(t *testing.T) {
	bash, err := exec.LookPath("bash")
	if err != nil {
		t.Skip("bash not found")
	}
	if out, err := exec.Command(bash, "-n", "../scripts/gpu-bench.sh").CombinedOutput(); err != nil {
		t.Fatalf("bash -n scripts/gpu-bench.sh: %v\n%s", err, out)
	}
}
