"""A known NCCL workload, timed by itself: the check for wrapped runs.

Run under torchrun (one process per GPU; with one GPU, --nproc_per_node 1
gives single-rank communicators, whose collectives NCCL 2.28 runs as local
copies without telling a profiler plugin, and --nproc_per_node 2
--share-gpu two ranks on the one GPU):

    python3 -m torch.distributed.run --nproc_per_node 2 examples/torch/allreduce_pp.py

Each rank issues, per message size, --iters all-reduces and all-gathers on
a data-parallel group named "dp", and, when there are at least two ranks,
--iters send/recv pairs with its pipeline neighbour (rank r ↔ r xor 1) on
a group named "pp" (batch_isend_irecv), then --iters one-way transfers
(the even rank sends, the odd one receives). It times every loop with CUDA events around it and
prints one JSON line per rank at the end: the counts it issued, the bytes
of each call (nccl-tests' S: for all-gather the gathered size), the loop's
device time, the host time its calls took to return (host_seconds: when
it is close to the loop's time, the loop waited on the host, not on the
device), the bus bandwidth nccl-tests would report, and the whole
run's wall time — so a profiler's counts and bandwidths can be checked
against figures it did not compute.

With --slow-rank R --slow-ms X, rank R holds its stream X ms (a GPU sleep,
torch.cuda._sleep, calibrated once against CUDA events) before each timed
all-reduce, so it arrives X ms after the others at every one: a straggler
of known lateness. Its JSON line then carries slow_calls and the
calibrated slow_ms_measured.

With --torch-trace DIR, torch.profiler (CPU and CUDA activities) records
the whole loop and each rank writes DIR/rank<R>.json (export_chrome_trace):
traces for `profile-run import` to read back.
"""

import argparse
import json
import os
import sys
import time


def parse(argv=None):
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--iters", type=int, default=20, help="calls per operation and size")
    p.add_argument("--warmup", type=int, default=3, help="untimed calls per operation and size, first")
    p.add_argument("--sizes-mib", default="1,64", help="message sizes S in MiB, comma-separated")
    p.add_argument("--dtype", default="float32", choices=["float32", "bfloat16"])
    p.add_argument("--share-gpu", action="store_true",
                   help="with fewer GPUs than ranks, let ranks share one: each gets an NCCL_HOSTID of its own, "
                        "so NCCL takes them for different hosts and connects them through its network transport "
                        "(a test set-up: slow, but every collective and p2p is a real NCCL operation)")
    p.add_argument("--slow-rank", type=int, default=-1, help="the rank that arrives late at every timed all-reduce")
    p.add_argument("--slow-ms", type=float, default=0.0, help="how late --slow-rank arrives, in ms of GPU sleep")
    p.add_argument("--nvtx-steps", action="store_true",
                   help="mark every call (warm-up and timed) as an NVTX range \"step N\" (N counting from 0), "
                        "as a training loop marks its steps for profile-run")
    p.add_argument("--torch-trace", default="", metavar="DIR", help="record the loop with torch.profiler and write DIR/rank<R>.json")
    a = p.parse_args(argv)
    if a.iters < 1 or a.warmup < 0:
        p.error("--iters must be at least 1 and --warmup not negative")
    if a.slow_ms < 0:
        p.error("--slow-ms must not be negative")
    a.sizes = [int(float(s) * (1 << 20)) for s in a.sizes_mib.split(",") if s]
    if not a.sizes or min(a.sizes) <= 0:
        p.error("--sizes-mib needs positive sizes")
    return a


def main(argv=None):
    a = parse(argv)
    import torch
    import torch.distributed as dist

    rank, world = int(os.environ.get("RANK", 0)), int(os.environ.get("WORLD_SIZE", 1))
    local = int(os.environ.get("LOCAL_RANK", 0))
    if a.share_gpu and world > torch.cuda.device_count():
        # NCCL refuses two ranks of one communicator on one GPU of one
        # host; the host is what NCCL_HOSTID says.
        os.environ["NCCL_HOSTID"] = "allreduce-pp-rank-%d" % rank
    dev = torch.device("cuda", local % torch.cuda.device_count())
    torch.cuda.set_device(dev)
    dist.init_process_group("nccl", device_id=dev)
    dtype = getattr(torch, a.dtype)
    esize = torch.tensor([], dtype=dtype).element_size()
    dp = dist.new_group(list(range(world)), group_desc="dp")
    peer = rank ^ 1
    pp = None
    if world >= 2:
        # Pipeline groups of neighbour pairs; every rank creates every
        # group, as new_group requires.
        for first in range(0, world - 1, 2):
            g = dist.new_group([first, first + 1], group_desc="pp")
            if rank in (first, first + 1):
                pp = g
        if peer >= world:
            pp = None
    t0 = time.perf_counter()
    results = []
    slow = {}
    late = None
    if rank == a.slow_rank and a.slow_ms > 0:
        # torch.cuda._sleep spins for a number of GPU cycles: find how many
        # make a millisecond here, then how long the sleep really takes.
        def sleep_ms(cycles, n=5):
            start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            start.record()
            for _ in range(n):
                torch.cuda._sleep(cycles)
            end.record()
            end.synchronize()
            return start.elapsed_time(end) / n

        sleep_ms(1000)
        probe = 10_000_000
        cycles = max(int(probe * a.slow_ms / sleep_ms(probe)), 1)
        slow = {"slow_ms": a.slow_ms, "slow_ms_measured": sleep_ms(cycles), "slow_calls": 0}

        def late():
            torch.cuda._sleep(cycles)
            slow["slow_calls"] += 1

    steps = {"n": 0}

    def step(body):
        # One NVTX range per call: what a training loop does once per step.
        if not a.nvtx_steps:
            return body
        def marked():
            torch.cuda.nvtx.range_push("step %d" % steps["n"])
            body()
            torch.cuda.nvtx.range_pop()
            steps["n"] += 1
        return marked

    def timed(op, size, body, before=None):
        body = step(body)
        for _ in range(a.warmup):
            body()
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        torch.cuda.synchronize()
        start.record()
        host = 0.0
        for _ in range(a.iters):
            if before is not None:
                before()
            h = time.perf_counter()
            body()
            host += time.perf_counter() - h
        end.record()
        end.synchronize()
        secs = start.elapsed_time(end) / 1e3
        n = dist.get_world_size(dp) if op in ("AllReduce", "AllGather") else 2
        factor = {"AllReduce": 2 * (n - 1) / n, "AllGather": (n - 1) / n, "SendRecv": 1.0, "Send": 1.0, "Recv": 1.0}[op]
        results.append({
            "op": op, "bytes": size, "calls": a.iters, "warmup_calls": a.warmup,
            "seconds": secs, "host_seconds": host, "busbw_GBps": factor * size * a.iters / secs / 1e9 if secs > 0 else 0.0,
        })

    prof = None
    if a.torch_trace:
        from torch.profiler import ProfilerActivity, profile
        prof = profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA])
        prof.__enter__()
    for size in a.sizes:
        n = size // esize
        x = torch.ones(n, dtype=dtype, device=dev)
        timed("AllReduce", size, lambda: dist.all_reduce(x, group=dp), late)
        world_dp = dist.get_world_size(dp)
        part = torch.ones(n // world_dp, dtype=dtype, device=dev)
        out = torch.empty(part.numel() * world_dp, dtype=dtype, device=dev)
        timed("AllGather", out.numel() * esize, lambda: dist.all_gather_into_tensor(out, part, group=dp))
        if pp is not None:
            buf = torch.ones(n, dtype=dtype, device=dev)
            rbuf = torch.empty_like(buf)

            def pair():
                ops = [dist.P2POp(dist.isend, buf, peer, group=pp), dist.P2POp(dist.irecv, rbuf, peer, group=pp)]
                for w in dist.batch_isend_irecv(ops):
                    w.wait()

            timed("SendRecv", size, pair)
            # One way: the even rank of the pair sends, the odd one
            # receives, each call on its own (no group).
            if rank % 2 == 0:
                timed("Send", size, lambda: dist.send(buf, peer, group=pp))
            else:
                timed("Recv", size, lambda: dist.recv(rbuf, peer, group=pp))
    torch.cuda.synchronize()
    wall = time.perf_counter() - t0
    if prof is not None:
        prof.__exit__(None, None, None)
        os.makedirs(a.torch_trace, exist_ok=True)
        prof.export_chrome_trace(os.path.join(a.torch_trace, "rank%d.json" % rank))
    print(json.dumps({"tool": "allreduce_pp", "rank": rank, "world": world, "device": str(dev),
                      "torch": torch.__version__, "nccl": ".".join(map(str, torch.cuda.nccl.version())),
                      "wall_s": wall, "results": results, "nvtx_steps": steps["n"], **slow}), flush=True)
    dist.destroy_process_group()
    return 0


if __name__ == "__main__":
    sys.exit(main())
