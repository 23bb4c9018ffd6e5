"""Tests of summarize.py on fabricated raw results (standard library only).

    python3 -m unittest discover -s benchmarks/torch -p 'test_*.py'
"""

import doctest
import json
import os
import tempfile
import unittest

import summarize

HEADER = ["job", "dtype", "variant", "round", "tool", "rc", "start", "end", "skip",
          "width", "layers", "microbatches", "microbatch_size", "out", "err", "cmd"]


def load_tests(loader, tests, ignore):
    tests.addTests(doctest.DocTestSuite(summarize))
    return tests


class Raw:
    """A raw directory as scripts/gpu-bench.sh leaves it."""

    def __init__(self, root):
        self.root = root
        self.rows = []

    def write(self, rel, text):
        path = os.path.join(self.root, rel)
        os.makedirs(os.path.dirname(path), exist_ok=True)
        with open(path, "w", encoding="utf-8") as f:
            f.write(text)

    def trainscope(self, job, variant, rnd, step_ms, rc=0, dtype="float32", model=(128, 16, 8, 16), skip=3, err=""):
        """A profile-run process whose step lines say step_ms (milliseconds,
        warm-up steps included)."""
        lines = ["profile-run: training on cuda: pp=1 vpp=1 dp=1"]
        for i, ms in enumerate(step_ms):
            lines.append("step %d: loss %.6f, %sms" % (i, 0.4 - 0.01 * i, ms))
        base = "%s-%s/%s.r%d" % (job, dtype, variant, rnd)
        self.write(base + ".out", "\n".join(lines) + "\n")
        self.write(base + ".err", err)
        self.rows.append([job, dtype, variant, str(rnd), "trainscope", str(rc), "100.0", "104.5", str(skip)]
                         + [str(v) for v in model] + [base + ".out", base + ".err", ".bin/profile-run -profile x"])

    def twin(self, job, variant, rnd, step_s, rc=0, dtype="float32", model=(128, 16, 8, 16), extra=None):
        base = "%s-%s/%s.r%d" % (job, dtype, variant, rnd)
        out = ""
        if step_s is not None:
            j = {"tool": "torch", "profile": "torch" if variant == "torch-profiler" else "off",
                 "steps": len(step_s), "median_step_s": 0, "mean_step_s": 0, "loss_first": 0.37,
                 "loss_last": 0.31, "model_flops_per_step": summarize.flops_per_step(*model),
                 "torch_version": "2.11.0", "step_s": step_s}
            j.update(extra or {})
            out = "some warning\n" + json.dumps(j) + "\n"
        self.write(base + ".out", out)
        self.write(base + ".err", "Traceback: boom\n" if rc else "")
        self.rows.append([job, dtype, variant, str(rnd), "torch", str(rc), "200", "207", "0"]
                         + [str(v) for v in model] + [base + ".out", base + ".err", "python3 twin.py"])

    def finish(self, gemm="", settings=None):
        self.write("runs.tsv", "\n".join("\t".join(r) for r in [HEADER] + self.rows) + "\n")
        self.write("gemm.log", gemm)
        self.write("gpu.csv", "0, NVIDIA H200, 580.159.04, 143771 MiB\n1, NVIDIA H200, 580.159.04, 143771 MiB\n")
        s = {"DATE": "2026-12-02", "ROUNDS": "6", "ROUNDS_RUN": "2", "WARMUP": "3",
             "GEMM_BENCH": "BenchmarkGemmTrainerShape", "CB_LAYOUT": "-pp 2 -vpp 2", "LB_LAYOUT": "-pp 1 -vpp 1"}
        s.update(settings or {})
        self.write("settings.env", "".join("%s=%s\n" % kv for kv in s.items()))


GEMM = """goos: linux
BenchmarkGemmTrainerShape/fp32/forward-16         	     200	    171000 ns/op	        40.00 TFLOP/s
BenchmarkGemmTrainerShape/fp32/grad_weight-16     	     200	    171000 ns/op	        60.00 TFLOP/s
BenchmarkGemmTrainerShape/fp32/grad_input-16      	     200	    171000 ns/op	        60.00 TFLOP/s
BenchmarkGemmTrainerShape/bf16/forward-16         	     200	     20000 ns/op	       500000 GFLOP/s
BenchmarkGemm/fp32/4096-16                        	      20	   2690000 ns/op	        51.40 TFLOP/s-profiler-median	        51.30 TFLOP/s-raw-loop
PASS
"""

CB = (4096, 8, 8, 256)


class SummarizeTest(unittest.TestCase):
    def setUp(self):
        self.tmp = tempfile.TemporaryDirectory()
        self.addCleanup(self.tmp.cleanup)
        self.raw = Raw(os.path.join(self.tmp.name, "raw"))

    def fabricate(self):
        r = self.raw
        # Warm-up steps (the first three) are slow and must not count.
        r.trainscope("launch-bound", "trainscope-off", 1, [900, 900, 900, 10, 10, 12])
        r.trainscope("launch-bound", "trainscope-off", 2, [900, 900, 900, 12, 12, 12])
        r.trainscope("launch-bound", "trainscope-depth1", 1, [900, 900, 900, 10.5, 10.5, 10.5])
        r.trainscope("launch-bound", "trainscope-depth1", 2, [900, 900, 900, 12.6, 12.6, 99])
        r.trainscope("launch-bound", "trainscope-sync", 1, [], rc=2, err="profile-run: -profile: unknown mode\n")
        r.twin("launch-bound", "torch-off", 1, [0.008, 0.008, 0.009])
        r.twin("launch-bound", "torch-off", 2, [0.010, 0.010, 0.010])
        r.twin("launch-bound", "torch-profiler", 1, [0.012, 0.012, 0.012], extra={"device_events_per_step": 682.0})
        r.twin("launch-bound", "torch-profiler", 2, [0.016, 0.016, 0.016], extra={"device_events_per_step": 682.0})
        r.twin("launch-bound", "torch-profiler", 3, None, rc=1)
        # 6 * 2048 * 4096^2 * 8 = 1.649e12 FLOP per step; 40 ms per step is
        # 41.2 TFLOP/s.
        r.trainscope("compute-bound", "trainscope-off", 1, [1, 1, 1, 40, 40, 40], model=CB)
        r.twin("compute-bound", "torch-off", 1, [0.050], model=CB)
        r.trainscope("compute-bound", "trainscope-off", 1, [1, 1, 1, 5, 5], model=CB, dtype="bf16")
        r.trainscope("default-1gpu", "no-flags", 1, [30, 20, 20, 16, 15, 17, 15, 15, 16, 15])
        r.finish(gemm=GEMM)

    def variants(self, s, job, dtype="float32"):
        for g in s["jobs"]:
            if g["job"] == job and g["dtype"] == dtype:
                return g["variants"]
        self.fail("no job %s %s in %s" % (job, dtype, [(g["job"], g["dtype"]) for g in s["jobs"]]))

    def test_medians_and_ratios(self):
        self.fabricate()
        s = summarize.summarize(self.raw.root)
        lb = self.variants(s, "launch-bound")
        off, d1 = lb["trainscope-off"], lb["trainscope-depth1"]
        # Process medians: round 1 10 ms, round 2 12 ms; median of the two 11 ms.
        self.assertEqual([p["median_step_s"] for p in off["processes"]], [0.010, 0.012])
        self.assertAlmostEqual(off["median_step_s"], 0.011)
        self.assertEqual(off["processes"][0]["step_s"], [0.010, 0.010, 0.012])
        self.assertEqual(off["processes"][0]["skipped_steps"], 3)
        # depth 1: 10.5 and 12.6 → 11.55; against 11: 1.05. Within rounds:
        # 1.05 and 1.05.
        self.assertAlmostEqual(d1["median_step_s"], 0.01155)
        self.assertAlmostEqual(d1["ratio_vs_off"], 1.05)
        self.assertAlmostEqual(d1["paired_ratio_median"], 1.05)
        self.assertNotIn("ratio_vs_off", off)
        # The twin's ratios are to the twin unprofiled: (12+16)/2 / 9 → 14/9.
        tw = lb["torch-profiler"]
        self.assertAlmostEqual(lb["torch-off"]["median_step_s"], 0.009)
        self.assertAlmostEqual(tw["ratio_vs_off"], 0.014 / 0.009)
        self.assertAlmostEqual(tw["paired_ratio_median"], (0.012 / 0.008 + 0.016 / 0.010) / 2)
        self.assertEqual((tw["rounds_ok"], tw["rounds_failed"]), (2, 1))
        self.assertIn("Traceback: boom", tw["processes"][2]["first_lines"])
        g = [g for g in s["jobs"] if g["job"] == "launch-bound"][0]
        self.assertAlmostEqual(g["torch_off_vs_trainscope_off"], 0.009 / 0.011)

    def test_means_beside_medians_when_steps_fall_in_two_modes(self):
        r = self.raw
        # Unprofiled, two of three steps in the fast mode (10 ms); profiled,
        # two of three in the slow one (11 ms). The medians jump a whole
        # mode, 10 → 11 ms; the means move by the mix: 31/3 → 32/3 ms.
        r.trainscope("compute-bound", "trainscope-off", 1, [1, 1, 1, 10, 11, 10], model=CB)
        r.trainscope("compute-bound", "trainscope-depth1", 1, [1, 1, 1, 11, 10, 11], model=CB)
        r.finish(gemm=GEMM)
        s = summarize.summarize(self.raw.root)
        cb = self.variants(s, "compute-bound")
        off, d1 = cb["trainscope-off"], cb["trainscope-depth1"]
        self.assertAlmostEqual(d1["ratio_vs_off"], 1.1)
        self.assertAlmostEqual(off["mean_step_s"], 0.031 / 3)
        self.assertAlmostEqual(d1["mean_step_s"], 0.032 / 3)
        self.assertAlmostEqual(d1["mean_ratio_vs_off"], 32 / 31)
        self.assertNotIn("mean_ratio_vs_off", off)
        md = summarize.render_md(s)
        self.assertIn("| 10.667, 1.032× |", md)

    def test_failure_kept_with_its_reason(self):
        self.fabricate()
        s = summarize.summarize(self.raw.root)
        sync = self.variants(s, "launch-bound")["trainscope-sync"]
        self.assertEqual(sync["rounds_ok"], 0)
        self.assertIsNone(sync["median_step_s"])
        self.assertEqual(sync["processes"][0]["rc"], 2)
        self.assertEqual(sync["processes"][0]["first_lines"][0], "profile-run: -profile: unknown mode")
        md = summarize.render_md(s)
        self.assertIn("| trainscope-sync | 0 of 1 | — | failed: exit 2, profile-run: -profile: unknown mode |", md)

    def test_flops_against_gemm_rate(self):
        self.fabricate()
        s = summarize.summarize(self.raw.root)
        rates = s["gemm"]["rates"]
        # fp32: harmonic mean of 40, 60, 60 → 3 / (1/40 + 2/60) = 51.43.
        self.assertAlmostEqual(rates["float32"]["flops"] / 1e12, 3 / (1 / 40 + 2 / 60))
        self.assertEqual(rates["float32"]["source"], "BenchmarkGemmTrainerShape")
        self.assertAlmostEqual(rates["bf16"]["flops"] / 1e12, 500)
        cb = self.variants(s, "compute-bound")["trainscope-off"]
        flop = 6 * 2048 * 4096 * 4096 * 8
        self.assertAlmostEqual(cb["model_flops_per_s"], flop / 0.040)
        self.assertAlmostEqual(cb["of_gemm_rate"], flop / 0.040 / rates["float32"]["flops"])
        bf = self.variants(s, "compute-bound", "bf16")["trainscope-off"]
        self.assertAlmostEqual(bf["of_gemm_rate"], flop / 0.005 / 500e12, places=9)
        self.assertNotIn("tf32", rates)

    def test_gemm_fallback_when_trainer_shape_missing(self):
        self.raw.trainscope("launch-bound", "trainscope-off", 1, [1, 1, 1, 10])
        self.raw.finish(gemm="\n".join(l for l in GEMM.splitlines() if "TrainerShape" not in l))
        s = summarize.summarize(self.raw.root)
        r = s["gemm"]["rates"]["float32"]
        # The raw-loop rate is preferred over the profiler's median.
        self.assertAlmostEqual(r["flops"], 51.30e12)
        self.assertTrue(r["source"].startswith("fallback: BenchmarkGemm"))

    def test_main_writes_json_and_markdown(self):
        self.fabricate()
        out = os.path.join(self.tmp.name, "out")
        self.assertEqual(summarize.main(["--raw", self.raw.root, "--out", out]), 0)
        with open(os.path.join(out, "bench.json"), encoding="utf-8") as f:
            j = json.load(f)
        self.assertEqual(j["gpus"][0]["name"], "NVIDIA H200")
        self.assertEqual(j["torch_version"], "2.11.0")
        with open(os.path.join(out, "bench.md"), encoding="utf-8") as f:
            md = f.read()
        self.assertIn("2026-12-02, 2 × NVIDIA H200 (driver 580.159.04), PyTorch 2.11.0", md)
        self.assertIn("2 rounds (of 6 planned)", md)
        self.assertIn("| trainscope-off | 2 of 2 | 11.000 | 10.000–12.000 | — | — |", md)
        self.assertIn("| trainscope-depth1 | 2 of 2 | 11.550 | 10.500–12.600 | 1.050× | 1.050× |", md)
        self.assertIn("| torch-profiler | 2 of 3 | 14.000 | 12.000–16.000 | 1.556× | 1.550× |", md)
        self.assertIn("torch.profiler recorded 682 device activities", md)
        self.assertIn("#### compute-bound, bf16", md)
        self.assertIn("| float32 | 51.4 | forward 40.0, grad_input 60.0, grad_weight 60.0 | BenchmarkGemmTrainerShape |", md)
        self.assertIn("default-1gpu (`.bin/profile-run -profile x`): exit 0, 10 step lines", md)
        # No table row is left without its closing bar.
        for line in md.splitlines():
            if line.startswith("|"):
                self.assertTrue(line.endswith("|"), line)


if __name__ == "__main__":
    unittest.main()
