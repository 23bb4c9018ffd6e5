"""A data-parallel training loop that marks its steps for profile-run.

    profile-run -- python3 -m torch.distributed.run --nproc_per_node 2 examples/torch/ddp_steps.py

Each rank trains a small MLP under DistributedDataParallel on random data
for --steps steps. Every step is an NVTX range "step N"
(torch.cuda.nvtx.range_push / range_pop), with "forward", "backward" and
"optimizer" ranges inside, and ends with loss.item(): a wait for the GPU,
as most training loops have one. DDP's gradient all-reduces (one per
bucket) run inside the step; a communication hook counts them.

At the end each rank prints one JSON line: the steps it marked, the
all-reduces DDP made in each step (from the hook), the gradient bytes,
and its own host time of each step (perf_counter around the same
range_push … range_pop), so that what profile-run reports can be checked
against figures it did not compute (scripts/wrapcheck.py --ddp).

With one GPU, --share-gpu runs the ranks on it (each with a host id of
its own, so NCCL connects them through its network transport). --cpu
runs the same loop on the CPU over gloo, NVTX left out where the PyTorch
build has none: a check of the script itself, with nothing for
profile-run to see.

With --no-nvtx the loop marks nothing, as most training loops: profile-run
then finds the step from the cycle DDP's all-reduces repeat
(scripts/wrapcheck.py --cycle checks it against the script's own step
times).

With --torch-trace DIR, torch.profiler records the steps in each rank's
process instead (its ranges record_function ones, each step a
ProfilerStep#N), and each rank writes DIR/rank<R>.json for `profile-run
import`: DDP's all-reduces, launched from the autograd thread, carry the
step of the main thread's ProfilerStep they ran in.
"""

import argparse
import json
import os
import sys
import time


def parse(argv=None):
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--steps", type=int, default=20, help="training steps")
    p.add_argument("--width", type=int, default=1024, help="hidden width of the MLP")
    p.add_argument("--layers", type=int, default=4, help="hidden layers of the MLP")
    p.add_argument("--batch", type=int, default=256, help="rows per step and rank")
    p.add_argument("--bucket-mb", type=float, default=4.0, help="DDP bucket size in MiB (more buckets, more all-reduces)")
    p.add_argument("--share-gpu", action="store_true", help="let the ranks share GPUs when there are fewer GPUs than ranks")
    p.add_argument("--cpu", action="store_true", help="run on the CPU over gloo (checks the script; no NCCL)")
    p.add_argument("--no-nvtx", action="store_true",
                   help="mark no NVTX ranges (as most training loops): profile-run finds the step from the cycle of DDP's all-reduces")
    p.add_argument("--torch-trace", default="", metavar="DIR",
                   help="record the steps with torch.profiler and write DIR/rank<R>.json")
    p.add_argument("--profile-memory", action="store_true",
                   help="with --torch-trace: record the allocator's events too (profile_memory=True), and give the peak "
                        "torch.cuda.max_memory_allocated saw while the profiler recorded")
    a = p.parse_args(argv)
    if a.steps < 1 or a.width < 1 or a.layers < 1 or a.batch < 1 or a.bucket_mb <= 0:
        p.error("--steps, --width, --layers and --batch must be at least 1, --bucket-mb positive")
    return a


def main(argv=None):
    a = parse(argv)
    import torch
    import torch.distributed as dist
    from torch.distributed.algorithms.ddp_comm_hooks import default_hooks
    from torch.nn.parallel import DistributedDataParallel as DDP

    rank, world = int(os.environ.get("RANK", 0)), int(os.environ.get("WORLD_SIZE", 1))
    local = int(os.environ.get("LOCAL_RANK", 0))
    if a.cpu:
        dev = torch.device("cpu")
        dist.init_process_group("gloo")
    else:
        if a.share_gpu and world > torch.cuda.device_count():
            # NCCL refuses two ranks of one communicator on one GPU of one
            # host; the host is what NCCL_HOSTID says.
            os.environ["NCCL_HOSTID"] = "ddp-steps-rank-%d" % rank
        dev = torch.device("cuda", local % torch.cuda.device_count())
        torch.cuda.set_device(dev)
        dist.init_process_group("nccl", device_id=dev)
    torch.manual_seed(1234 + rank)

    layers = []
    for i in range(a.layers):
        layers += [torch.nn.Linear(a.width, a.width), torch.nn.Tanh()]
    model = torch.nn.Sequential(*layers, torch.nn.Linear(a.width, 1)).to(dev)
    ddp = DDP(model, device_ids=None if a.cpu else [dev.index], bucket_cap_mb=a.bucket_mb)
    calls = {"n": 0}

    def counting_allreduce(state, bucket):
        calls["n"] += 1
        return default_hooks.allreduce_hook(state, bucket)

    ddp.register_comm_hook(None, counting_allreduce)
    opt = torch.optim.SGD(ddp.parameters(), lr=1e-3)
    x = torch.randn(a.batch, a.width, device=dev)
    y = torch.randn(a.batch, 1, device=dev)

    per_step, host = [], []
    push, pop = torch.cuda.nvtx.range_push, torch.cuda.nvtx.range_pop
    if a.no_nvtx:
        push, pop = (lambda name: None), (lambda: None)
    elif a.cpu:
        try:
            push("check"), pop()
        except RuntimeError:  # a PyTorch built without CUDA has no NVTX
            push, pop = (lambda name: None), (lambda: None)
    prof = None
    if a.torch_trace:
        # What torch.profiler sees: record_function ranges, and a
        # ProfilerStep#N around each step (N from 0), prof.step() ending it.
        from torch.profiler import ProfilerActivity, profile, record_function, schedule
        os.makedirs(a.torch_trace, exist_ok=True)
        path = os.path.join(a.torch_trace, "rank%d.json" % rank)
        ranges = []

        def push(name):
            ranges.append(record_function(name))
            ranges[-1].__enter__()

        def pop():
            ranges.pop().__exit__(None, None, None)

        activities = [ProfilerActivity.CPU] + ([] if a.cpu else [ProfilerActivity.CUDA])
        prof = profile(activities=activities, schedule=schedule(wait=0, warmup=0, active=a.steps, repeat=1),
                       on_trace_ready=lambda p: p.export_chrome_trace(path), profile_memory=a.profile_memory)
        if a.profile_memory and not a.cpu:
            torch.cuda.reset_peak_memory_stats(dev)
        prof.__enter__()
    t0 = time.perf_counter()
    for step in range(a.steps):
        before = calls["n"]
        h = time.perf_counter()
        push("step %d" % step)
        push("forward")
        loss = torch.nn.functional.mse_loss(ddp(x), y)
        pop()
        push("backward")
        loss.backward()  # DDP all-reduces the gradients, bucket by bucket
        pop()
        push("optimizer")
        opt.step()
        opt.zero_grad(set_to_none=True)
        pop()
        loss.item()  # the loop waits for the GPU, as most do
        pop()
        host.append(time.perf_counter() - h)
        per_step.append(calls["n"] - before)
        if prof is not None:
            prof.step()  # after the last step: the trace written
    wall = time.perf_counter() - t0
    # The peak while the profiler recorded: its last step ended it.
    peak = torch.cuda.max_memory_allocated(dev) if a.profile_memory and not a.cpu else None
    if prof is not None:
        prof.__exit__(None, None, None)
    grad_bytes = sum(p.numel() * p.element_size() for p in model.parameters())
    print(json.dumps({"tool": "ddp_steps", "rank": rank, "world": world, "steps": a.steps, "nvtx": not a.no_nvtx,
                      "allreduces_per_step": per_step, "grad_bytes": grad_bytes,
                      "host_step_s": host, "wall_s": wall, "peak_allocated_bytes": peak,
                      "max_reserved_bytes": None if a.cpu else torch.cuda.max_memory_reserved(dev),
                      "torch": torch.__version__}), flush=True)
    dist.destroy_process_group()
    return 0


if __name__ == "__main__":
    sys.exit(main())
