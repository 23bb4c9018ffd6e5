"""Tests of twin.py. Argument handling needs only the standard library; the
training tests run on the CPU where PyTorch is importable and skip otherwise.

    python3 -m unittest discover -s benchmarks/torch -p 'test_*.py'

(from the repository root: from benchmarks/, the directory torch would be
imported in place of PyTorch).
"""

import contextlib
import io
import json
import math
import os
import subprocess
import sys
import unittest

import twin

def _have_torch():
    try:
        import torch
    except ImportError:
        return False
    return hasattr(torch, "tensor")  # not a directory named torch


HAVE_TORCH = _have_torch()
HERE = os.path.dirname(os.path.abspath(__file__))
SMALL = ["--device", "cpu", "--width", "16", "--layers", "4", "--microbatches", "4", "--microbatch-size", "8"]


class ArgsTest(unittest.TestCase):
    def test_defaults_are_the_trainers(self):
        a = twin.parse_args([])
        # pipeline.DefaultConfig: 8 microbatches of 16 rows, 16 layers of
        # width 128, learning rate 2.
        self.assertEqual((a.width, a.layers, a.microbatches, a.microbatch_size, a.lr), (128, 16, 8, 16, 2.0))
        self.assertEqual((a.dtype, a.profile, a.grad), ("float32", "off", "explicit"))

    def test_model_flops(self):
        # 6 · (8·256 rows) · 4096² · 8 layers
        self.assertEqual(twin.model_flops_per_step(4096, 8, 8, 256), 1649267441664)
        self.assertEqual(twin.describe(twin.parse_args(["--width", "4096", "--layers", "8", "--microbatch-size", "256"]))
                         ["model_flops_per_step"], 1649267441664)

    def test_rejects_bad_values(self):
        for argv in (["--width", "0"], ["--steps", "0"], ["--warmup", "-1"], ["--lr", "0"], ["--lr", "nan"],
                     ["--dtype", "fp16"], ["--profile", "nsys"], ["--torch-trace", "t.json"]):
            with self.subTest(argv=argv), contextlib.redirect_stderr(io.StringIO()) as err:
                with self.assertRaises(SystemExit) as e:
                    twin.parse_args(argv)
                self.assertEqual(e.exception.code, 2)
                self.assertIn("twin.py: error:", err.getvalue())

    def test_dry_run_needs_no_torch(self):
        # -S -I: no site packages, so no PyTorch even where it is installed.
        p = subprocess.run([sys.executable, "-S", "-I", os.path.join(HERE, "twin.py"), "--dry-run", "--profile", "torch"],
                           capture_output=True, text=True, timeout=60)
        self.assertEqual(p.returncode, 0, p.stderr)
        j = json.loads(p.stdout)
        self.assertEqual((j["tool"], j["profile"], j["steps"], j["rows_per_step"]), ("torch", "torch", 30, 128))

    def test_says_so_without_torch(self):
        p = subprocess.run([sys.executable, "-S", "-I", os.path.join(HERE, "twin.py"), "--steps", "1"],
                           capture_output=True, text=True, timeout=60)
        self.assertEqual(p.returncode, 3)
        self.assertIn("PyTorch is not importable", p.stderr)
        self.assertEqual(p.stdout, "")


@unittest.skipUnless(HAVE_TORCH, "PyTorch is not importable here")
class TrainingTest(unittest.TestCase):
    def run_twin(self, *argv):
        out, err = io.StringIO(), io.StringIO()
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
            rc = twin.main(list(SMALL) + list(argv))
        self.assertEqual(rc, 0, err.getvalue())
        lines = out.getvalue().splitlines()
        self.assertEqual(len(lines), 1, "stdout is one JSON line")
        return json.loads(lines[0]), err.getvalue()

    def test_json_line(self):
        j, err = self.run_twin("--steps", "4", "--warmup", "2")
        for k in ("tool", "profile", "steps", "median_step_s", "mean_step_s", "loss_first", "loss_last", "model_flops_per_step"):
            self.assertIn(k, j)
        self.assertEqual((j["tool"], j["profile"], j["steps"], len(j["step_s"])), ("torch", "off", 4, 4))
        self.assertEqual(j["model_flops_per_step"], 6 * 32 * 16 * 16 * 4)
        self.assertLess(j["loss_last"], j["loss_first"])
        self.assertEqual(err.count("(warm-up)"), 2)

    def test_explicit_backward_is_autograds(self):
        import torch
        args = twin.parse_args(SMALL + ["--lr", "0.5"])
        e = twin.Twin(torch, args)
        a = twin.Twin(torch, twin.parse_args(SMALL + ["--lr", "0.5", "--grad", "autograd"]))
        w0 = e.weights.clone()
        for step in range(3):
            le, la = e.step(step), a.step(step)
            self.assertAlmostEqual(le, la, places=6)
        self.assertFalse(torch.allclose(e.weights, w0), "the weights moved")
        got, want = e.weights, torch.stack([p.detach() for p in a.params])
        self.assertTrue(torch.allclose(got, want, rtol=1e-4, atol=1e-6), (got - want).abs().max())

    def test_loss_is_the_trainers_mse(self):
        # Step 0's loss, before any update, from the data and weights
        # directly: the mean over rows and features of (tanh chain − target)².
        import torch
        args = twin.parse_args(SMALL)
        t = twin.Twin(torch, args)
        x = t.data_x[:32].double()
        h = x
        for w in t.weights.double():
            h = torch.tanh(h @ w)
        target = torch.tanh(x @ t.proj.double())
        want = float(((h - target) ** 2).mean())
        self.assertAlmostEqual(t.step(0), want, places=6)

    def test_every_dtype_and_profiler(self):
        for argv in (["--dtype", "tf32"], ["--dtype", "bf16"], ["--dtype", "bf16", "--grad", "autograd"],
                     ["--profile", "torch", "--table-rows", "0"], ["--profile", "cuda", "--table-rows", "0"]):
            with self.subTest(argv=argv):
                j, _ = self.run_twin("--steps", "3", "--warmup", "1", *argv)
                self.assertTrue(math.isfinite(j["loss_last"]))
                self.assertLess(j["loss_last"], j["loss_first"])
        j, _ = self.run_twin("--steps", "2", "--profile", "torch", "--table-rows", "0")
        self.assertEqual(j["activities"], ["CPU"])
        self.assertIn("profiler_post_s", j)
        # Without a GPU there is no CUDA activity: CPU stands in for it.
        j, _ = self.run_twin("--steps", "2", "--profile", "cuda", "--table-rows", "0")
        self.assertEqual((j["profile"], j["activities"]), ("cuda", ["CPU"]))


if __name__ == "__main__":
    unittest.main()
