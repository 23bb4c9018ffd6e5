"""A fully sharded data-parallel (FSDP2) training loop that marks its steps for profile-run.

    profile-run -- python3 -m torch.distributed.run --nproc_per_node 2 examples/torch/fsdp_steps.py

Each rank trains a small MLP whose blocks (Linear + tanh) are each sharded
with torch.distributed.fsdp.fully_shard, and the whole model once more, on
random data for --steps steps. FSDP gathers each block's parameters before
its forward and again before its backward (all-gathers, on a stream of its
own, the next block's prefetched while this one computes), and reduces and
scatters its gradients after its backward (reduce-scatters). Every step is
an NVTX range "step N" with "forward", "backward" and "optimizer" ranges
inside, and ends with loss.item().

The script counts FSDP's collectives itself: it wraps
torch.distributed.all_gather_into_tensor and reduce_scatter_tensor, which
FSDP calls, and notes each call's step and size as PyTorch sees it (an
all-gather's output tensor, a reduce-scatter's input tensor: the whole
gathered or reduced size, nccl-tests' S). At the end each rank prints one
JSON line: per step, the sizes of its all-gathers and reduce-scatters, and
its own host time of each step (perf_counter around the same
range_push … range_pop), for scripts/wrapcheck.py --fsdp to check what
profile-run reports against. Where this PyTorch's FSDP reaches NCCL some
other way, the counts stay empty and the script says so and exits 3.

With one GPU, --share-gpu runs the ranks on it (each with a host id of
its own, so NCCL connects them through its network transport). --cpu
runs the same loop on the CPU over gloo: a check of the script itself,
with nothing for profile-run to see.
"""

import argparse
import collections
import json
import os
import sys
import time


def parse(argv=None):
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--steps", type=int, default=20, help="training steps")
    p.add_argument("--width", type=int, default=2048, help="hidden width of the MLP")
    p.add_argument("--layers", type=int, default=4, help="hidden layers (blocks) of the MLP, each sharded on its own")
    p.add_argument("--batch", type=int, default=512, help="rows per step and rank")
    p.add_argument("--share-gpu", action="store_true", help="let the ranks share GPUs when there are fewer GPUs than ranks")
    p.add_argument("--cpu", action="store_true", help="run on the CPU over gloo (checks the script; no NCCL)")
    a = p.parse_args(argv)
    if a.steps < 1 or a.width < 1 or a.layers < 1 or a.batch < 1:
        p.error("--steps, --width, --layers and --batch must be at least 1")
    return a


def counting(fn, op, calls, state):
    """fn, noting (step, op, bytes) in calls for every call: bytes of the
    tensor that holds the whole size (all-gather: the output; reduce-scatter:
    the input)."""

    def wrapped(*args, **kwargs):
        whole = kwargs.get("output_tensor" if op == "AllGather" else "input")
        if whole is None and len(args) >= (1 if op == "AllGather" else 2):
            whole = args[0] if op == "AllGather" else args[1]
        if whole is not None:
            calls.append((state["step"], op, whole.numel() * whole.element_size()))
        return fn(*args, **kwargs)

    return wrapped


def main(argv=None):
    a = parse(argv)
    import torch
    import torch.distributed as dist
    from torch.distributed.fsdp import fully_shard

    rank, world = int(os.environ.get("RANK", 0)), int(os.environ.get("WORLD_SIZE", 1))
    local = int(os.environ.get("LOCAL_RANK", 0))
    if a.cpu:
        dev = torch.device("cpu")
        dist.init_process_group("gloo")
    else:
        if a.share_gpu and world > torch.cuda.device_count():
            # NCCL refuses two ranks of one communicator on one GPU of one
            # host; the host is what NCCL_HOSTID says.
            os.environ["NCCL_HOSTID"] = "fsdp-steps-rank-%d" % rank
        dev = torch.device("cuda", local % torch.cuda.device_count())
        torch.cuda.set_device(dev)
        dist.init_process_group("nccl", device_id=dev)
    torch.manual_seed(1234)  # the same weights on every rank before sharding

    calls, state = [], {"step": -1}
    dist.all_gather_into_tensor = counting(dist.all_gather_into_tensor, "AllGather", calls, state)
    dist.reduce_scatter_tensor = counting(dist.reduce_scatter_tensor, "ReduceScatter", calls, state)

    blocks = [torch.nn.Sequential(torch.nn.Linear(a.width, a.width), torch.nn.Tanh()) for _ in range(a.layers)]
    model = torch.nn.Sequential(*blocks, torch.nn.Linear(a.width, 1)).to(dev)
    for b in blocks:
        fully_shard(b)
    fully_shard(model)
    opt = torch.optim.SGD(model.parameters(), lr=1e-3)
    torch.manual_seed(1234 + rank)
    x = torch.randn(a.batch, a.width, device=dev)
    y = torch.randn(a.batch, 1, device=dev)

    host = []
    push, pop = torch.cuda.nvtx.range_push, torch.cuda.nvtx.range_pop
    if a.cpu:
        try:
            push("check"), pop()
        except RuntimeError:  # a PyTorch built without CUDA has no NVTX
            push, pop = (lambda name: None), (lambda: None)
    t0 = time.perf_counter()
    for step in range(a.steps):
        state["step"] = step
        h = time.perf_counter()
        push("step %d" % step)
        push("forward")
        loss = torch.nn.functional.mse_loss(model(x), y)
        pop()
        push("backward")
        loss.backward()  # FSDP gathers each block again, then reduce-scatters its gradients
        pop()
        push("optimizer")
        opt.step()
        opt.zero_grad(set_to_none=True)
        pop()
        loss.item()  # the loop waits for the GPU, as most do
        pop()
        host.append(time.perf_counter() - h)
        state["step"] = -1
    wall = time.perf_counter() - t0

    per_step = [collections.defaultdict(list) for _ in range(a.steps)]
    outside = 0
    for step, op, nbytes in calls:
        if 0 <= step < a.steps:
            per_step[step][op].append(nbytes)
        else:
            outside += 1
    print(json.dumps({"tool": "fsdp_steps", "rank": rank, "world": world, "steps": a.steps,
                      "collectives_per_step": [dict(s) for s in per_step], "outside_steps": outside,
                      "param_bytes": sum(p.numel() * p.element_size() for p in model.parameters()),  # unsharded sizes
                      "host_step_s": host, "wall_s": wall, "torch": torch.__version__}), flush=True)
    dist.destroy_process_group()
    if not calls and world > 1:
        print("fsdp_steps: rank %d counted no all-gathers or reduce-scatters: this PyTorch's FSDP does not call "
              "torch.distributed.all_gather_into_tensor and reduce_scatter_tensor, so the check has nothing to compare" % rank,
              file=sys.stderr)
        return 3
    return 0


if __name__ == "__main__":
    sys.exit(main())
