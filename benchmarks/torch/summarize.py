#!/usr/bin/env python3
"""Aggregate the raw results of scripts/gpu-bench.sh into bench.json and bench.md.

Standard library only: it runs on the GPU machine beside the benchmark.

    python3 benchmarks/torch/summarize.py --raw $OUT/raw --out $OUT

Inputs, all under --raw (written by scripts/gpu-bench.sh):

  runs.tsv      one row per process, tab-separated, with a header: job,
                dtype, variant, round, tool, rc, start, end, skip, width,
                layers, microbatches, microbatch_size, out, err, cmd
                (out and err relative to --raw).
  <out files>   profile-run's stdout, whose lines "step N: loss L, D" give
                each step's wall time (D a Go duration: 15.402ms, 1.2s,
                850µs); the twin's stdout, whose last JSON line holds
                step_s, its timed steps.
  settings.env  KEY=VALUE lines: the script's settings.
  gpu.csv       nvidia-smi --query-gpu=index,name,driver_version,memory.total
                --format=csv,noheader
  gemm.log      the GEMM benchmark's output (go test -bench lines).

Per process: the median of its step times after dropping the first `skip`
steps (profile-run: steps 0 .. skip-1, its warm-up; the twin runs its warm-up
untimed, so skip is 0 for it). Per job, dtype and variant: the median over
rounds of those per-process medians, their range, the ratio of that median
to the job's unprofiled figure of the same tool (trainscope variants to
trainscope-off, torch-profiler to torch-off) and the median over rounds of
the same ratio taken within each round (both processes of a pair ran
minutes apart at most); also the mean over processes of each one's mean
step and its ratio to the unprofiled one's (where steps fall in two modes,
a median jumps from one to the other as their mix changes). For every job, the model FLOP/s, 6 * rows *
width^2 * layers per step over the median step, and for the dtype's GEMM
rate on the trainer's shapes from gemm.log, its share of that rate.
"""

import argparse
import csv
import datetime
import json
import math
import os
import re
import statistics
import sys

# Variants in the order tables list them, with what each means.
VARIANTS = [
    ("trainscope-off", "trainscope", "profile-run -profile off"),
    ("trainscope-depth1", "trainscope", "profile-run -profile on -device-depth 1 (its default: actions and collectives device-timed)"),
    ("trainscope-depth0", "trainscope", "profile-run -profile on -device-depth 0 (every kernel device-timed)"),
    ("trainscope-trace", "trainscope", "profile-run -profile on -device-depth 0 -device-timing trace (every kernel timed from CUPTI's records, no events)"),
    ("trainscope-trace1", "trainscope", "profile-run -profile on -device-depth 1 -device-timing trace (actions and collectives timed from CUPTI's records, no events)"),
    ("trainscope-cupti", "trainscope", "profile-run -profile off wrapped by profile-run -- (CUPTI records every kernel, copy and memset)"),
    ("trainscope-sync", "trainscope", "profile-run -profile sync (stream synchronised around every range)"),
    ("torch-off", "torch", "twin.py --profile off"),
    ("torch-profiler", "torch", "twin.py --profile torch (torch.profiler, CPU and CUDA activities)"),
    ("torch-cuda", "torch", "twin.py --profile cuda (torch.profiler, the CUDA activity alone: CUPTI's kernel records)"),
]
BASELINE = {"trainscope": "trainscope-off", "torch": "torch-off"}
# The overhead targets (docs/benchmarks.md) are medians of at least this
# many fresh pairs.
MIN_ROUNDS = 6

_DURATION = re.compile(r"(\d+(?:\.\d+)?)(ns|us|µs|μs|ms|s|m|h)")
_UNIT_S = {"ns": 1e-9, "us": 1e-6, "µs": 1e-6, "μs": 1e-6, "ms": 1e-3, "s": 1.0, "m": 60.0, "h": 3600.0}
_STEP_LINE = re.compile(r"^step (\d+): loss (\S+), (\S+)\s*$")


def parse_go_duration(text):
    """Seconds in a Go time.Duration string.

    >>> parse_go_duration("15.402ms")
    0.015402
    >>> parse_go_duration("1m2.5s")
    62.5
    >>> parse_go_duration("850µs")
    0.00085
    >>> parse_go_duration("0s")
    0.0
    """
    text = text.strip()
    pos, total = 0, 0.0
    for m in _DURATION.finditer(text):
        if m.start() != pos:
            raise ValueError("not a Go duration: %r" % text)
        total += float(m.group(1)) * _UNIT_S[m.group(2)]
        pos = m.end()
    if pos != len(text) or pos == 0:
        raise ValueError("not a Go duration: %r" % text)
    return round(total, 12)


def parse_profile_run(text):
    """(step, loss, seconds) of every step line profile-run printed.

    >>> parse_profile_run("profile-run: training on cuda\\nstep 0: loss 0.381897, 60.244ms\\nstep 1: loss 0.359405, 1.5s\\n")
    [(0, 0.381897, 0.060244), (1, 0.359405, 1.5)]
    """
    steps = []
    for line in text.splitlines():
        m = _STEP_LINE.match(line)
        if m:
            steps.append((int(m.group(1)), float(m.group(2)), parse_go_duration(m.group(3))))
    return steps


def parse_twin(text):
    """The last JSON object line of the twin's stdout, or None."""
    for line in reversed(text.splitlines()):
        line = line.strip()
        if line.startswith("{"):
            try:
                return json.loads(line)
            except ValueError:
                return None
    return None


def flops_per_step(width, layers, microbatches, microbatch_size):
    """6 * rows * width^2 * layers: forward 2, backward 4."""
    return 6 * microbatches * microbatch_size * width * width * layers


def median(v):
    return statistics.median(v) if v else None


def read_text(path):
    try:
        with open(path, encoding="utf-8", errors="replace") as f:
            return f.read()
    except OSError:
        return ""


def first_lines(text, n=4):
    return [l.rstrip() for l in text.splitlines() if l.strip()][:n]


def process_result(raw, row):
    """One process: its step times and summary, from its output files."""
    out = read_text(os.path.join(raw, row["out"])) if row.get("out") else ""
    err = read_text(os.path.join(raw, row["err"])) if row.get("err") else ""
    skip = int(row.get("skip") or 0)
    res = {
        "round": int(row["round"]),
        "rc": int(row["rc"]),  # -1: not run (the command says why)
        "command": row.get("cmd", ""),
    }
    try:
        res["wall_s"] = round(float(row["end"]) - float(row["start"]), 3)
    except (KeyError, ValueError):
        pass
    losses = []
    if row["tool"] == "torch":
        j = parse_twin(out)
        times = list(j.get("step_s", [])) if j else []
        times = times[skip:]
        if j:
            losses = [j.get("loss_first"), j.get("loss_last")]
            for k in ("torch_version", "device_name", "device_events_per_step", "profiler_post_s", "tf32", "grad"):
                if k in j:
                    res[k] = j[k]
    else:
        steps = parse_profile_run(out)
        kept = [s for s in steps if s[0] >= skip]
        times = [s[2] for s in kept]
        res["steps_printed"] = len(steps)
        if steps:
            losses = [steps[0][1], steps[-1][1]]
    res["step_s"] = times
    res["skipped_steps"] = skip
    if losses:
        res["loss_first"], res["loss_last"] = losses
    if times:
        res["median_step_s"] = statistics.median(times)
        res["mean_step_s"] = statistics.fmean(times)
    res["ok"] = res["rc"] == 0 and bool(times)
    res["head"] = [l for l in first_lines(out, 6) if not l.startswith("===")][:4]
    if not res["ok"]:
        res["first_lines"] = first_lines(err) + first_lines(out)
    return res


def read_runs(raw):
    path = os.path.join(raw, "runs.tsv")
    with open(path, encoding="utf-8", newline="") as f:
        return list(csv.DictReader(f, delimiter="\t"))


def read_settings(raw):
    s = {}
    for line in read_text(os.path.join(raw, "settings.env")).splitlines():
        if "=" in line and not line.startswith("#"):
            k, v = line.split("=", 1)
            s[k.strip()] = v.strip()
    return s


def read_gpus(raw):
    gpus = []
    for row in csv.reader(read_text(os.path.join(raw, "gpu.csv")).splitlines()):
        row = [c.strip() for c in row]
        if len(row) >= 3 and row[0].isdigit():
            gpus.append({"index": int(row[0]), "name": row[1], "driver": row[2],
                         "memory": row[3] if len(row) > 3 else ""})
    return gpus


_BENCH_LINE = re.compile(r"^(Benchmark\S+?)(?:-(\d+))?\s+(\d+)\s+(.*)$")
_FLOPS_UNIT = re.compile(r"^([PTGMk]?)FLOP/s", re.I)
_PREFIX = {"": 1.0, "k": 1e3, "K": 1e3, "M": 1e6, "G": 1e9, "T": 1e12, "P": 1e15}


def dtype_of(name):
    """The dtype a benchmark's name says, by its components.

    >>> dtype_of("BenchmarkGemmTrainerShape/bf16/forward")
    'bf16'
    >>> dtype_of("BenchmarkGemmTrainerShape/fp32/grad_input")
    'float32'
    >>> dtype_of("BenchmarkGemmTrainerShape/tf32/forward")
    'tf32'
    """
    parts = re.split(r"[/_\-=,]", name.lower())
    for d, keys in (("bf16", ("bf16", "bfloat16")), ("tf32", ("tf32",)),
                    ("fp16", ("fp16", "float16", "half")), ("float32", ("fp32", "float32", "f32"))):
        if any(k in parts for k in keys):
            return d
    return None


def parse_gemm(text):
    """Benchmark lines: name, iterations and every metric, FLOP/s ones
    converted to FLOP/s.

    >>> r = parse_gemm("BenchmarkGemmTrainerShape/fp32/forward-16  200  171000 ns/op  50.2 TFLOP/s-raw-loop  0 B/op")
    >>> r[0]["dtype"], r[0]["form"], r[0]["flops"]
    ('float32', 'forward', 50200000000000.0)
    """
    out = []
    for line in text.splitlines():
        m = _BENCH_LINE.match(line.strip())
        if not m:
            continue
        name, rest = m.group(1), m.group(4).split()
        metrics = {}
        for i in range(0, len(rest) - 1, 2):
            try:
                metrics[rest[i + 1]] = float(rest[i])
            except ValueError:
                break
        flops, unit = None, None
        # Prefer a rate taken over the raw loop, then a median, then any.
        candidates = [u for u in metrics if _FLOPS_UNIT.match(u)]
        for pref in ("raw", "median", ""):
            picked = [u for u in candidates if pref in u.lower()]
            if picked:
                unit = picked[0]
                flops = metrics[unit] * _PREFIX[_FLOPS_UNIT.match(unit).group(1)]
                break
        parts = name.split("/")
        dt = dtype_of(name)
        form = "/".join(p for p in parts[1:] if dtype_of(p) is None) or "-"
        out.append({"name": name, "iterations": int(m.group(3)), "metrics": metrics,
                    "dtype": dt, "form": form, "flops": flops, "flops_unit": unit})
    return out


def gemm_rates(lines, prefer):
    """Per dtype, the GEMM rate of the trainer's step: the harmonic mean over
    the GEMM forms found (each form is the same FLOPs in a step: forward,
    weight gradient, input gradient), each form's rate the median over
    repeated lines. Lines from the benchmark named prefer are used where
    there are any; otherwise every line (a fallback benchmark).

    >>> ls = parse_gemm("BenchmarkX/fp32/forward 1 1 ns/op 40 TFLOP/s\\nBenchmarkX/fp32/grad_weight 1 1 ns/op 60 TFLOP/s")
    >>> round(gemm_rates(ls, "BenchmarkX")["float32"]["flops"] / 1e12, 3)
    48.0
    """
    chosen = [l for l in lines if l["name"].split("/")[0] == prefer]
    source = prefer
    if not chosen:
        chosen = lines
        source = "fallback: " + ", ".join(sorted({l["name"].split("/")[0] for l in lines})) if lines else None
    by = {}
    for l in chosen:
        if l["dtype"] and l["flops"]:
            by.setdefault(l["dtype"], {}).setdefault(l["form"], []).append(l["flops"])
    rates = {}
    for dt, forms in by.items():
        per = {f: statistics.median(v) for f, v in forms.items()}
        rates[dt] = {"flops": len(per) / sum(1.0 / r for r in per.values()), "forms": per, "source": source}
    return rates


def summarize(raw):
    rows = read_runs(raw)
    settings = read_settings(raw)
    gpus = read_gpus(raw)
    gemm_lines = parse_gemm(read_text(os.path.join(raw, "gemm.log")))
    rates = gemm_rates(gemm_lines, settings.get("GEMM_BENCH", "BenchmarkGemmTrainerShape"))

    groups = {}
    for row in rows:
        key = (row["job"], row.get("dtype") or "float32")
        g = groups.setdefault(key, {"job": row["job"], "dtype": key[1], "variants": {}, "model": None})
        try:
            w, l, m, r = (int(row[k]) for k in ("width", "layers", "microbatches", "microbatch_size"))
            g["model"] = {"width": w, "layers": l, "microbatches": m, "microbatch_size": r,
                          "model_flops_per_step": flops_per_step(w, l, m, r)}
        except (KeyError, ValueError):
            pass
        v = g["variants"].setdefault(row["variant"], {"tool": row["tool"], "processes": []})
        v["processes"].append(process_result(raw, row))

    jobs = []
    dtypes = ["float32", "tf32", "bf16"]
    for key in sorted(groups, key=lambda k: (_job_order(k[0]), dtypes.index(k[1]) if k[1] in dtypes else 9, k[1])):
        g = groups[key]
        for name, v in g["variants"].items():
            ok = [p for p in v["processes"] if p["ok"]]
            meds = [p["median_step_s"] for p in ok]
            v["rounds_ok"] = len(ok)
            v["rounds_failed"] = len(v["processes"]) - len(ok)
            v["median_step_s"] = median(meds)
            v["min_process_median_s"] = min(meds) if meds else None
            v["max_process_median_s"] = max(meds) if meds else None
            # Steps that fall in two modes (two ranks' kernels interleaving
            # on a shared GPU, docs/benchmarks.md) move a process's median
            # from one mode to the other as their mix changes; the mean
            # moves with the mix only.
            v["mean_step_s"] = statistics.fmean(p["mean_step_s"] for p in ok) if ok else None
            v["command"] = v["processes"][0]["command"] if v["processes"] else ""
            if g["model"] and v["median_step_s"]:
                v["model_flops_per_s"] = g["model"]["model_flops_per_step"] / v["median_step_s"]
                rate = rates.get(g["dtype"])
                if rate:
                    v["of_gemm_rate"] = v["model_flops_per_s"] / rate["flops"]
        for name, v in g["variants"].items():
            base = g["variants"].get(BASELINE.get(v["tool"], ""))
            if base is None or name == BASELINE.get(v["tool"]):
                continue
            if base.get("median_step_s") and v.get("median_step_s"):
                v["ratio_vs_off"] = v["median_step_s"] / base["median_step_s"]
            if base.get("mean_step_s") and v.get("mean_step_s"):
                v["mean_ratio_vs_off"] = v["mean_step_s"] / base["mean_step_s"]
            by_round = {p["round"]: p["median_step_s"] for p in base["processes"] if p["ok"]}
            paired = [p["median_step_s"] / by_round[p["round"]] for p in v["processes"]
                      if p["ok"] and p["round"] in by_round]
            if paired:
                v["paired_ratios"] = paired
                v["paired_ratio_median"] = statistics.median(paired)
        ts, tw = g["variants"].get("trainscope-off"), g["variants"].get("torch-off")
        if ts and tw and ts.get("median_step_s") and tw.get("median_step_s"):
            g["torch_off_vs_trainscope_off"] = tw["median_step_s"] / ts["median_step_s"]
        jobs.append(g)

    torch_version = next((p.get("torch_version") for g in jobs for v in g["variants"].values()
                          for p in v["processes"] if p.get("torch_version")), settings.get("TORCH_VERSION"))
    return {
        "schema": 1,
        "date": settings.get("DATE") or datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d"),
        "gpus": gpus,
        "settings": settings,
        "torch_version": torch_version,
        "gemm": {"benchmark": settings.get("GEMM_BENCH"), "lines": gemm_lines, "rates": rates},
        "jobs": jobs,
    }


def _job_order(job):
    order = ["default-1gpu", "default-2gpu", "launch-bound", "compute-bound"]
    return order.index(job) if job in order else len(order)


def _ms(s):
    return "—" if s is None else "%.3f" % (s * 1e3)


def _x(r):
    return "—" if r is None else "%.3f×" % r


def _tf(f):
    return "—" if f is None else "%.3g" % (f / 1e12)


def render_md(s):
    st = s["settings"]
    gpu_names = sorted({g["name"] for g in s["gpus"]})
    drivers = sorted({g["driver"] for g in s["gpus"]})
    lines = ["### Beside torch.profiler: `scripts/gpu-bench.sh run`", ""]
    lines.append("%s, %s × %s (driver %s), PyTorch %s; %s." % (
        s["date"], st.get("GPUS") or len(s["gpus"]) or "?", ", ".join(gpu_names) or "GPU unknown",
        ", ".join(drivers) or "unknown", s.get("torch_version") or "unknown",
        "every job on one GPU (`CUDA_VISIBLE_DEVICES=%s`)" % st.get("GPU1", "0")
        if "," not in (st.get("CB_GPUS") or "") else
        "the compute-bound job's profile-run ranks on `CUDA_VISIBLE_DEVICES=%s`, everything else on one GPU (`%s`)" % (st["CB_GPUS"], st.get("GPU1", "0"))))
    lines.append("")
    lines.append("Fresh processes, %s rounds (of %s planned), each round in a rotating order; per process "
                 "the median step time, profile-run's first %s steps (warm-up) dropped, the twin's "
                 "%s warm-up steps run untimed; each figure is the median over rounds of the "
                 "per-process medians. \"vs off\" divides by the same tool's unprofiled median; "
                 "\"paired\" is the median of that ratio within each round; \"mean step\" is the mean "
                 "over processes of each one's mean step, which a mix of fast and slow steps moves "
                 "less than a median. Model FLOP/s: "
                 "6 × rows × width² × layers per step over the median step." % (
                     st.get("ROUNDS_RUN", "?"), st.get("ROUNDS", "?"), st.get("WARMUP", "?"), st.get("WARMUP", "?")))
    run = st.get("ROUNDS_RUN", "")
    if run.isdigit() and int(run) < MIN_ROUNDS:
        lines.append("")
        lines.append("**Only %s rounds**: the overhead targets are medians of %d or more fresh pairs; "
                     "these figures do not yet decide them." % (run, MIN_ROUNDS))
    lines.append("")
    for name, _, meaning in VARIANTS:
        lines.append("- `%s`: %s" % (name, meaning))
    lines.append("")
    for g in s["jobs"]:
        if g["job"].startswith("default"):
            continue
        m = g["model"] or {}
        lines.append("#### %s, %s: width %s, %s layers, %s × %s rows%s" % (
            g["job"], g["dtype"], m.get("width"), m.get("layers"), m.get("microbatches"),
            m.get("microbatch_size"), _layout_note(g, st)))
        lines.append("")
        lines.append("| variant | processes ok | median step (ms) | process medians (ms) | vs off | paired | mean step (ms), vs off | model TFLOP/s | of GEMM rate |")
        lines.append("| --- | --- | --- | --- | --- | --- | --- | --- | --- |")
        known = [n for n, _, _ in VARIANTS]
        for name in known + sorted(n for n in g["variants"] if n not in known):
            v = g["variants"].get(name)
            if v is None:
                continue
            ok = "%d of %d" % (v["rounds_ok"], len(v["processes"]))
            spread = "%s–%s" % (_ms(v["min_process_median_s"]), _ms(v["max_process_median_s"])) if v["rounds_ok"] else _fail_note(v)
            of = "—" if v.get("of_gemm_rate") is None else "%.0f %%" % (100 * v["of_gemm_rate"])
            mean = _ms(v.get("mean_step_s"))
            if v.get("mean_ratio_vs_off") is not None:
                mean += ", " + _x(v["mean_ratio_vs_off"])
            lines.append("| %s | %s | %s | %s | %s | %s | %s | %s | %s |" % (
                name, ok, _ms(v["median_step_s"]), spread, _x(v.get("ratio_vs_off")),
                _x(v.get("paired_ratio_median")), mean, _tf(v.get("model_flops_per_s")), of))
        lines.append("")
        if g.get("torch_off_vs_trainscope_off"):
            lines.append("The twin unprofiled takes %s the time of profile-run unprofiled." % _x(g["torch_off_vs_trainscope_off"]))
        ev = [p["device_events_per_step"] for p in g["variants"].get("torch-profiler", {}).get("processes", [])
              if p.get("device_events_per_step") is not None]
        if ev and statistics.median(ev) > 0:
            lines.append("torch.profiler recorded %.0f device activities (kernels, copies, memsets) per step." % statistics.median(ev))
        if lines[-1]:
            lines.append("")
    rates = s["gemm"]["rates"]
    lines.append("#### GEMM rate on the trainer's shapes (`%s`)" % (s["gemm"]["benchmark"] or "?"))
    lines.append("")
    if rates:
        lines.append("| dtype | TFLOP/s (harmonic mean over forms) | forms | source |")
        lines.append("| --- | --- | --- | --- |")
        for dt in sorted(rates):
            r = rates[dt]
            forms = ", ".join("%s %.1f" % (f, v / 1e12) for f, v in sorted(r["forms"].items()))
            lines.append("| %s | %.1f | %s | %s |" % (dt, r["flops"] / 1e12, forms, r["source"]))
    else:
        lines.append("No GEMM benchmark line with a FLOP/s metric in gemm.log.")
    lines.append("")
    lines.append("#### profile-run with no flags")
    lines.append("")
    for g in s["jobs"]:
        if not g["job"].startswith("default"):
            continue
        for v in g["variants"].values():
            for p in v["processes"]:
                lines.append("%s (`%s`): exit %d, %d step lines, median step %s ms; its first lines:" % (
                    g["job"], p["command"], p["rc"], p.get("steps_printed", 0), _ms(p.get("median_step_s"))))
                lines.append("")
                lines.append("```")
                lines.extend(p.get("head", []))
                lines.append("```")
                lines.append("")
    lines.append("#### Commands (first round; every process's is in bench.json)")
    lines.append("")
    lines.append("```")
    for g in s["jobs"]:
        for name, v in g["variants"].items():
            lines.append("# %s %s %s" % (g["job"], g["dtype"], name))
            lines.append(v["command"])
    lines.append("```")
    if st.get("NOTES"):
        lines.append("")
        lines.append("Notes from the run: %s" % st["NOTES"])
    return "\n".join(lines) + "\n"


def _layout_note(g, st):
    layout = st.get("LB_LAYOUT" if g["job"] == "launch-bound" else "CB_LAYOUT")
    if g["job"] == "compute-bound":
        gpus = st.get("CB_GPUS") or st.get("GPU1", "0")
        where = "on one GPU" if "," not in gpus else "a rank per GPU (`CUDA_VISIBLE_DEVICES=%s`)" % gpus
        return ", profile-run `%s` %s; the twin runs the whole model unpipelined (the same FLOPs) on one" % (layout or "?", where)
    return ", profile-run `%s`" % layout if layout else ""


def _fail_note(v):
    for p in v["processes"]:
        if p["ok"]:
            continue
        if p["rc"] == -1:
            return p["command"].replace("|", "/")
        fl = p.get("first_lines") or []
        how = "timed out (exit %d)" % p["rc"] if p["rc"] in (124, 137) else "failed: exit %d" % p["rc"]
        return how + ((", " + " ".join(fl[0].replace("|", "/").split())[:100]) if fl else "")
    return "—"


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--raw", required=True, help="the raw results directory ($OUT/raw)")
    p.add_argument("--out", required=True, help="where bench.json and bench.md go")
    a = p.parse_args(argv)
    s = summarize(a.raw)
    os.makedirs(a.out, exist_ok=True)
    for name, text in (("bench.json", json.dumps(s, indent=1, allow_nan=True) + "\n"), ("bench.md", render_md(s))):
        tmp = os.path.join(a.out, name + ".tmp")
        with open(tmp, "w", encoding="utf-8") as f:
            f.write(text)
        os.replace(tmp, os.path.join(a.out, name))
    return 0


if __name__ == "__main__":
    sys.exit(main())
