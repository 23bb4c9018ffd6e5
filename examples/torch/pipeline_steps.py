"""A pipeline-parallel training loop, named as Megatron-LM names its groups.

    profile-run -- python3 -m torch.distributed.run --nproc_per_node 4 \
        examples/torch/pipeline_steps.py --pp 2

The ranks form --pp pipeline stages times WORLD_SIZE/--pp data-parallel
replicas: rank = replica * pp + stage. Every rank makes every group, as
torch.distributed.new_group requires, with Megatron-LM's descriptions:
"PIPELINE_MODEL_PARALLEL_GROUP" for each replica's stages and
"DATA_PARALLEL_GROUP" for each stage's replicas. A rank's stage is its
rank in its pipeline group. PyTorch up to at least 2.11 passes NCCL no
name for a group, so profile-run stages each process by the communicator
it sends and receives over; --name-comms sets each communicator's NCCL
name to its group's description (NCCLConfig.comm_name, where this
PyTorch has it), so that several communicators share one name and
profile-run stages by the pipeline's (docs/wrap.md, "Pipeline stages").

Each stage holds --layers bias-free Linear + tanh layers. A step is an
NVTX range "step N" running a GPipe schedule: every microbatch forward
(activations passed on with batch_isend_irecv, as Megatron-LM does), then
every microbatch backward (gradients passed back), then an all-reduce of
the stage's gradients over its data-parallel group and an SGD update. The
loss is the mean square of the last stage's output.

Each microbatch's forward and backward computation is an NVTX range
named "forward microbatch M" and "backward microbatch M", so that
profile-run labels the kernels launched inside with their phase and
microbatch (docs/wrap.md, "Forward and backward work"); --no-phase-ranges
leaves them out.

Each rank times its own forward and backward computation with CUDA events
(the layers only, not the transfers) and its steps with perf_counter
around the same range_push ... range_pop, and prints one JSON line at the
end, so that what profile-run reports can be checked against figures it
did not compute (scripts/wrapcheck.py --pipeline).

With fewer GPUs than ranks, --share-gpu runs the ranks on them (each with
a host id of its own, so NCCL connects them through its network
transport).
"""

import argparse
import json
import os
import sys
import time


def parse(argv=None):
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--pp", type=int, default=2, help="pipeline stages (WORLD_SIZE must be a multiple)")
    p.add_argument("--microbatches", type=int, default=8, help="microbatches per step")
    p.add_argument("--rows", type=int, default=1024, help="rows per microbatch (large enough that the GEMMs, not their launches, take the time)")
    p.add_argument("--width", type=int, default=2048, help="layer width")
    p.add_argument("--layers", type=int, default=4, help="layers per stage")
    p.add_argument("--steps", type=int, default=12, help="training steps (the first is a warm-up)")
    p.add_argument("--share-gpu", action="store_true", help="let the ranks share GPUs when there are fewer GPUs than ranks")
    p.add_argument("--name-comms", action="store_true", help="give each group's NCCL communicator its description as name, where PyTorch can")
    p.add_argument("--unbatched", action="store_true", help="send and receive with isend/irecv, not batch_isend_irecv")
    p.add_argument("--lazy-init", action="store_true", help="no device_id to init_process_group: communicators made at first use")
    p.add_argument("--no-phase-ranges", action="store_true", help="no NVTX range around each microbatch's forward and backward")
    p.add_argument("--all-to-all", action="store_true", help="after each microbatch's forward, an all-to-all of its output over the data-parallel group (as an expert-parallel layer's)")
    a = p.parse_args(argv)
    if min(a.pp, a.microbatches, a.rows, a.width, a.layers, a.steps) < 1:
        p.error("every count must be at least 1")
    return a


def main(argv=None):
    a = parse(argv)
    import torch
    import torch.distributed as dist

    rank, world = int(os.environ.get("RANK", 0)), int(os.environ.get("WORLD_SIZE", 1))
    local = int(os.environ.get("LOCAL_RANK", 0))
    if world % a.pp != 0:
        print("pipeline_steps: WORLD_SIZE %d is not a multiple of --pp %d" % (world, a.pp), file=sys.stderr)
        return 2
    if a.share_gpu and world > torch.cuda.device_count():
        # NCCL refuses two ranks of one communicator on one GPU of one
        # host; the host is what NCCL_HOSTID says.
        os.environ["NCCL_HOSTID"] = "pipeline-steps-rank-%d" % rank
    dev = torch.device("cuda", local % torch.cuda.device_count())
    torch.cuda.set_device(dev)
    if a.lazy_init:
        dist.init_process_group("nccl")
    else:
        dist.init_process_group("nccl", device_id=dev)
    pp, dp = a.pp, world // a.pp
    replica, stage = divmod(rank, pp)

    def options(desc):
        """pg_options naming the group's NCCL communicator, or None where
        not asked for or this PyTorch cannot."""
        if not a.name_comms:
            return None
        o = dist.ProcessGroupNCCL.Options()
        if not hasattr(o.config, "comm_name"):
            return None
        o.config.comm_name = desc
        return o

    named = a.name_comms and options("probe") is not None
    pipe = data = None
    for r in range(dp):
        desc = "PIPELINE_MODEL_PARALLEL_GROUP"
        g = dist.new_group([r * pp + s for s in range(pp)], group_desc=desc, pg_options=options(desc))
        if r == replica:
            pipe = g
    for s in range(pp):
        desc = "DATA_PARALLEL_GROUP"
        g = dist.new_group([r * pp + s for r in range(dp)], group_desc=desc, pg_options=options(desc))
        if s == stage:
            data = g
    prev = rank - 1 if stage > 0 else None
    nxt = rank + 1 if stage < pp - 1 else None

    torch.manual_seed(1234 + stage)
    weights = [(torch.randn(a.width, a.width, device=dev) / a.width ** 0.5).requires_grad_() for _ in range(a.layers)]

    def layers(x):
        for w in weights:
            x = torch.tanh(x @ w)
        return x

    def exchange(op, tensor, peer):
        if a.unbatched:
            # Outside a batch, and without eager initialisation, PyTorch
            # gives each pair of ranks a communicator of its own.
            op(tensor, peer, pipe).wait()
            return
        for work in dist.batch_isend_irecv([dist.P2POp(op, tensor, peer, pipe)]):
            work.wait()

    push, pop = torch.cuda.nvtx.range_push, torch.cuda.nvtx.range_pop
    host, compute, fwd_ms, bwd_ms = [], [], [], []
    phases = not a.no_phase_ranges
    all_to_alls = 0  # issued, warm-up included
    gen = torch.Generator(device=dev)
    gen.manual_seed(99 + replica)
    # Step -1 is a warm-up outside any NVTX step: cuBLAS's setup and
    # CUDA's module loading happen there, not between a step's events.
    for step in range(-1, a.steps):
        events = []  # (start, end) CUDA events around each computation
        fwd_events = 0  # the first fwd_events of events are the forward's
        torch.cuda.synchronize()
        h = time.perf_counter()
        if step >= 0:
            push("step %d" % step)
        ins, outs = [], []
        for m in range(a.microbatches):
            if prev is None:
                x = torch.randn(a.rows, a.width, device=dev, generator=gen)
            else:
                x = torch.empty(a.rows, a.width, device=dev)
                exchange(dist.irecv, x, prev)
                x.requires_grad_()
            s, e = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            if phases:
                push("forward microbatch %d" % m)
            s.record()
            y = layers(x)
            if nxt is None:
                y = (y * y).mean()
            e.record()
            if phases:
                pop()
            events.append((s, e))
            fwd_events += 1
            if a.all_to_all and dp > 1 and y.dim() == 2:
                # PyTorch runs it as a send and a receive to every rank
                # of the group, itself included.
                dist.all_to_all_single(torch.empty_like(y), y.detach().contiguous(), group=data)
                all_to_alls += 1
            if nxt is not None:
                exchange(dist.isend, y.detach(), nxt)
            ins.append(x)
            outs.append(y)
        for m in reversed(range(a.microbatches)):
            grad = None
            if nxt is not None:
                grad = torch.empty(a.rows, a.width, device=dev)
                exchange(dist.irecv, grad, nxt)
            s, e = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            if phases:
                # Autograd launches the backward kernels on a thread of its
                # own while this one waits here: profile-run labels them
                # with this range all the same.
                push("backward microbatch %d" % m)
            s.record()
            outs[m].backward(grad)
            e.record()
            if phases:
                pop()
            events.append((s, e))
            if prev is not None:
                exchange(dist.isend, ins[m].grad, prev)
        with torch.no_grad():
            for w in weights:
                if dp > 1:
                    dist.all_reduce(w.grad, group=data)
                w -= 1e-3 * w.grad
                w.grad = None
        torch.cuda.synchronize()  # the step ends when its work is done
        if step < 0:
            continue
        pop()
        host.append(time.perf_counter() - h)
        compute.append(sum(s.elapsed_time(e) for s, e in events))
        fwd_ms.append(sum(s.elapsed_time(e) for s, e in events[:fwd_events]))
        bwd_ms.append(sum(s.elapsed_time(e) for s, e in events[fwd_events:]))
    dist.barrier()
    print(json.dumps({"tool": "pipeline_steps", "rank": rank, "stage": stage, "replica": replica, "pp": pp, "dp": dp,
                      "microbatches": a.microbatches, "steps": a.steps, "host_step_s": host, "compute_ms": compute,
                      "forward_ms": fwd_ms, "backward_ms": bwd_ms, "phase_ranges": phases,
                      "ranks_per_gpu": -(-world // torch.cuda.device_count()), "comm_names": named,
                      "unbatched": a.unbatched, "lazy_init": a.lazy_init, "all_to_all": a.all_to_all,
                      "all_to_alls": all_to_alls}), flush=True)
    dist.destroy_process_group()
    return 0


if __name__ == "__main__":
    sys.exit(main())
