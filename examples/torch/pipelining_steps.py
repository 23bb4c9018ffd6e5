"""A pipeline run by PyTorch's own pipelining runtime, virtual stages included.

    profile-run -pipeline-schedule microbatches=8,vpp=2 -- \
        python3 -m torch.distributed.run --nproc_per_node 4 \
        examples/torch/pipelining_steps.py --pp 2 --vpp 2

Where examples/torch/pipeline_steps.py hand-writes a GPipe loop, this
script leaves the schedule and the transfers to torch.distributed.pipelining
(PyTorch 2.4 and later), as TorchTitan does: each rank holds --vpp model
chunks as PipelineStage objects (stage index chunk × pp + stage, the
interleaved layout), built without example inputs so that the runtime
infers shapes in the first step, and ScheduleInterleaved1F1B (or
Schedule1F1B / ScheduleGPipe with --vpp 1) runs --microbatches
microbatches a step. The ranks form --pp stages times WORLD_SIZE/--pp
data-parallel replicas: rank = replica × pp + stage; each replica's
stages make one group, and after the schedule each chunk's gradients are
all-reduced over the stage's replicas and SGD updates the weights.

Each stage's forward_one_chunk and backward_one_chunk, which the runtime
calls for every microbatch, run inside an NVTX range "forward chunk C
microbatch M" or "backward chunk C microbatch M" (C the rank's chunk, M
the microbatch), so that profile-run labels the kernels launched inside
with phase, chunk and microbatch (docs/wrap.md, "Forward and backward
work"); --no-phase-ranges leaves them out. This is how to label a
pipeline run by torch.distributed.pipelining without changing it.

A chunk is --layers bias-free Linear + tanh layers; the loss is the mean
square error of the last chunk's output against zero. A step is an NVTX
range "step N"; step -1, outside any, is the warm-up in which the runtime
infers shapes and cuBLAS sets up.

Each rank times its own computation with CUDA events: around every
chunk's forward, and around every chunk's backward through two identity
autograd functions at the chunk's output and input, whose backward runs
first and last in the chunk's. It prints one JSON line at the end, shaped
as pipeline_steps.py's, so that scripts/wrapcheck.py --pipeline checks
what profile-run reports against figures it did not compute.

With --torch-trace DIR, torch.profiler (CPU and CUDA activities) records
the steps after the warm-up in each rank's process, on a schedule with
prof.step() ending each step (its "ProfilerStep#N" ranges, N from 1), and
each rank writes DIR/rank<R>.json for `profile-run import`. The phase ranges are then record_function
ranges, which the trace holds, rather than NVTX ones; with
--no-phase-ranges only the runtime's own ranges remain (its "PP:0F3"
around every action of a multi-stage schedule, "Forward 3" and
"Backward 3" of GPipe). --torch-stack records the Python stack too, whose
functions then enclose the steps in the trace.

With fewer GPUs than ranks, --share-gpu runs the ranks on them (each with
a host id of its own, so NCCL connects them through its network
transport).
"""

import argparse
import json
import os
import sys
import time

SCHEDULES = ("interleaved-1f1b", "1f1b", "gpipe")


def parse(argv=None):
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--pp", type=int, default=2, help="pipeline stages (WORLD_SIZE must be a multiple)")
    p.add_argument("--vpp", type=int, default=2, help="model chunks (virtual stages) per rank")
    p.add_argument("--schedule", choices=SCHEDULES, default=None,
                   help="the pipelining runtime's schedule (default: interleaved-1f1b with --vpp above 1, else 1f1b)")
    p.add_argument("--microbatches", type=int, default=8, help="microbatches per step")
    p.add_argument("--rows", type=int, default=1024, help="rows per microbatch")
    p.add_argument("--width", type=int, default=2048, help="layer width")
    p.add_argument("--layers", type=int, default=2, help="layers per chunk")
    p.add_argument("--steps", type=int, default=12, help="training steps after the warm-up")
    p.add_argument("--share-gpu", action="store_true", help="let the ranks share GPUs when there are fewer GPUs than ranks")
    p.add_argument("--no-phase-ranges", action="store_true", help="no NVTX range around each chunk's forward and backward of a microbatch")
    p.add_argument("--torch-trace", default="", metavar="DIR",
                   help="record the steps with torch.profiler and write DIR/rank<R>.json")
    p.add_argument("--torch-stack", action="store_true", help="with --torch-trace: record Python stacks too (with_stack)")
    a = p.parse_args(argv)
    if min(a.pp, a.vpp, a.microbatches, a.rows, a.width, a.layers, a.steps) < 1:
        p.error("every count must be at least 1")
    if a.schedule is None:
        a.schedule = "interleaved-1f1b" if a.vpp > 1 else "1f1b"
    if a.schedule != "interleaved-1f1b" and a.vpp != 1:
        p.error("--schedule %s runs one chunk a rank: --vpp must be 1" % a.schedule)
    return a


def main(argv=None):
    a = parse(argv)
    import torch
    import torch.distributed as dist
    import torch.nn.functional as F
    from torch.distributed import pipelining

    rank, world = int(os.environ.get("RANK", 0)), int(os.environ.get("WORLD_SIZE", 1))
    local = int(os.environ.get("LOCAL_RANK", 0))
    if world % a.pp != 0:
        print("pipelining_steps: WORLD_SIZE %d is not a multiple of --pp %d" % (world, a.pp), file=sys.stderr)
        return 2
    if a.share_gpu and world > torch.cuda.device_count():
        # NCCL refuses two ranks of one communicator on one GPU of one
        # host; the host is what NCCL_HOSTID says.
        os.environ["NCCL_HOSTID"] = "pipelining-steps-rank-%d" % rank
    dev = torch.device("cuda", local % torch.cuda.device_count())
    torch.cuda.set_device(dev)
    dist.init_process_group("nccl", device_id=dev)
    pp, dp, v = a.pp, world // a.pp, a.vpp
    replica, stage = divmod(rank, pp)
    pipe = data = None
    for r in range(dp):
        g = dist.new_group([r * pp + s for s in range(pp)], group_desc="PIPELINE_MODEL_PARALLEL_GROUP")
        if r == replica:
            pipe = g
    for s in range(pp):
        g = dist.new_group([r * pp + s for r in range(dp)], group_desc="DATA_PARALLEL_GROUP")
        if s == stage:
            data = g

    fwd, bwd_start, bwd_end = [], [], []

    def event():
        e = torch.cuda.Event(enable_timing=True)
        e.record()
        return e

    class Mark(torch.autograd.Function):
        """The identity; its backward records a CUDA event into a list."""

        @staticmethod
        def forward(ctx, x, sink):
            ctx.sink = sink
            return x.view_as(x)

        @staticmethod
        def backward(ctx, grad):
            ctx.sink.append(event())
            return grad, None

    class Chunk(torch.nn.Module):
        def __init__(self, index):
            super().__init__()
            g = torch.Generator().manual_seed(4321 + index)
            self.weights = torch.nn.ParameterList(
                torch.nn.Parameter((torch.randn(a.width, a.width, generator=g) / a.width ** 0.5).to(dev))
                for _ in range(a.layers))

        def forward(self, x):
            if not x.requires_grad:
                # The first chunk's input: a leaf of its own, so that the
                # chunk's backward ends at the Mark below on every chunk.
                x = x.detach().requires_grad_()
            x = Mark.apply(x, bwd_end)
            s = event()
            for w in self.weights:
                x = torch.tanh(x @ w)
            fwd.append((s, event()))
            return Mark.apply(x, bwd_start)

    n = pp * v
    chunks = [Chunk(k * pp + stage) for k in range(v)]
    stages = [pipelining.PipelineStage(c, k * pp + stage, n, dev, group=pipe) for k, c in enumerate(chunks)]
    push, pop = torch.cuda.nvtx.range_push, torch.cuda.nvtx.range_pop
    ranges = []
    if a.torch_trace:
        # What torch.profiler sees: record_function ranges.
        def push(name):
            r = torch.profiler.record_function(name)
            r.__enter__()
            ranges.append(r)

        def pop():
            ranges.pop().__exit__(None, None, None)

    def in_range(method, phase, chunk):
        """method, run inside an NVTX range naming its phase, chunk and
        microbatch (the runtime passes the microbatch first)."""

        def run(*args, **kwargs):
            mb = args[0] if args else kwargs.get("fwd_chunk_id", kwargs.get("bwd_chunk_id"))
            push("%s chunk %d microbatch %s" % (phase, chunk, mb))
            try:
                return method(*args, **kwargs)
            finally:
                pop()
        return run

    if not a.no_phase_ranges:
        for k, st in enumerate(stages):
            st.forward_one_chunk = in_range(st.forward_one_chunk, "forward", k)
            st.backward_one_chunk = in_range(st.backward_one_chunk, "backward", k)

    def loss_fn(y, target):
        return F.mse_loss(y, target)

    if a.schedule == "interleaved-1f1b":
        sched = pipelining.ScheduleInterleaved1F1B(stages, n_microbatches=a.microbatches, loss_fn=loss_fn)
    elif a.schedule == "1f1b":
        sched = pipelining.Schedule1F1B(stages[0], n_microbatches=a.microbatches, loss_fn=loss_fn)
    else:
        sched = pipelining.ScheduleGPipe(stages[0], n_microbatches=a.microbatches, loss_fn=loss_fn)
    first, last = stage == 0, stage == pp - 1
    params = [p for c in chunks for p in c.parameters()]

    host, compute, losses_seen = [], [], []
    gen = torch.Generator(device=dev)
    gen.manual_seed(99 + replica)
    rows = a.rows * a.microbatches
    prof = None
    if a.torch_trace:
        # As a training loop runs it: on a schedule, the warm-up step the
        # profiler's own warm-up, prof.step() after each step; the steps
        # recorded are then ProfilerStep#1 to #steps.
        from torch.profiler import ProfilerActivity, profile, schedule
        os.makedirs(a.torch_trace, exist_ok=True)
        path = os.path.join(a.torch_trace, "rank%d.json" % rank)
        prof = profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA], with_stack=a.torch_stack,
                       schedule=schedule(wait=0, warmup=1, active=a.steps, repeat=1),
                       on_trace_ready=lambda p: p.export_chrome_trace(path))
        prof.__enter__()
    for step in range(-1, a.steps):
        fwd.clear(), bwd_start.clear(), bwd_end.clear()
        torch.cuda.synchronize()
        h = time.perf_counter()
        if step >= 0:
            push("step %d" % step)
        args, kwargs = (), {}
        if first:
            args = (torch.randn(rows, a.width, device=dev, generator=gen),)
        if last:
            losses = []
            kwargs = {"target": torch.zeros(rows, a.width, device=dev), "losses": losses}
        sched.step(*args, **kwargs)
        with torch.no_grad():
            for p in params:
                if dp > 1:
                    dist.all_reduce(p.grad, group=data)
                p -= 1e-3 * p.grad
                p.grad = None
        torch.cuda.synchronize()  # the step ends when its work is done
        if step >= 0:
            pop()
            host.append(time.perf_counter() - h)
        if prof is not None:
            prof.step()  # after the last step: the trace written
        if step < 0:
            continue
        if len(bwd_start) != len(fwd) or len(bwd_end) != len(fwd):
            print("pipelining_steps: rank %d step %d: %d forwards, %d and %d backward marks"
                  % (rank, step, len(fwd), len(bwd_start), len(bwd_end)), file=sys.stderr)
            return 1
        # Chunks' backwards do not interleave on a rank: the n-th start
        # and the n-th end bracket one.
        compute.append(sum(s.elapsed_time(e) for s, e in fwd) + sum(s.elapsed_time(e) for s, e in zip(bwd_start, bwd_end)))
        if last:
            losses_seen.append(float(sum(x.item() for x in losses) / len(losses)))
    if prof is not None:
        prof.__exit__(None, None, None)
    dist.barrier()
    print(json.dumps({"tool": "pipeline_steps", "library": "torch.distributed.pipelining", "schedule": a.schedule,
                      "rank": rank, "stage": stage, "replica": replica, "pp": pp, "vpp": v, "dp": dp,
                      "microbatches": a.microbatches, "steps": a.steps, "host_step_s": host, "compute_ms": compute,
                      "chunk_runs_per_step": len(fwd), "losses": losses_seen, "phase_ranges": not a.no_phase_ranges,
                      "ranks_per_gpu": -(-world // torch.cuda.device_count()), "comm_names": False,
                      "torch": torch.__version__}), flush=True)
    dist.destroy_process_group()
    return 0


if __name__ == "__main__":
    sys.exit(main())
