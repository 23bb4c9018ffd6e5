#!/usr/bin/env python3
"""The built-in trainer's model in eager PyTorch, on one device.

profile-run's built-in trainer (pipeline/) trains a stack of Width x Width
bias-free linear layers, each followed by tanh, on inputs uniform in +-1 with
targets tanh(x.P); the loss is the mean squared error over a step's rows and
features. This is the same model, data rule, schedule of work and update in
PyTorch, unpipelined, so that the cost of profiling it with torch.profiler
can be set beside the cost of trainscope's profiler on the trainer
(scripts/gpu-bench.sh runs both).

What matches the trainer (pipeline/model.go, passes.go, step.go,
optimizer.go, rank.go):

- weights uniform in +-sqrt(3/width), row-major [in][out], so a layer is
  z = x.W; the target projection P uniform in +-1.5*sqrt(3/width); inputs
  uniform in +-1 (drawn with torch's generator, not the trainer's: the
  values differ, the distributions do not);
- per step, M microbatches of R rows: the step's inputs are copied host to
  device in one copy at the start of the step (pinned host memory on CUDA),
  their targets computed there, tanh(x.P) with one float32 GEMM and a tanh
  (pipeline/dataset.go loadBatch), and each microbatch's input copied on
  the device into the first layer's activation buffer; then every
  microbatch runs forward, loss gradient and backward;
- the loss gradient of a microbatch is (output - target) scaled by
  2 / (M * R * width), so the weight gradients accumulated over the
  microbatches are those of the step's mean squared error (lossScale in
  pipeline/rank.go); the microbatch's sum of squared errors is computed on
  the device (a dot product of output - target with itself) and the M sums
  copied to the host in one copy after the step, as the trainer does
  (pipeline/passes.go lossGrad, step.go finish);
- the weight gradient accumulates into its buffer with the GEMM itself
  (beta = 1), the first layer's input gradient is not computed, and the
  update is plain SGD on all weights at once followed by zeroing the
  gradients: with --grad explicit (the default) the kernels of a step are
  the trainer's one for one on one rank (pp 1, vpp 1): per microbatch and
  layer a GEMM and a tanh forward, a tanh backward and two GEMMs backward
  (one for the first layer), four for the loss; per step one copy to the
  device, a GEMM and a tanh for the targets, M copies on the device, one
  copy to the host, one SGD update and one memset;
- each step ends with the device synchronised and the loss on the host;
  its time is that interval (time.perf_counter around the step, after
  torch.cuda.synchronize()).

Pipelining is not reproduced: on one device the whole model runs as one
stage, which is the same FLOPs as the trainer's pp x vpp chunks without
their transfers.

--grad autograd instead runs the model as PyTorch users write it
(torch.tanh(x @ w) per layer, loss.backward() per microbatch, torch.optim.SGD
and zero_grad(set_to_none=True)): the same FLOPs, a few more kernels
(gradient accumulation adds, the loss's autograd graph).

--dtype:
  float32  full fp32 GEMMs (TF32 off).
  tf32     fp32 tensors, GEMMs in TF32 (torch.backends.cuda.matmul
           fp32_precision = "tf32" where that exists, else allow_tf32 = True).
  bf16     bf16 compute with fp32 master weights. Explicit: activations,
           GEMM operands and tanh in bf16 (cuBLAS accumulates in fp32); the
           weights are cast to bf16 once per step, each microbatch's weight
           gradient is computed in bf16 and added into the fp32 gradient
           (one add kernel per layer and microbatch, where fp32 accumulates
           in the GEMM); loss, gradients and update in fp32. Autograd:
           torch.autocast(dtype=torch.bfloat16) around the forward.

--profile torch runs the steps (warm-up included, as trainscope's profiler
covers every step of profile-run) inside torch.profiler.profile with the CPU
and CUDA activities, record_shapes off and no schedule; nothing is exported
while steps run. --profile cuda does the same with the CUDA activity alone:
CUPTI's kernel, copy and memset records without the operators' host ranges,
what a kernel tracer without host instrumentation costs. After the last timed step it prints the profiler's table on
stderr (and writes a Chrome trace with --torch-trace).

Output: a line per step on stderr, and on stdout ONE JSON line at the end:
  {"tool": "torch", "profile": "off"|"torch"|"cuda", "steps": N,
   "median_step_s": ..., "mean_step_s": ..., "loss_first": ...,
   "loss_last": ..., "model_flops_per_step": ..., ...}
over the N timed steps, which follow --warmup untimed steps; loss_first is
the loss of the run's first step (step 0, before any update), loss_last the
last step's. step_s lists every timed step. model_flops_per_step is
6 * rows_per_step * width^2 * layers (forward 2, backward 4 per weight
element and row; the first layer's skipped input gradient is not taken off).

    python3 benchmarks/torch/twin.py --device cpu --width 32 --layers 4 --steps 3
    python3 benchmarks/torch/twin.py --dry-run      # the configuration, no torch needed
"""

import argparse
import json
import math
import statistics
import sys
import time

DTYPES = ("float32", "tf32", "bf16")


def model_flops_per_step(width, layers, microbatches, microbatch_size):
    """Model FLOPs of one step: 2 forward and 4 backward per weight and row."""
    return 6 * microbatches * microbatch_size * width * width * layers


def parse_args(argv=None):
    p = argparse.ArgumentParser(
        prog="twin.py",
        description="The built-in trainer's model in eager PyTorch on one device; "
        "prints one JSON line with the step times.",
        epilog="Defaults are profile-run's default model (pipeline.DefaultConfig).",
    )
    p.add_argument("--width", type=int, default=128, help="layer width (default 128)")
    p.add_argument("--layers", type=int, default=16, help="number of layers (default 16)")
    p.add_argument("--microbatches", type=int, default=8, help="microbatches per step (default 8)")
    p.add_argument("--microbatch-size", type=int, default=16, help="rows per microbatch (default 16)")
    p.add_argument("--steps", type=int, default=30, help="timed steps (default 30)")
    p.add_argument("--warmup", type=int, default=3, help="untimed steps before them (default 3)")
    p.add_argument("--lr", type=float, default=2.0, help="SGD learning rate (default 2, as the trainer)")
    p.add_argument("--dtype", choices=DTYPES, default="float32", help="GEMM precision (default float32)")
    p.add_argument("--profile", choices=("off", "torch", "cuda"), default="off",
                   help="off; torch: the steps inside torch.profiler.profile (CPU and CUDA activities); "
                   "cuda: the same with the CUDA activity alone")
    p.add_argument("--grad", choices=("explicit", "autograd"), default="explicit",
                   help="explicit: the trainer's kernels one for one (default); autograd: loss.backward() and torch.optim.SGD")
    p.add_argument("--device", default="cuda", help="cuda (default), cuda:N or cpu")
    p.add_argument("--seed", type=int, default=1, help="seed of torch's generator for weights and data")
    p.add_argument("--dataset-steps", type=int, default=4,
                   help="the data set is drawn once, this many steps' rows; step s uses rows "
                   "[s*B mod D, ...) (default 4; the step time does not depend on it)")
    p.add_argument("--torch-trace", default="", help="with --profile torch or cuda: write a Chrome trace here after timing")
    p.add_argument("--table-rows", type=int, default=15, help="rows of the profiler's table printed on stderr (0: none)")
    p.add_argument("--quiet", action="store_true", help="no per-step lines on stderr")
    p.add_argument("--dry-run", action="store_true", help="print the configuration as JSON and exit (torch not imported)")
    args = p.parse_args(argv)
    for name in ("width", "layers", "microbatches", "microbatch_size", "steps", "dataset_steps"):
        if getattr(args, name) < 1:
            p.error("--%s %d: must be at least 1" % (name.replace("_", "-"), getattr(args, name)))
    if args.warmup < 0:
        p.error("--warmup %d: must not be negative" % args.warmup)
    if not (args.lr > 0 and math.isfinite(args.lr)):
        p.error("--lr %r: must be positive and finite" % args.lr)
    if args.torch_trace and args.profile == "off":
        p.error("--torch-trace needs --profile torch or cuda")
    return args


def describe(args):
    """The run's configuration, as the JSON line reports it."""
    rows = args.microbatches * args.microbatch_size
    return {
        "width": args.width,
        "layers": args.layers,
        "microbatches": args.microbatches,
        "microbatch_size": args.microbatch_size,
        "rows_per_step": rows,
        "warmup": args.warmup,
        "lr": args.lr,
        "dtype": args.dtype,
        "grad": args.grad,
        "device": args.device,
        "seed": args.seed,
        "dataset_rows": rows * args.dataset_steps,
        "model_flops_per_step": model_flops_per_step(args.width, args.layers, args.microbatches, args.microbatch_size),
    }


def set_matmul_precision(torch, tf32):
    """Turn TF32 GEMMs on or off through one API only: PyTorch 2.9 and later
    have fp32_precision and refuse a mix of it with allow_tf32. Returns
    whether TF32 is on."""
    m = torch.backends.cuda.matmul
    try:
        m.fp32_precision = "tf32" if tf32 else "ieee"
        return m.fp32_precision == "tf32"
    except Exception:  # older PyTorch: no fp32_precision
        m.allow_tf32 = tf32
        return bool(m.allow_tf32)


class Twin:
    """The model, its data and its buffers on one device."""

    def __init__(self, torch, args):
        self.t = torch
        self.args = args
        self.dev = torch.device(args.device)
        self.cuda = self.dev.type == "cuda"
        self.bf16 = args.dtype == "bf16"
        self.cdt = torch.bfloat16 if self.bf16 else torch.float32  # compute dtype
        m, r, w, n = args.microbatches, args.microbatch_size, args.width, args.layers
        self.rows = m * r
        self.scale = 2.0 / (self.rows * w)  # pipeline/rank.go lossScale
        gen = torch.Generator(device=self.dev)
        gen.manual_seed(args.seed)

        def uniform(shape, a, dtype=torch.float32):
            v = torch.rand(shape, generator=gen, device=self.dev, dtype=dtype)
            return v.mul_(2 * a).sub_(a)

        f32 = torch.float32
        # Weights (and, below, gradients): one buffer each, a view per
        # layer, as a trainer chunk holds them.
        self.weights = uniform((n, w, w), math.sqrt(3.0 / w))
        # The target projection P, on the device; the data set's inputs,
        # drawn once, kept on the host and copied to the device per step.
        self.proj = uniform((w, w), 1.5 * math.sqrt(3.0 / w))
        d = self.rows * args.dataset_steps
        self.data_x = uniform((d, w), 1.0).cpu()
        if self.cuda:
            self.data_x = self.data_x.pin_memory()
        # Device buffers for the step's inputs and targets, per microbatch.
        self.x = torch.empty((m, r, w), device=self.dev, dtype=f32)
        self.tg = torch.empty((m, r, w), device=self.dev, dtype=f32)
        # Each microbatch's sum of squared errors, on the device, and where
        # the host reads them after the step.
        self.sse = torch.empty((m,), device=self.dev, dtype=f32)
        self.sse_host = torch.empty((m,), dtype=f32, pin_memory=self.cuda)
        if args.grad == "explicit":
            self.grads = torch.zeros((n, w, w), device=self.dev, dtype=f32)
            self.acts = torch.empty((n + 1, r, w), device=self.dev, dtype=self.cdt)
            self.g = torch.empty((r, w), device=self.dev, dtype=f32)
            self.scratch = torch.empty((2, r, w), device=self.dev, dtype=self.cdt)
            if self.bf16:
                self.w16 = torch.empty((n, w, w), device=self.dev, dtype=self.cdt)
                self.dw16 = torch.empty((w, w), device=self.dev, dtype=self.cdt)
                self.dy16 = torch.empty((r, w), device=self.dev, dtype=self.cdt)
            self.tanh_backward = self._tanh_backward_op()
        else:
            self.params = [self.weights[i].clone().requires_grad_(True) for i in range(n)]
            self.opt = torch.optim.SGD(self.params, lr=args.lr)

    def _tanh_backward_op(self):
        """dz = dy * (1 - y^2) into a given buffer: aten's tanh_backward
        (the kernel autograd uses), with its out= form where it exists."""
        aten = self.t.ops.aten
        try:
            op = aten.tanh_backward.grad_input
            y = self.t.zeros((1,), device=self.dev)
            op(y, y, grad_input=self.t.empty_like(y))
            return lambda dy, y, out: op(dy, y, grad_input=out)
        except Exception:
            return lambda dy, y, out: out.copy_(aten.tanh_backward(dy, y))

    def load_batch(self, step):
        """Copy the step's inputs to the device in one copy and compute their
        targets there, tanh(x.P), in float32 whatever --dtype says (the
        trainer's computeTargets)."""
        t, w = self.t, self.args.width
        first = (step * self.rows) % self.data_x.shape[0]
        x, tg = self.x.view(self.rows, w), self.tg.view(self.rows, w)
        x.copy_(self.data_x[first:first + self.rows], non_blocking=True)
        tf32 = self.args.dtype == "tf32"
        if tf32:
            set_matmul_precision(t, False)
        t.mm(x, self.proj, out=tg)
        if tf32:
            set_matmul_precision(t, True)
        tg.tanh_()

    def synchronize(self):
        if self.cuda:
            self.t.cuda.synchronize(self.dev)

    def step(self, step):
        """One training step; returns its loss (before the update)."""
        self.load_batch(step)
        if self.args.grad == "explicit":
            self._explicit()
        else:
            self._autograd()
        self.sse_host.copy_(self.sse, non_blocking=True)
        self.synchronize()
        return float(self.sse_host.double().sum()) / (self.rows * self.args.width)

    def _explicit(self):
        t, a = self.t, self.args
        n = a.layers
        w = self.weights
        if self.bf16:
            w = self.w16
            w.copy_(self.weights)
        acts, g, s0, s1 = self.acts, self.g, self.scratch[0], self.scratch[1]
        for mb in range(a.microbatches):
            # the microbatch's input into the first activation buffer
            # (copyBatch), then forward: z = x.W and tanh in place
            # (pipeline/passes.go forward)
            acts[0].copy_(self.x[mb])
            x0 = acts[0]
            for j in range(n):
                inp = x0 if j == 0 else acts[j]
                t.mm(inp, w[j], out=acts[j + 1])
                acts[j + 1].tanh_()
            # loss gradient: copy, subtract, sum of squares, scale (lossGrad)
            g.copy_(acts[n])
            g.sub_(self.tg[mb])
            flat = g.view(-1)
            t.dot(flat, flat, out=self.sse[mb])
            g.mul_(self.scale)
            dy = g
            if self.bf16:
                self.dy16.copy_(g)
                dy = self.dy16
            # backward (pipeline/passes.go backward)
            for j in range(n, 0, -1):
                y = acts[j]
                inp = x0 if j == 1 else acts[j - 1]
                self.tanh_backward(dy, y, s0)
                if self.bf16:
                    t.mm(inp.t(), s0, out=self.dw16)
                    self.grads[j - 1].add_(self.dw16)
                else:
                    self.grads[j - 1].addmm_(inp.t(), s0)
                if j == 1:
                    break  # nobody needs the gradient of the data
                t.mm(s0, w[j - 1].t(), out=s1)
                dy = s1
        # SGD on all weights at once, then zero the gradients (optimizer.go)
        self.weights.add_(self.grads, alpha=-a.lr)
        self.grads.zero_()

    def _autograd(self):
        t, a = self.t, self.args
        inv = 1.0 / (self.rows * a.width)
        for mb in range(a.microbatches):
            ctx = t.autocast(device_type=self.dev.type, dtype=t.bfloat16) if self.bf16 else _NoContext()
            with ctx:
                h = self.x[mb]
                for p in self.params:
                    h = t.tanh(h @ p)
            d = h.float() - self.tg[mb]
            flat = d.detach().view(-1)
            t.dot(flat, flat, out=self.sse[mb])
            loss = (d * d).sum() * inv
            loss.backward()
        self.opt.step()
        self.opt.zero_grad(set_to_none=True)


class _NoContext:
    def __enter__(self):
        return self

    def __exit__(self, *exc):
        return False


def device_events(torch, prof):
    """Device activity records (kernels, copies, memsets) the profiler
    collected, or None where it cannot say."""
    try:
        n = 0
        for e in prof.key_averages():
            if str(getattr(e, "device_type", "")).endswith("CUDA"):
                n += e.count
        return n
    except Exception:
        return None


def print_table(prof, rows, cuda):
    keys = ("self_device_time_total", "self_cuda_time_total") if cuda else ()
    for key in keys + ("self_cpu_time_total",):
        try:
            print(prof.key_averages().table(sort_by=key, row_limit=rows), file=sys.stderr)
            return
        except Exception:
            continue


def main(argv=None):
    args = parse_args(argv)
    info = describe(args)
    if args.dry_run:
        print(json.dumps(dict(info, tool="torch", profile=args.profile, steps=args.steps, dry_run=True)))
        return 0
    try:
        import torch
    except ImportError as e:
        print("twin.py: PyTorch is not importable by %s: %s" % (sys.executable, e), file=sys.stderr)
        return 3
    if not hasattr(torch, "tensor"):
        # A directory named torch on sys.path (this one, from benchmarks/)
        # imports as an empty namespace package.
        print("twin.py: 'import torch' found %s, not PyTorch: run from another directory"
              % list(getattr(torch, "__path__", [])), file=sys.stderr)
        return 3
    dev = torch.device(args.device)
    if dev.type == "cuda":
        if not torch.cuda.is_available():
            print("twin.py: --device %s: CUDA is not available to this PyTorch (%s); use --device cpu"
                  % (args.device, torch.__version__), file=sys.stderr)
            return 3
        if dev.index is None:
            dev = torch.device("cuda", torch.cuda.current_device())
            args.device = str(dev)
        torch.cuda.set_device(dev)
    elif dev.type != "cpu":
        print("twin.py: --device %s: only cuda and cpu" % args.device, file=sys.stderr)
        return 2
    tf32 = set_matmul_precision(torch, args.dtype == "tf32")
    info = describe(args)
    twin = Twin(torch, args)
    twin.synchronize()

    prof = None
    ctx = _NoContext()
    activities = []
    if args.profile != "off":
        from torch.profiler import ProfilerActivity, profile
        acts = [ProfilerActivity.CPU] if args.profile == "torch" or not twin.cuda else []
        if twin.cuda:
            acts.append(ProfilerActivity.CUDA)
        activities = [str(a).split(".")[-1] for a in acts]
        prof = profile(activities=acts, record_shapes=False)
        ctx = prof

    losses, times = [], []
    with ctx:
        for i in range(args.warmup + args.steps):
            t0 = time.perf_counter()
            loss = twin.step(i)
            dt = time.perf_counter() - t0
            losses.append(loss)
            if i >= args.warmup:
                times.append(dt)
            if not args.quiet:
                print("step %d: loss %.6f, %.3fms%s" % (i, loss, dt * 1e3, " (warm-up)" if i < args.warmup else ""),
                      file=sys.stderr)
    # Everything below is after the timed steps.
    post = {}
    if prof is not None:
        t0 = time.perf_counter()
        n = device_events(torch, prof)
        if n is not None:
            post["device_events_per_step"] = n / (args.warmup + args.steps)
        if args.table_rows > 0:
            print_table(prof, args.table_rows, twin.cuda)
        if args.torch_trace:
            prof.export_chrome_trace(args.torch_trace)
        post["profiler_post_s"] = time.perf_counter() - t0
    out = {
        "tool": "torch",
        "profile": args.profile,
        "steps": args.steps,
        "median_step_s": statistics.median(times),
        "mean_step_s": statistics.fmean(times),
        "loss_first": losses[0],
        "loss_last": losses[-1],
        "model_flops_per_step": info["model_flops_per_step"],
    }
    out.update(info)
    out.update(post)
    out.update({
        "activities": activities,
        "tf32": tf32,
        "torch_version": torch.__version__,
        "device_name": torch.cuda.get_device_name(dev) if twin.cuda else "cpu",
        "step_s": times,
    })
    print(json.dumps(out))
    return 0


if __name__ == "__main__":
    sys.exit(main())
