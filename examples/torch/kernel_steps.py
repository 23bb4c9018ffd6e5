"""A one-GPU loop with known busy and idle time in every step, for profile-run.

    profile-run -- python3 examples/torch/kernel_steps.py

Each step is an NVTX range "step N". In it the host first sleeps
--idle-ms (the GPU has nothing to do: the previous step ended with a
synchronize), then launches --gemms matrix products of --size × --size
float32 matrices, each followed by a tanh, and waits for the GPU. The
script times the GPU's part of each step itself with two CUDA events
around the launches, so the device time of the step's kernels is known
without profile-run, which sees them only through CUPTI (-kernels).

With --phase-ranges N the step's GEMM and tanh pairs go in N NVTX ranges
"forward microbatch 0" … "forward microbatch N-1" (the pairs split as
evenly as they go, the first ranges taking one more), so that profile-run
labels their kernels with phase and microbatch (docs/wrap.md).

It prints one JSON line: the steps, the kernels it launched per step (two
per GEMM and tanh pair, as PyTorch launches them on this shape: a cuBLAS
GEMM and an elementwise tanh), the event-timed GPU time of each step and
its host time (perf_counter around range_push … range_pop).
scripts/wrapcheck.py --kernels checks profile-run's trace against them.
"""

import argparse
import json
import sys
import time


def parse(argv=None):
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--steps", type=int, default=20, help="training-like steps")
    p.add_argument("--gemms", type=int, default=16, help="GEMM and tanh pairs per step")
    p.add_argument("--size", type=int, default=2048, help="rows and columns of the square matrices")
    p.add_argument("--idle-ms", type=float, default=5.0, help="host sleep at the start of each step, with the GPU idle")
    p.add_argument("--phase-ranges", type=int, default=0, help="NVTX ranges \"forward microbatch M\" the pairs of a step are split into (0: none)")
    a = p.parse_args(argv)
    if a.steps < 1 or a.gemms < 1 or a.size < 1 or a.idle_ms < 0:
        p.error("--steps, --gemms and --size must be at least 1, --idle-ms not negative")
    if not 0 <= a.phase_ranges <= a.gemms:
        p.error("--phase-ranges must be between 0 and --gemms")
    return a


def main(argv=None):
    a = parse(argv)
    import torch

    if not torch.cuda.is_available():
        print("kernel_steps: no CUDA device", file=sys.stderr)
        return 2
    dev = torch.device("cuda", 0)
    torch.manual_seed(1234)
    x = torch.randn(a.size, a.size, device=dev) / a.size**0.5
    w = torch.randn(a.size, a.size, device=dev) / a.size**0.5
    torch.cuda.synchronize()
    push, pop = torch.cuda.nvtx.range_push, torch.cuda.nvtx.range_pop
    gpu_ms, host_s = [], []
    # The pair each phase range starts at, and the range's microbatch.
    n = a.phase_ranges
    sizes = [a.gemms // n + (i < a.gemms % n) for i in range(n)]
    starts = {sum(sizes[:i]): i for i in range(n)}
    t0 = time.perf_counter()
    for step in range(a.steps):
        h = time.perf_counter()
        push("step %d" % step)
        time.sleep(a.idle_ms / 1e3)
        begin, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        begin.record()
        y = x
        for g in range(a.gemms):
            if g in starts:
                if g:
                    pop()
                push("forward microbatch %d" % starts[g])
            y = torch.tanh(y @ w)
        if starts:
            pop()
        end.record()
        end.synchronize()
        pop()
        host_s.append(time.perf_counter() - h)
        gpu_ms.append(begin.elapsed_time(end))
    wall = time.perf_counter() - t0
    print(json.dumps({"tool": "kernel_steps", "steps": a.steps, "kernels_per_step": 2 * a.gemms,
                      "gemm": [a.size, a.size, a.size], "idle_ms": a.idle_ms,
                      "phase_ranges": n, "kernels_per_range": [2 * k for k in sizes],
                      "gpu_step_ms": gpu_ms, "host_step_s": host_s, "wall_s": wall,
                      "torch": torch.__version__}), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
