"""Checks a wrapped run of examples/torch/allreduce_pp.py against itself.

    python3 scripts/wrapcheck.py wrapped.log trace.json

wrapped.log holds the script's JSON lines (one per rank); trace.json is
the Perfetto trace profile-run wrote for the run. For every rank, operation
and size the script reports, the trace must hold calls + warmup_calls
operations of that size (Send and Recv each for a SendRecv pair), and the
mean device time of the timed calls must match the script's own CUDA-event
time per call within 5 % for messages of 16 MiB and more whose calls take
200 µs or more (the others are printed: the script's loop time holds the
gaps between calls, which short calls do not hide: 16 MiB over NVLink
takes tens of µs); for
send/recv pairs grouped over a proxied transport, the time from the
kernel's start to the network transfer's end instead (busbw is bytes × factor over that time, so it
matches when the time does: both the time and the busbw must lie within
5 %, and both ratios are printed). One line per check, PASS or
FAIL, then a summary; exit status 1 on any FAIL.

    python3 scripts/wrapcheck.py --straggler wrapped.log report.txt

checks a run with --slow-rank R --slow-ms X: the report's collectives
section must name rank R the straggler, and the time it held the
collectives up (its arrival less the next-latest, summed) must be within
10 % of the script's slow_calls × slow_ms_measured.

    python3 scripts/wrapcheck.py --steps wrapped.log report.txt

checks a run with --nvtx-steps: the report's step breakdown must account,
for every rank, as many steps as the script marked (nvtx_steps), and say
that busy time was not measured (no compute is timed in a wrapped job);
profile-run's summary in wrapped.log must count the steps.

    python3 scripts/wrapcheck.py --imported-pipeline run.log report.txt trace.json TRACES

checks the import of examples/torch/pipelining_steps.py --torch-trace
TRACES (run.log holds the script's JSON lines and the import's output):
each rank's stage against the script's and its labelled kernels against
the kernels launched inside forward or backward ranges in its raw trace;
then, as --pipeline does, the steps, busy time against the script's CUDA
events, every step's kernels of every phase, microbatch and chunk, the
pipeline shape, and every step analysed complete.

    python3 scripts/wrapcheck.py --ddp wrapped.log report.txt trace.json

checks a run of examples/torch/ddp_steps.py traced with -trace-steps all:
every rank's steps and mean step time (within 5 % of the script's own
timing of the same range), the all-reduces of each step against the
count DDP's communication hook kept, and every step analysed complete.

    python3 scripts/wrapcheck.py --cycle wrapped.log summary.json [report.txt]

checks the cycle profile-run found in the collectives of a wrapped
examples/torch/ddp_steps.py (summary.json's collective_cycle), with or
without its NVTX steps (--no-nvtx), against the script's own figures: as
many all-reduces per cycle as DDP's hook counted in each step after the
first, and a cycle time within 5 % of the median of the ranks' median
step times after the first. Where the loop marked no steps, profile-run's
summary in wrapped.log must say the cycle on its "cycle:" line. Where its
collectives and kernels were timed on the device, their time in a cycle
and the GPU's busy time must be some of the cycle and no more; with the
report of a run that marked its steps, the GPU's busy share of a cycle
must be within 10 % and half a point of the report's busy share of the
steps after the first. Every cycle of the run must be timed on each rank
(summary.json's collective_cycle.run: the steps but the first and the
last, no break, none missed), their p50 within 5 % of the script's
median step.

    python3 scripts/wrapcheck.py --cycle-steps summary.json

checks, for any wrapped run whose job marks NVTX steps, the cycle found
in its collectives against its steps: a cycle time within 5 % of the
median of the ranks' median step times (summary.json's steps).

    python3 scripts/wrapcheck.py --fsdp wrapped.log report.txt trace.json

checks a run of examples/torch/fsdp_steps.py traced with -trace-steps
all: every rank's steps and mean step time (within 5 % of the script's
own timing), and in each step the all-gathers and reduce-scatters the
trace holds against the ones the script saw FSDP make, size by size
(bytes as PyTorch's tensors give them: the whole gathered or reduced
size), every step analysed complete, and no record come after its
step was analysed.

    python3 scripts/wrapcheck.py --kernels wrapped.log report.txt trace.json

checks a run of examples/torch/kernel_steps.py traced with -trace-steps
all and -kernels: in every step after the first (the warm-up, where the
host sets cuBLAS up between the events), the kernels the trace holds
against the ones the script launched, and their device time (the union
of their intervals within the step) between 10 % below and 0.5 % above
the script's own CUDA-event time of the step's GPU work, which also holds
the gaps between kernels (2–6 % of it on an H200, varying from run to
run while the kernels' time does not); the report's busy share of the steps within
half a point of the share the trace's kernels cover. Where the script put
its pairs in --phase-ranges NVTX ranges, each step's kernels carry phase
forward and the microbatch of the range they were launched in, as many of
each as it launched there.

    python3 scripts/wrapcheck.py --pipeline wrapped.log report.txt

checks a run of examples/torch/pipeline_steps.py or pipelining_steps.py
(pp × dp ranks, groups named as Megatron-LM names them, -trace-steps
all): the summary's
pipeline line staging every process by the "PIPELINE_MODEL_PARALLEL_GROUP"
communicator; each rank's stage in the report's step breakdown against
the script's; each rank's busy time per step (busy share × mean step)
within 10 % of the script's own CUDA-event time of its forward and
backward computation; the stage table with a row per stage (its bubbles
printed beside the schedule's ideal (p−1)/(v·m+p−1)); with NVTX ranges
around each microbatch's forward and backward (pipeline_steps.py's
default), the kernels labelled with them: the report's pipeline shape
from the labels, every step with kernels of each phase and microbatch,
and each rank's forward and backward kernel time against the script's
CUDA-event times of each (trace.json needed); with
--all-to-all, one AllToAll per all-to-all the script issued on each
rank; and every step analysed complete, which needs each collective
matched within its own communicator though several share a name.
"""

import bisect
import collections
import json
import os
import re
import statistics
import sys


def tool_lines(path, tool):
    """The JSON objects a script printed as {"tool": TOOL, ...}. Several
    processes print to one pipe, so an object can share its line with
    another's text: each is decoded alone, from where it starts."""
    text = open(path, errors="replace").read()
    dec, out = json.JSONDecoder(), []
    for m in re.finditer(r'\{"tool": "%s"' % re.escape(tool), text):
        out.append(dec.raw_decode(text, m.start())[0])
    return out


# The calls whose device time is checked against the script's loop time
# per call: large, and long enough that the gaps between calls (a few µs)
# stay well under the 5 % allowed.
STRICT_BYTES = 16 << 20
STRICT_US = 200.0


def strict(nbytes, per_call_us):
    return nbytes >= STRICT_BYTES and per_call_us >= STRICT_US


def script_results(path):
    return tool_lines(path, "allreduce_pp")


def trace_events(path):
    """A trace's events, and the rank of each process id (its
    process_name, "rank N …")."""
    t = json.load(open(path))
    events = t["traceEvents"] if isinstance(t, dict) else t
    rank_of = {}
    for e in events:
        if e.get("ph") == "M" and e.get("name") == "process_name":
            m = re.match(r"rank (\d+)", e["args"]["name"])
            if m:
                rank_of[e["pid"]] = int(m.group(1))
    return events, rank_of


def trace_ops(path):
    """(rank, op, bytes) -> list of (start_us, host_dur_us, device_dur_us or None,
    transfer_us or None): transfer is from the kernel's start to the later
    of its end and the network transfer's end (p2p over a proxied
    transport), None where the trace has no transfer end."""
    events, rank_of = trace_events(path)
    host, dev = collections.defaultdict(list), collections.defaultdict(list)
    groups = collections.Counter()
    for e in events:
        if e.get("ph") != "X" or e.get("cat") not in ("collective", "p2p"):
            continue
        a = e.get("args", {})
        if "host_us" not in a:
            groups[(rank_of.get(e["pid"], -1), a.get("group", ""), a.get("group_rank", -1), a.get("group_size", -1))] += 1
        key = (rank_of.get(e["pid"], -1), a.get("op", e["name"]), int(a.get("bytes", 0)), int(a.get("seq", -1)), a.get("group", ""))
        if "host_us" in a:
            after = a.get("transfer_end_after_device_us")
            xfer = float(e["dur"]) + max(0.0, float(after)) if after is not None else None
            dev[key].append((float(e["dur"]), xfer))
        else:
            host[key].append((float(e["ts"]), float(e["dur"])))
    ops = collections.defaultdict(list)
    for key, hs in host.items():
        d = dev.get(key, [])
        for i, (ts, hd) in enumerate(sorted(hs)):
            dd, xf = d[i] if i < len(d) else (None, None)
            ops[key[:3]].append((ts, hd, dd, xf))
    for v in ops.values():
        v.sort()
    return ops, groups


def straggler(log, report):
    slow = [r for r in script_results(log) if r.get("slow_calls")]
    if len(slow) != 1:
        print("FAIL straggler: %d ranks of %s report slow calls, want 1" % (len(slow), log))
        return 1
    r = slow[0]
    want_ms = r["slow_calls"] * r["slow_ms_measured"]
    text = open(report, errors="replace").read()
    i = text.find("=== collectives across ranks")
    if i < 0:
        print("FAIL straggler: %s has no collectives section" % report)
        return 1
    section = text[i:text.find("\n\n", i) if text.find("\n\n", i) > 0 else len(text)]
    print(section)
    m = re.search(r"straggler: rank (\d+) caused (\d+)% of the waiting at collectives \(([0-9.]+) ms; it held them up ([0-9.]+) ms", section)
    if not m:
        print("FAIL straggler: no rank named; want rank %d" % r["rank"])
        return 1
    rank, held = int(m.group(1)), float(m.group(4))
    ok = rank == r["rank"] and abs(held - want_ms) <= 0.1 * want_ms
    print("%s straggler: report names rank %d (want %d), held up %.3f ms against the script's %d calls × %.3f ms = %.3f ms (%+.1f%%)"
          % ("PASS" if ok else "FAIL", rank, r["rank"], held, r["slow_calls"], r["slow_ms_measured"], want_ms, 100 * (held / want_ms - 1)))
    return 0 if ok else 1


def table(text, header):
    """The rows under the first line matching header: first field (an
    integer) -> the fields, until a line that does not start with one."""
    rows = {}
    lines = text.splitlines()
    for i, line in enumerate(lines):
        if re.match(header, line):
            for row in lines[i + 1:]:
                f = row.split()
                if not f or not f[0].isdigit():
                    break
                rows[int(f[0])] = f
            break
    return rows


STEP_HEADER = r"\s*Rank\s+Stage\s+Steps\s+Mean step\(ms\)\s+Busy %\s+Idle %"


def number(s, default=0.0):
    """s as a float; default for "-" (what the report prints where there
    is no figure)."""
    try:
        return float(s)
    except ValueError:
        return default


def step_rows(text):
    """The report's step breakdown: rank -> (steps, mean step ms, busy %,
    idle %), busy and idle as printed ("-" where not measured)."""
    return {r: (int(number(f[2])), number(f[3]), f[4], f[5]) for r, f in table(text, STEP_HEADER).items() if len(f) >= 6}


def steps(log, report):
    want = {r["rank"]: r.get("nvtx_steps", 0) for r in script_results(log)}
    if not want or not all(want.values()):
        print("FAIL steps: the script's lines in %s mark no NVTX steps: %s" % (log, want))
        return 1
    text = open(report, errors="replace").read()
    got = step_rows(text)
    bad = 0
    for rank in sorted(want):
        g = got.get(rank)
        ok = g is not None and g[0] == want[rank] and g[1] > 0 and g[2] == "-" and g[3] == "-"
        bad += not ok
        print("%s steps rank %d: report %s, script marked %d (busy and idle must read -)" % ("PASS" if ok else "FAIL", rank, g, want[rank]))
    note = re.search(r"busy: not measured on ranks? [0-9, ]+", text)
    print("%s report says busy was not measured: %s" % ("PASS" if note else "FAIL", note.group(0) if note else "no such line"))
    bad += not note
    total = sum(want.values())
    summ = re.search(r"nvtx: (\d+) ranges[^,]*, (\d+) of them steps", open(log, errors="replace").read())
    ok = summ is not None and int(summ.group(2)) == total
    print("%s summary counts %s steps, the script marked %d" % ("PASS" if ok else "FAIL", summ.group(2) if summ else "no", total))
    bad += not ok
    return 1 if bad else 0


def step_time_check(tool, r, rows):
    """One rank's steps and mean step time in the report's step breakdown
    (rows) against the script's own timing of the same ranges (r), within
    5 %: 1 when they differ, printed either way."""
    rank = r["rank"]
    mean_ms = 1e3 * statistics.mean(r["host_step_s"])
    got = rows.get(rank)
    ok = got is not None and got[0] == r["steps"] and abs(got[1] - mean_ms) <= 0.05 * mean_ms
    print("%s %s rank %d: report %s steps, mean %s ms; the script %d steps, mean %.3f ms"
          % ("PASS" if ok else "FAIL", tool, rank, got[0] if got else "no", "%.3f" % got[1] if got else "-", r["steps"], mean_ms))
    return 0 if ok else 1


WARM_UP = re.compile(r"warm-up: the first step(?: \(step \d+\))? took ([\d.]+)(?:–([\d.]+))? ms, .*? without it the mean step is ([\d.]+)(?:–([\d.]+))? ms")


def warmup_check(tool, runs, text):
    """The report's warm-up line against the script's own step times:
    where the script's first step took twice the mean of its others or
    more on every rank, the line is there, and each rank's first step and
    mean of the others lie within its ranges (5 %); where it took less
    than 1.8 times on some rank, the line is not there. 1 when wrong."""
    m = WARM_UP.search(text)
    ratios, firsts, rests = [], [], []
    for r in runs:
        t = r["host_step_s"]
        if len(t) < 3:
            return 0
        rest = statistics.mean(t[1:])
        ratios.append(t[0] / rest)
        firsts.append(1e3 * t[0])
        rests.append(1e3 * rest)
    if not ratios:
        return 0
    if min(ratios) < 1.8:
        ok = m is None
        print("%s %s warm-up: the script's first step %.1f–%.1f× the others' mean, and the report %s"
              % ("PASS" if ok else "FAIL", tool, min(ratios), max(ratios), "sets none apart" if ok else "sets one apart: " + m.group(0)))
        return 0 if ok else 1
    if min(ratios) < 2.2 and m is None:
        print("PASS %s warm-up: the script's first step %.1f–%.1f× the others' mean, near the threshold, and the report sets none apart" % (tool, min(ratios), max(ratios)))
        return 0
    if m is None:
        print("FAIL %s warm-up: the script's first step %.1f–%.1f× the others' mean, and the report has no warm-up line" % (tool, min(ratios), max(ratios)))
        return 1
    lo1, hi1 = float(m.group(1)), float(m.group(2) or m.group(1))
    lo2, hi2 = float(m.group(3)), float(m.group(4) or m.group(3))
    inside = lambda v, lo, hi: 0.95 * lo <= v <= 1.05 * hi
    ok = all(inside(f, lo1, hi1) for f in firsts) and all(inside(x, lo2, hi2) for x in rests)
    print("%s %s warm-up: the script's first steps %s ms and means of the others %s ms; the report: %s"
          % ("PASS" if ok else "FAIL", tool, ", ".join("%.3f" % f for f in firsts), ", ".join("%.3f" % x for x in rests), m.group(0)))
    return 0 if ok else 1


def complete_check(tool, text):
    """Every step the report's pipeline analysis saw complete: 1 if not."""
    m = re.search(r"(\d+) of (\d+) steps complete", text)
    ok = m is not None and m.group(1) == m.group(2)
    print("%s %s pipeline analysis: %s" % ("PASS" if ok else "FAIL", tool, m.group(0) if m else "no steps analysed"))
    return 0 if ok else 1


def ddp(log, report, trace):
    """A wrapped run of examples/torch/ddp_steps.py: steps per rank, the
    mean step time against the script's own, and the all-reduces of each
    step against the count DDP's communication hook kept."""
    runs = tool_lines(log, "ddp_steps")
    if not runs:
        print("FAIL ddp: no ddp_steps lines in %s" % log)
        return 1
    text = open(report, errors="replace").read()
    rows = step_rows(text)
    events, rank_of = trace_events(trace)
    per_step = collections.Counter()
    for e in events:
        a = e.get("args", {})
        # A wrapped run's all-reduces are named AllReduce; an imported
        # trace's keep their NCCL kernel's name, with the operation in op.
        if e.get("ph") == "X" and "AllReduce" in (e.get("name"), a.get("op")) and "host_us" not in a and a.get("step", -1) >= 0:
            per_step[(rank_of.get(e["pid"], -1), int(a["step"]))] += 1
    bad = 0
    for r in sorted(runs, key=lambda r: r["rank"]):
        rank = r["rank"]
        bad += step_time_check("ddp", r, rows)
        want = r["allreduces_per_step"]
        seen = [per_step[(rank, n)] for n in range(len(want))]
        ok = seen == want
        bad += not ok
        print("%s ddp rank %d: all-reduces per step in the trace %s, DDP's hook counted %s" % ("PASS" if ok else "FAIL", rank, seen, want))
    bad += complete_check("ddp", text)
    bad += warmup_check("ddp", runs, text)
    # A wrapped run's peak is the device memory each process held through
    # CUDA's allocations (CUPTI's memory activity): every segment
    # PyTorch's caching allocator reserved is one of them, so the peak is
    # at least torch.cuda.max_memory_reserved; the rest is NCCL's buffers
    # and the libraries' own.
    if "import exit" not in open(log, errors="replace").read():
        for r in sorted(runs, key=lambda r: r["rank"]):
            want = r.get("max_reserved_bytes")
            if not want:
                continue
            m = re.search(r"Peak device memory \(rank %d\): ([\d.]+) MB" % r["rank"], text)
            got = float(m.group(1)) if m else None
            ok = got is not None and got >= want / 2**20 - 0.01
            bad += not ok
            print("%s ddp rank %d: peak device memory %s MB held through CUDA's allocations; torch.cuda.max_memory_reserved %.2f MB (the rest NCCL's and the libraries')"
                  % ("PASS" if ok else "FAIL", r["rank"], "%.2f" % got if got is not None else "none", want / 2**20))
    # Recorded with profile_memory=True: each rank's peak, from the
    # allocator's events, against torch.cuda.max_memory_allocated.
    for r in sorted(runs, key=lambda r: r["rank"]):
        want = r.get("peak_allocated_bytes")
        if want is None:
            continue
        m = re.search(r"Peak device memory \(rank %d\): ([\d.]+) MB" % r["rank"], text)
        got = float(m.group(1)) if m else None
        ok = got is not None and abs(got - want / 2**20) <= max(0.01 * want / 2**20, 0.01)
        bad += not ok
        print("%s ddp rank %d: peak device memory %s MB from the trace's memory events; torch.cuda.max_memory_allocated %.2f MB"
              % ("PASS" if ok else "FAIL", r["rank"], "%.2f" % got if got is not None else "none", want / 2**20))
    # Data parallelism alone is no pipeline: no stage table, no bubble.
    ok = "pipeline: none" in text and not re.search(r"Stage\s+Ranks×steps\s", text)
    bad += not ok
    print("%s ddp no pipeline bubble reported (%s)" % ("PASS" if ok else "FAIL", "pipeline: none" if ok else "a stage table or no 'pipeline: none' line"))
    return 1 if bad else 0


def cycle(log, summary, report=None):
    """The cycle found in a wrapped ddp_steps.py's collectives against the
    script's all-reduces per step and its own step times; with the
    report of a run that marked its steps, the GPU's busy time in a cycle
    against the steps' busy share; and the cycles of the whole run against
    the script's steps."""
    runs = tool_lines(log, "ddp_steps")
    if not runs:
        print("FAIL cycle: no ddp_steps lines in %s" % log)
        return 1
    c = json.load(open(summary)).get("collective_cycle") or {}
    later = [n for r in runs for n in r["allreduces_per_step"][1:]]
    want_ops = collections.Counter(later).most_common(1)[0][0] if later else 0
    want_s = statistics.median(statistics.median(r["host_step_s"][1:] or r["host_step_s"]) for r in runs)
    bad = 0
    ops = {o["op"]: o["count"] for o in c.get("ops", [])}
    ok = bool(c.get("found")) and c.get("operations") == want_ops and set(ops) == {"AllReduce"} and c.get("agreeing_ranks") == len(runs)
    bad += not ok
    print("%s cycle: %s, %s of %s ranks agreeing; DDP's hook counted %d all-reduces a step after the first%s"
          % ("PASS" if ok else "FAIL", "%s collectives %s" % (c.get("operations"), ops) if c.get("found") else "none found (%s)" % c.get("why"),
             c.get("agreeing_ranks"), len(runs), want_ops, "" if c else " (no collective_cycle in %s)" % summary))
    got = c.get("p50_s")
    ok = got is not None and want_s > 0 and abs(got / want_s - 1) <= 0.05
    bad += not ok
    print("%s cycle: %s a cycle; the script's median step %.3f ms (within 5 %%)"
          % ("PASS" if ok else "FAIL", "%.3f ms" % (1e3 * got) if got is not None else "no time", 1e3 * want_s))
    dev = c.get("device_s")
    if dev is not None:
        # The union of the cycle's collectives on the device: some, and
        # no more than the cycle.
        ok = got is not None and 0 < dev <= got
        bad += not ok
        print("%s cycle: its collectives on the device %.3f ms of it (more than none, no more than the cycle)"
              % ("PASS" if ok else "FAIL", 1e3 * dev))
    busy = c.get("busy_s")
    if busy is not None:
        ok = got is not None and 0 < busy <= got
        bad += not ok
        print("%s cycle: the GPU busy %.3f ms of it (more than none, no more than the cycle)" % ("PASS" if ok else "FAIL", 1e3 * busy))
        m = re.search(r"without it the mean step is [\d.–]+ ms and busy ([\d.]+)(?:–([\d.]+))?%", open(report, errors="replace").read()) if report else None
        if m and got:
            # The steps' busy share (their host ranges, the warm-up step
            # left out) against the cycle's (between the device starts of
            # the same operation a cycle apart): one job, two windows.
            lo, hi = float(m.group(1)), float(m.group(2) or m.group(1))
            frac = 100 * busy / got
            ok = lo * 0.9 - 0.5 <= frac <= hi * 1.1 + 0.5
            bad += not ok
            print("%s cycle: the GPU busy %.1f %% of a cycle; the report's steps after the first %.1f–%.1f %% (within 10 %% and half a point)"
                  % ("PASS" if ok else "FAIL", frac, lo, hi))
    # Every cycle of the run, counted one by one: a step's first
    # all-reduce to the next step's, so every step but the first (its
    # all-reduces differ) and the last (no next) on each rank.
    timed = c.get("run") or []
    want_n = min(len(r["host_step_s"]) for r in runs) - 2
    for rc in timed:
        ok = rc["cycles"] == want_n and rc["breaks"] == 0 and rc["missed"] == 0
        bad += not ok
        print("%s cycle: rank %d timed %d cycles over the run (%d breaks, %d missed); the script ran %d steps, the first of other all-reduces"
              % ("PASS" if ok else "FAIL", rc["rank"], rc["cycles"], rc["breaks"], rc["missed"], want_n + 2))
    if timed:
        p50 = statistics.median(rc["p50_s"] for rc in timed)
        ok = want_s > 0 and abs(p50 / want_s - 1) <= 0.05
        bad += not ok
        print("%s cycle: the run's cycles p50 %.3f ms; the script's median step %.3f ms (within 5 %%)" % ("PASS" if ok else "FAIL", 1e3 * p50, 1e3 * want_s))
    elif c.get("found"):
        bad += 1
        print("FAIL cycle: a cycle found, but no cycle of the run timed (collective_cycle.run empty)")
    if not any(r.get("nvtx", True) for r in runs):
        m = re.search(r"^  cycle: every rank \((\d+)\) repeats a cycle of (\d+) collectives .* every ([\d.]+) (ms|s) ", open(log, errors="replace").read(), re.M)
        ok = m is not None and int(m.group(1)) == len(runs) and int(m.group(2)) == want_ops
        bad += not ok
        print("%s cycle: the summary's cycle line for a loop that marks no steps: %s" % ("PASS" if ok else "FAIL", m.group(0).strip() if m else "none"))
    return 1 if bad else 0


def cycle_steps(summary):
    """The cycle found in a wrapped run's collectives against the steps
    its job marked (summary.json)."""
    doc = json.load(open(summary))
    c = doc.get("collective_cycle") or {}
    p50s = [st["p50_s"] for st in doc.get("steps", []) if st.get("p50_s")]
    if not p50s:
        print("FAIL cycle-steps: no step times in %s" % summary)
        return 1
    want = statistics.median(p50s)
    got = c.get("p50_s")
    ok = got is not None and abs(got / want - 1) <= 0.05
    ops = {o["op"]: o["count"] for o in c.get("ops", [])}
    print("%s cycle-steps: %s; the ranks' median step %.3f ms (within 5 %%)"
          % ("PASS" if ok else "FAIL", "a cycle of %s collectives %s, %d of %d ranks, %.3f ms" % (c["operations"], ops, c["agreeing_ranks"], c["ranks"], 1e3 * got)
             if got is not None else "no cycle (%s)" % c.get("why"), 1e3 * want))
    return 0 if ok else 1


def fsdp(log, report, trace):
    """A wrapped run of examples/torch/fsdp_steps.py: steps per rank, the
    mean step time against the script's own, and each step's all-gathers
    and reduce-scatters, size by size, against the calls the script saw
    FSDP make."""
    runs = tool_lines(log, "fsdp_steps")
    if not runs:
        print("FAIL fsdp: no fsdp_steps lines in %s" % log)
        return 1
    text = open(report, errors="replace").read()
    rows = step_rows(text)
    events, rank_of = trace_events(trace)
    seen = collections.defaultdict(collections.Counter)  # (rank, step) -> (op, bytes) -> calls
    for e in events:
        a = e.get("args", {})
        if e.get("ph") == "X" and e.get("cat") == "collective" and "host_us" not in a and a.get("step", -1) >= 0:
            seen[(rank_of.get(e["pid"], -1), int(a["step"]))][(a.get("op", e["name"]), int(a.get("bytes", 0)))] += 1
    bad = 0
    for r in sorted(runs, key=lambda r: r["rank"]):
        rank = r["rank"]
        bad += step_time_check("fsdp", r, rows)
        wrong = []
        calls = collections.Counter()
        for n, want in enumerate(r["collectives_per_step"]):
            w = collections.Counter((op, b) for op, sizes in want.items() for b in sizes)
            calls.update(op for op, _ in w.elements())
            if seen.get((rank, n), collections.Counter()) != w:
                wrong.append(n)
        ok = not wrong and sum(calls.values()) > 0
        bad += not ok
        first = r["collectives_per_step"][wrong[0]] if wrong else {}
        print("%s fsdp rank %d: %s in the trace, step by step and size by size, as the script counted them%s"
              % ("PASS" if ok else "FAIL", rank, ", ".join("%d %s" % (v, k) for k, v in sorted(calls.items())) or "no collectives",
                 "" if not wrong else "; steps %s differ, the first (%d): trace %s, script %s"
                 % (wrong, wrong[0], dict(seen.get((rank, wrong[0]), {})), {op: len(b) for op, b in first.items()})))
    bad += complete_check("fsdp", text)
    bad += warmup_check("fsdp", runs, text)
    # FSDP's streams are busy in turn: CUPTI hands their kernels over out
    # of order, and every one must still reach its step's figures.
    late = re.search(r"(\d+) records came after their step was analysed.*", text)
    bad += late is not None
    print("%s fsdp every record in its step's analysis%s" % ("FAIL" if late else "PASS", ": " + late.group(0) if late else ""))
    return 1 if bad else 0


def p2p_comms(trace):
    """Per rank, the communicators it sent or received over: (group,
    group size, its rank in it) -> [calls, peers]."""
    events, rank_of = trace_events(trace)
    out = collections.defaultdict(dict)
    for e in events:
        a = e.get("args", {})
        if e.get("ph") == "X" and e.get("cat") == "p2p" and "host_us" not in a:
            v = out[rank_of.get(e["pid"], -1)].setdefault((a.get("group", ""), a.get("group_size", -1), a.get("group_rank", -1)), [0, set()])
            v[0] += 1
            v[1].add(a.get("peer", -1))
    return out


# A range named as forward or backward work, as the examples name theirs:
# torch.distributed.pipelining's actions ("PP:1F3", "PP:3B0") and
# "forward chunk C microbatch M" / "Forward M".
WORK_RANGE = re.compile(r"^(?:PP:\d+[FBIW]\d+|(?:forward|backward)\b.*)$", re.I)


def kineto_labelled(path):
    """The kernels of a torch.profiler trace launched while a range named
    as forward or backward work was open in the process (on any of its
    threads), counted from the raw trace: NCCL's kernels left out."""
    events = [e for e in json.load(open(path))["traceEvents"] if e.get("ph") == "X"]
    works = sorted((float(e["ts"]), float(e["ts"]) + float(e.get("dur", 0))) for e in events
                   if e.get("cat") in ("user_annotation", "cpu_op") and WORK_RANGE.match(e.get("name", "")))
    launch = {e["args"]["correlation"]: float(e["ts"]) for e in events
              if e.get("cat") in ("cuda_runtime", "cuda_driver") and "correlation" in e.get("args", {})}
    merged = []
    for a, b in works:
        if merged and a <= merged[-1][1]:
            merged[-1][1] = max(merged[-1][1], b)
        else:
            merged.append([a, b])
    starts = [a for a, _ in merged]
    n = 0
    for e in events:
        if e.get("cat") != "kernel" or e.get("name", "").startswith("nccl"):
            continue
        t = launch.get(e.get("args", {}).get("correlation"))
        if t is None:
            continue
        i = bisect.bisect_right(starts, t) - 1
        n += i >= 0 and t <= merged[i][1]
    return n


def imported_files(text_log, runs, traces):
    """profile-run import's line for each torch.profiler trace: the rank's
    stage against the script's, and its labelled kernels against
    kineto_labelled's count from the raw trace."""
    bad = 0
    for r in sorted(runs, key=lambda r: r["rank"]):
        line = re.search(r"rank%d\.json: Chrome/Kineto trace, rank %d, (\d+) ranges, stage (\d+) \(from its ([a-z ]+)\), (\d+) kernels launched inside ranges named as forward or backward work" % (r["rank"], r["rank"]), text_log)
        want = kineto_labelled(os.path.join(traces, "rank%d.json" % r["rank"]))
        ok = line is not None and int(line.group(2)) == r["stage"] and int(line.group(4)) == want and want > 0
        bad += not ok
        print("%s imported rank %d: stage %s (from its %s), %s kernels labelled; the script's stage %d, %d kernels launched inside forward or backward ranges in its trace"
              % ("PASS" if ok else "FAIL", r["rank"], line.group(2) if line else "-", line.group(3) if line else "-",
                 line.group(4) if line else "-", r["stage"], want))
    return bad


def pipeline(log, report, trace=None, traces=None):
    """A wrapped run of examples/torch/pipeline_steps.py or
    pipelining_steps.py; or, with traces (the directory of its
    torch.profiler traces), their import."""
    text_log = open(log, errors="replace").read()
    runs = tool_lines(log, "pipeline_steps")
    if not runs:
        print("FAIL pipeline: no pipeline_steps lines in %s" % log)
        return 1
    pp, dp, m = runs[0]["pp"], runs[0]["dp"], runs[0]["microbatches"]
    bad = 0
    if traces:
        bad += imported_files(text_log, runs, traces)
    if trace:
        for rank, comms in sorted(p2p_comms(trace).items()):
            print("INFO pipeline rank %d sends and receives over %s" % (rank, ", ".join(
                "%s (rank %d of %d): %d to or from %s" % (g, r, n, c, sorted(peers)) for (g, n, r), (c, peers) in sorted(comms.items()))))
    named = bool(runs[0].get("comm_names"))
    if traces:
        pass  # staged by the traces' process groups: imported_files checked
    elif named:
        # PyTorch names the communicator by the group's description, or
        # by "<description>:<group name>" where it passes both.
        # A stage group of 3 or more stages by its name; one of two (or
        # PyTorch's two-rank communicators) by the sends over it.
        summ = re.search(r'pipeline: (\d+) process\(es\) staged by (?:their rank in communicator|their sends and receives over communicators of two ranks named as the pipeline\'s) \(?"([^"]*)"\)? \((\d+) stages\)', text_log)
        ok = summ is not None and int(summ.group(1)) == pp * dp and summ.group(2).split(":")[0] == "PIPELINE_MODEL_PARALLEL_GROUP" and int(summ.group(3)) == pp
    else:
        # No name reaches NCCL: the communicator of the sends stages.
        summ = re.search(r'pipeline: (\d+) process\(es\) staged by their sends and receives \((\d+) stages\)', text_log)
        ok = summ is not None and int(summ.group(1)) == pp * dp and int(summ.group(2)) == pp
    if not traces:
        bad += not ok
        print("%s pipeline summary (communicators %s): %s (want %d processes, %d stages)"
              % ("PASS" if ok else "FAIL", "named" if named else "unnamed", summ.group(0) if summ else "no pipeline line", pp * dp, pp))
    text = open(report, errors="replace").read()
    rows = {r: (f[1], int(number(f[2])), number(f[3]), f[4]) for r, f in table(text, STEP_HEADER).items() if len(f) >= 6}
    for r in sorted(runs, key=lambda r: r["rank"]):
        got = rows.get(r["rank"])
        ok = got is not None and got[0] == str(r["stage"]) and got[1] == r["steps"]
        bad += not ok
        print("%s pipeline rank %d: report stage %s, %s steps; the script's stage %d, %d steps"
              % ("PASS" if ok else "FAIL", r["rank"], got[0] if got else "-", got[1] if got else "-", r["stage"], r["steps"]))
        if got is None or got[3] == "-" or got[2] <= 0:
            bad += 1
            print("FAIL pipeline rank %d: no busy time (kernels not traced?)" % r["rank"])
            continue
        busy_ms = float(got[3]) / 100 * got[2]
        want_ms = statistics.mean(r["compute_ms"])
        k = r.get("ranks_per_gpu", 1)
        if k <= 1:
            ok = abs(busy_ms - want_ms) <= 0.10 * want_ms
            how = "within 10%"
        else:
            # The events of a rank sharing its GPU span the other ranks'
            # kernels run between its own: its busy time (its kernels)
            # lies between that span shared k ways and the span.
            ok = want_ms / k * 0.9 <= busy_ms <= 1.10 * want_ms
            how = "%d ranks a GPU: between the span / %d and the span" % (k, k)
        bad += not ok
        print("%s pipeline rank %d: busy %.3f ms a step (%s%% of %.3f ms); its forward and backward by CUDA events %.3f ms (%+.1f%%; %s)"
              % ("PASS" if ok else "FAIL", r["rank"], busy_ms, got[3], got[2], want_ms, 100 * (busy_ms / want_ms - 1), how))
    if (runs[0].get("phase_ranges") or traces) and trace:
        bad += phase_labels(runs, text_log, text, trace, wrapped=not traces)
    # Stage, Ranks×steps, Compute/step(ms), Bubble/step(ms), Bubble %, …
    stages = {r: (number(f[3]), f[4]) for r, f in table(text, r"\s*Stage\s+Ranks×steps\s+Compute/step\(ms\)\s+Bubble/step\(ms\)\s+Bubble %").items() if len(f) >= 5}
    ok = sorted(stages) == list(range(pp))
    bad += not ok
    v = runs[0].get("vpp", 1)
    ideal = (pp - 1) / (v * m + pp - 1)
    print("%s pipeline stage table: %s (bubble ms a step, %% of the span); the schedule's ideal (p-1)/(v*m+p-1) = %.1f%% (%s)"
          % ("PASS" if ok else "FAIL", stages or "none", 100 * ideal, runs[0].get("schedule", "gpipe")))
    # Each all-to-all the script issued (a send to and a receive from
    # every rank of its group, itself included) is one AllToAll row count
    # in its rank's whole-run table, and no rank has any more.
    sections = re.split(r"^=== rank (\d+) · whole run ===$", text, flags=re.M)
    a2a = {int(sections[i]): int(m.group(1)) for i in range(1, len(sections) - 1, 2)
           for m in [re.search(r"^AllToAll\s+(\d+)\s", sections[i + 1], re.M)] if m}
    for r in runs:
        want = r.get("all_to_alls", 0)
        if want or a2a.get(r["rank"]):
            ok = a2a.get(r["rank"], 0) == want
            bad += not ok
            print("%s pipeline rank %d: %d AllToAll in the report; the script issued %d all-to-alls"
                  % ("PASS" if ok else "FAIL", r["rank"], a2a.get(r["rank"], 0), want))
    last = [r for r in runs if r["stage"] == pp - 1 and r.get("losses")]
    for r in last:
        print("INFO pipeline rank %d (last stage) losses %s" % (r["rank"], " ".join("%.4g" % x for x in r["losses"][:3] + r["losses"][-1:])))
    c = re.search(r"(\d+) of (\d+) steps complete", text)
    ok = c is not None and c.group(1) == c.group(2) and int(c.group(1)) > 0
    bad += not ok
    print("%s pipeline analysis: %s" % ("PASS" if ok else "FAIL", c.group(0) if c else "no steps analysed"))
    for p in re.findall(r"^\s+(?:step \d+: )?collective .*$|^.*not recorded by every rank.*$", text, re.M)[:3]:
        print("  problem: %s" % p.strip())
    return 1 if bad else 0


def phase_labels(runs, text_log, text, trace, wrapped=True):
    """A pipeline_steps.py run whose forward and backward work are NVTX
    ranges "forward microbatch M" and "backward microbatch M" (or
    pipelining_steps.py's, with "chunk C" too): kernels
    labelled (the summary's count), the report's pipeline shape from the
    labels, every step of every rank with kernels of each phase and
    microbatch, and each rank's labelled forward and backward kernel time
    against the script's CUDA-event times of its forward and backward."""
    pp, m, v = runs[0]["pp"], runs[0]["microbatches"], runs[0].get("vpp", 1)
    bad = 0
    if wrapped:
        lab = re.search(r"kernels: (\d+) kernels .*?, (\d+) kernels launched inside NVTX ranges named as forward or backward work", text_log)
        ok = lab is not None and int(lab.group(2)) > 0
        bad += not ok
        print("%s phases: %s of %s kernels labelled by the NVTX range they were launched in"
              % ("PASS" if ok else "FAIL", lab.group(2) if lab else "none", lab.group(1) if lab else "?"))
    shape = re.search(r"pipeline: (\d+) stages? × (\d+) chunks? × (\d+) microbatch(?:es)?; ideal bubble \(p−1\)/\(v·m\+p−1\) = ([\d.]+)%", text)
    ok = shape is not None and (int(shape.group(1)), int(shape.group(2)), int(shape.group(3))) == (pp, v, m)
    bad += not ok
    print("%s phases: report %s (want %d stages × %d chunks × %d microbatches, from the labels)"
          % ("PASS" if ok else "FAIL", shape.group(0) if shape else "no pipeline shape line", pp, v, m))
    events, rank_of = trace_events(trace)
    seen = collections.defaultdict(set)
    busy = collections.defaultdict(list)
    for e in events:
        a = e.get("args", {})
        if e.get("ph") != "X" or e.get("cat") != "kernel" or "phase" not in a:
            continue
        key = (rank_of.get(e["pid"], -1), int(a.get("step", -1)))
        seen[key].add((a["phase"], int(a.get("microbatch", -1)), int(a.get("chunk", -1))))
        busy[key + (a["phase"],)].append((float(e["ts"]), float(e["ts"]) + float(e["dur"])))
    want = {(ph, mb, c) for ph in ("forward", "backward") for mb in range(m) for c in range(v)}
    inf = float("inf")
    for r in sorted(runs, key=lambda r: r["rank"]):
        rank, n = r["rank"], r["steps"]
        # The trace's own step numbers: 0 to n-1 from the script's NVTX
        # ranges, 1 to n from torch.profiler's ProfilerStep#N.
        steps = sorted({s for (rk, s) in seen if rk == rank and s >= 0}) or list(range(n))
        whole = [s for s in steps if seen[(rank, s)] == want]
        # A trace may hold fewer steps than ran where its bound left the
        # last out, which profile-run's trace line then names.
        cut = re.search(r"\((steps? [\d–]+) left out whole: the trace holds (\d+) records at most", text_log)
        ok = len(whole) == len(steps) and (len(steps) == n or cut is not None and len(steps) < n)
        bad += not ok
        odd = [(s, sorted(seen[(rank, s)] ^ want)[:3]) for s in steps if s not in whole][:2]
        print("%s phases rank %d: %d of the trace's %d steps (of %d run%s) with kernels of every phase, microbatch and chunk (%d)%s"
              % ("PASS" if ok else "FAIL", rank, len(whole), len(steps), n,
                 "; %s left out by its bound of %s records" % (cut.group(1), cut.group(2)) if cut and len(steps) < n else "",
                 v, "; not: %s" % odd if odd else ""))
        k = r.get("ranks_per_gpu", 1)
        for ph, script in (("forward", r.get("forward_ms")), ("backward", r.get("backward_ms"))):
            if not script:
                continue
            got = statistics.mean(union_us(busy[(rank, s, ph)], -inf, inf) / 1e3 for s in steps)
            want_ms = statistics.mean(script)
            if k <= 1:
                ok, how = abs(got - want_ms) <= 0.10 * want_ms, "within 10%"
            else:
                ok, how = want_ms / k * 0.9 <= got <= 1.10 * want_ms, "%d ranks a GPU: between the span / %d and the span" % (k, k)
            bad += not ok
            print("%s phases rank %d: %s kernels %.3f ms a step; the script's %s by CUDA events %.3f ms (%+.1f%%; %s)"
                  % ("PASS" if ok else "FAIL", rank, ph, got, ph, want_ms, 100 * (got / want_ms - 1), how))
    return bad


def union_us(intervals, lo, hi):
    """The length of the union of intervals (start, end), clipped to [lo, hi]."""
    total, cur_s, cur_e = 0.0, None, None
    for s, e in sorted((max(s, lo), min(e, hi)) for s, e in intervals):
        if e <= s:
            continue
        if cur_e is None or s > cur_e:
            if cur_e is not None:
                total += cur_e - cur_s
            cur_s, cur_e = s, e
        else:
            cur_e = max(cur_e, e)
    if cur_e is not None:
        total += cur_e - cur_s
    return total


def kernels(log, report, trace):
    """A wrapped run of examples/torch/kernel_steps.py: per step, the
    kernels and their device time against the script's own count and
    CUDA-event time; the report's busy share against the script's."""
    runs = tool_lines(log, "kernel_steps")
    if len(runs) != 1:
        print("FAIL kernels: %d kernel_steps lines in %s, want 1" % (len(runs), log))
        return 1
    r = runs[0]
    events, rank_of = trace_events(trace)
    steps, kern = {}, collections.defaultdict(list)
    labels = collections.defaultdict(collections.Counter)  # step -> (phase, microbatch) -> kernels
    for e in events:
        if e.get("ph") != "X":
            continue
        a = e.get("args", {})
        if e.get("name") == "step" and e.get("cat") == "host" and "step" in a:
            steps[int(a["step"])] = (float(e["ts"]), float(e["ts"]) + float(e["dur"]))
        elif e.get("cat") == "kernel":
            kern[int(a.get("step", -1))].append((float(e["ts"]), float(e["ts"]) + float(e["dur"])))
            labels[int(a.get("step", -1))][(a.get("phase", ""), int(a.get("microbatch", -1)))] += 1
    bad = 0
    if len(steps) != r["steps"]:
        print("FAIL kernels: the trace has %d steps, the script marked %d" % (len(steps), r["steps"]))
        bad += 1
    errs = []
    for n in range(r["steps"]):
        if n not in steps:
            continue
        lo, hi = steps[n]
        if n == 0:
            # Warm-up: the host sets cuBLAS up between the events.
            print("INFO kernels step 0 (warm-up, not checked): %d kernels, %.3f ms of device time; the script's events %.3f ms"
                  % (len(kern.get(0, [])), union_us(kern.get(0, []), lo, hi) / 1e3, r["gpu_step_ms"][0]))
            continue
        ks = kern.get(n, [])
        busy_ms = union_us(ks, lo, hi) / 1e3
        want_ms = r["gpu_step_ms"][n]
        err = busy_ms / want_ms - 1
        errs.append(err)
        ok = len(ks) == r["kernels_per_step"] and -0.10 <= err <= 0.005
        bad += not ok
        print("%s kernels step %d: %d kernels (launched %d), device time %.3f ms, the script's events %.3f ms (%+.2f%%)"
              % ("PASS" if ok else "FAIL", n, len(ks), r["kernels_per_step"], busy_ms, want_ms, 100 * err))
        if r.get("phase_ranges"):
            # Every kernel launched inside "forward microbatch M" carries
            # phase forward and microbatch M.
            want = collections.Counter({("forward", mb): k for mb, k in enumerate(r["kernels_per_range"])})
            ok = labels[n] == want
            bad += not ok
            print("%s kernels step %d labels: %s; launched %s"
                  % ("PASS" if ok else "FAIL", n, dict(sorted(labels[n].items())), dict(sorted(want.items()))))
    rows = step_rows(open(report, errors="replace").read())
    got = rows.get(0)
    # The report's busy share of all its steps, step 0 included, against
    # the same share computed here from the trace's kernels and steps.
    want_busy = 100 * sum(union_us(kern.get(n, []), lo, hi) for n, (lo, hi) in steps.items()) / sum(hi - lo for lo, hi in steps.values())
    try:
        busy = float(got[2]) if got else None
    except ValueError:
        busy = None
    ok = busy is not None and abs(busy - want_busy) <= 0.5
    bad += not ok
    print("%s kernels report: busy %s%% of the steps; the trace's kernels cover %.1f%% of its steps"
          % ("PASS" if ok else "FAIL", got[2] if got else "no row", want_busy))
    if errs:
        print("kernels: device time against the script's events, per step: median %+.2f%%, range %+.2f%% to %+.2f%%"
              % (100 * statistics.median(errs), 100 * min(errs), 100 * max(errs)))
    return 1 if bad else 0


def within5(time_ratio):
    """Whether a time ratio (trainscope over the script) puts both the
    time and the busbw (bytes × factor over the time: the inverse ratio)
    within 5 % of the script's.

    >>> within5(1.0), within5(0.951), within5(0.953), within5(1.04), within5(0)
    (True, False, True, True, False)
    """
    return time_ratio > 0 and abs(time_ratio - 1) <= 0.05 and abs(1 / time_ratio - 1) <= 0.05


def main(argv):
    if len(argv) == 5 and argv[1] == "--kernels":
        return kernels(argv[2], argv[3], argv[4])
    if len(argv) in (4, 5) and argv[1] == "--pipeline":
        return pipeline(*argv[2:])
    if len(argv) == 6 and argv[1] == "--imported-pipeline":
        return pipeline(*argv[2:])
    if len(argv) == 5 and argv[1] == "--fsdp":
        return fsdp(argv[2], argv[3], argv[4])
    if len(argv) == 3 and argv[1] == "--cycle-steps":
        return cycle_steps(argv[2])
    if len(argv) in (4, 5) and argv[1] == "--cycle":
        return cycle(*argv[2:])
    if len(argv) == 5 and argv[1] == "--ddp":
        return ddp(argv[2], argv[3], argv[4])
    if len(argv) == 4 and argv[1] == "--straggler":
        return straggler(argv[2], argv[3])
    if len(argv) == 4 and argv[1] == "--steps":
        return steps(argv[2], argv[3])
    if len(argv) != 3:
        print(__doc__)
        return 2
    results = script_results(argv[1])
    ops, groups = trace_ops(argv[2])
    for (rank, group, grank, gsize), n in sorted(groups.items()):
        print("  trace rank %d: %d operations on group %r as rank %s of %s" % (rank, n, group, grank, gsize))
    fails = 0
    print("script: %d rank(s); trace: %d (rank, op, bytes) kinds, %d operations, %d with device time"
          % (len(results), len(ops), sum(len(v) for v in ops.values()),
             sum(1 for v in ops.values() for x in v if x[2] is not None)))
    for key in sorted(ops):
        v = ops[key]
        print("  trace rank %d %-10s %10d B: %4d calls, %4d device-timed" % (key + (len(v), sum(1 for x in v if x[2] is not None))))
    pair_x = {}  # (rank, bytes) -> the Send's and the Recv's transfer times of a pair loop
    time_checks = 0  # PASS or FAIL time and pair lines: none means no call was long enough
    for r in results:
        rank = r["rank"]
        # The script issues its loops one after the other: each takes the
        # next operations of its (rank, op, bytes) from the trace, in time
        # order, and the last loop of a key takes all that are left.
        cursor = collections.Counter()
        remaining = collections.Counter()
        for res in r["results"]:
            for name in (["Send", "Recv"] if res["op"] == "SendRecv" else [res["op"]]):
                remaining[(name, res["bytes"])] += 1
        for res in r["results"]:
            names = ["Send", "Recv"] if res["op"] == "SendRecv" else [res["op"]]
            want = res["calls"] + res["warmup_calls"]
            per_call_us = res["seconds"] / res["calls"] * 1e6
            for name in names:
                all_ops = ops.get((rank, name, res["bytes"]), [])
                c = cursor[(name, res["bytes"])]
                remaining[(name, res["bytes"])] -= 1
                got = all_ops[c:c + want] if remaining[(name, res["bytes"])] > 0 else all_ops[c:]
                cursor[(name, res["bytes"])] = c + want
                name = name if res["op"] != "SendRecv" else name + " (pair)"
                ok = len(got) == want
                fails += not ok
                print("%s count rank %d %s %d B: %d in the trace, %d issued" % ("PASS" if ok else "FAIL", rank, name, res["bytes"], len(got), want))
                timed = [x[2] for x in got[res["warmup_calls"]:] if x[2] is not None]
                if len(timed) != res["calls"]:
                    print("INFO time  rank %d %s %d B: %d of %d timed calls have device time; script %.2f us/call"
                          % (rank, name, res["bytes"], len(timed), res["calls"], per_call_us))
                    continue
                mean = statistics.fmean(timed)
                ratio = mean / per_call_us if per_call_us > 0 else float("inf")
                if "host_seconds" in res:
                    # Where a loop's time went: the script's host time per
                    # call (its calls returning) beside trainscope's host
                    # span (NCCL's enqueue) and device time of each call.
                    host_us = res["host_seconds"] / res["calls"] * 1e6
                    spans = [x[1] for x in got[res["warmup_calls"]:]]
                    print("INFO where rank %d %s %d B: script loop %.2f us/call, of which its calls took %.2f us on the host (%.0f %%); "
                          "trainscope host span %.2f us, device %.2f us"
                          % (rank, name, res["bytes"], per_call_us, host_us, 100 * host_us / per_call_us if per_call_us else 0,
                             statistics.fmean(spans) if spans else 0, mean))
                xfers = [x[3] for x in got[res["warmup_calls"]:] if x[3] is not None]
                if res["op"] == "SendRecv" and len(xfers) == res["calls"]:
                    # A grouped pair over a proxied transport is done when
                    # the proxy has moved both its send's and its
                    # receive's data, after the kernel: per pair, the later
                    # of the two ends.
                    xmean = statistics.fmean(xfers)
                    print("INFO xfer  rank %d %s %d B: trainscope kernel start to transfer end %.2f us/call; kernel alone %.2f us/call"
                          % (rank, name, res["bytes"], xmean, mean))
                    pair_x.setdefault((rank, res["bytes"]), []).append(xfers)
                    both = pair_x[(rank, res["bytes"])]
                    if len(both) == 2:
                        pmean = statistics.fmean(max(a, b) for a, b in zip(*both))
                        pratio = pmean / per_call_us if per_call_us > 0 else float("inf")
                        if not strict(res["bytes"], per_call_us):
                            print("INFO pair  rank %d SendRecv %d B: trainscope %.2f us/pair (the later transfer end), script %.2f us/call (gaps included), ratio %.4f"
                                  % (rank, res["bytes"], pmean, per_call_us, pratio))
                        else:
                            ok = within5(pratio)
                            fails += not ok
                            time_checks += 1
                            print("%s pair  rank %d SendRecv %d B: trainscope %.2f us/pair (the later transfer end), script %.2f us/call, ratio %.4f"
                                  % ("PASS" if ok else "FAIL", rank, res["bytes"], pmean, per_call_us, pratio))
                    continue
                if not strict(res["bytes"], per_call_us):
                    # The script's loop time holds the gaps between calls,
                    # which small messages and short calls do not hide.
                    print("INFO time  rank %d %s %d B: trainscope %.2f us/call, script %.2f us/call (gaps included), ratio %.4f"
                          % (rank, name, res["bytes"], mean, per_call_us, ratio))
                    continue
                ok = within5(ratio)
                fails += not ok
                time_checks += 1
                print("%s time  rank %d %s %d B: trainscope %.2f us/call (median %.2f), script %.2f us/call, ratio %.4f (busbw ratio %.4f); script busbw %.2f GB/s"
                      % ("PASS" if ok else "FAIL", rank, name, res["bytes"], mean, statistics.median(timed), per_call_us, ratio,
                         1 / ratio if ratio > 0 else float("inf"), res["busbw_GBps"]))
    if results and not time_checks:
        fails += 1
        print("FAIL time: no call of %d MiB or more took %.0f us: nothing to check the device times by (run larger sizes)"
              % (STRICT_BYTES >> 20, STRICT_US))
    print("%s: %d failed" % ("FAIL" if fails or not results else "PASS", fails))
    return 1 if fails or not results else 0


if __name__ == "__main__":
    try:
        sys.exit(main(sys.argv))
    except (OSError, ValueError, KeyError, IndexError, TypeError, AttributeError, ZeroDivisionError) as e:
        # A missing or malformed input (a run that wrote no report or
        # trace) is a failed check: say so on a FAIL line, which the
        # scripts' summaries keep, not only in a traceback they filter out.
        import traceback
        traceback.print_exc()
        mode = sys.argv[1] if len(sys.argv) > 1 and sys.argv[1].startswith("--") else ""
        print("FAIL wrapcheck %s: %s: %s" % (mode or "check", type(e).__name__, e))
        sys.exit(1)
