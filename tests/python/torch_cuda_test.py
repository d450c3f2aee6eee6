"""The `baton` backend on CUDA tensors, as unit tests.

Always: the parts of gpu_torch_check.py that need no GPU (its reference values, the DDP
reference, argument parsing, the sleep calibration arithmetic, and its exit status 77 where
there is no CUDA device), so that the GPU check's own logic is checked on every build machine.
Where torch sees a CUDA device (and skipped otherwise): gpu_torch_check.py's CUDA checks
(every collective and dtype, stream order, DDP) on 2 ranks sharing GPU 0, one build daemon.
The full GPU run (2 and 4 ranks) is gpu_torch_check.py itself (scripts/gpu_check.sh).
"""

import contextlib
import io
import os
import unittest

from baton_testing import import_torch_backend

torch = import_torch_backend()
import gpu_torch_check as check  # noqa: E402


def batond_path():
    bin_dir = os.environ.get("BATON_BIN_DIR")
    return os.path.join(bin_dir, "batond") if bin_dir else None


class ReferenceTest(unittest.TestCase):
    def test_all_reduce_expectations_by_hand(self):
        # Two ranks, four elements: rank 0 contributes [1, 3, 5, 2], rank 1 [2, 5, 3, 1].
        self.assertEqual(check.contribution(0, 4, torch.int64, "SUM").tolist(), [1, 3, 5, 2])
        self.assertEqual(check.contribution(1, 4, torch.int64, "SUM").tolist(), [2, 5, 3, 1])
        want = {"SUM": [3, 8, 8, 3], "MIN": [1, 3, 3, 1], "MAX": [2, 5, 5, 2],
                "AVG": [1, 4, 4, 1]}
        for op, values in want.items():
            self.assertEqual(check.expected_reduce(2, 4, torch.int64, op).tolist(), values, op)
        self.assertEqual(check.expected_reduce(2, 4, torch.float32, "AVG").tolist(),
                         [1.5, 4.0, 4.0, 1.5])
        # PRODUCT: rank 0 [1, 2, 1, 2], rank 1 [2, 1, 2, 1].
        self.assertEqual(check.expected_reduce(2, 4, torch.uint8, "PRODUCT").tolist(),
                         [2, 2, 2, 2])
        with self.assertRaises(ValueError):
            check.expected_reduce(2, 4, torch.int64, "BAND")

    def test_references_are_exact_in_every_dtype(self):
        # The checks compare exactly: every reference must be representable in every dtype, at
        # the largest world size the script accepts.
        world = check.MAX_WORLD
        for name in check.DTYPE_NAMES:
            dtype = check.dtype_of(name)
            for op in check.REDUCE_OPS:
                exact = check.expected_reduce(world, check.N, torch.float64, op)
                if op == "AVG":
                    continue  # compared with a tolerance for floats, floored for integers
                got = check.expected_reduce(world, check.N, dtype, op).to(torch.float64)
                self.assertTrue(torch.equal(got, exact), f"{name} {op}")
            total = sum(check.values(p, check.N, torch.int64) for p in range(world))
            self.assertLessEqual(int(total.max()), 255)
            self.assertTrue(torch.equal(total.to(dtype).to(torch.int64), total), name)

    def test_mismatch_names_the_first_difference(self):
        want = torch.tensor([1.0, 2.0, 3.0])
        self.assertIsNone(check.mismatch(want.clone(), want))
        self.assertIn("first at 1: got 9.0, want 2.0",
                      check.mismatch(torch.tensor([1.0, 9.0, 3.0]), want))
        self.assertIn("want torch.float32", check.mismatch(want.double(), want))
        self.assertIsNone(check.close_mismatch(want + 1e-7, want, rtol=1e-5, atol=0))
        self.assertIsNotNone(check.close_mismatch(want + 1e-2, want, rtol=1e-5, atol=0))

    def test_ddp_reference_trains_and_is_reproducible(self):
        params, grads = check.ddp_reference(2)
        again, _ = check.ddp_reference(2)
        initial = list(check.ddp_model().parameters())
        self.assertEqual(len(params), len(initial))
        for p, q, p0, g in zip(params, again, initial, grads):
            self.assertTrue(torch.equal(p, q))
            self.assertFalse(torch.equal(p, p0.detach()), "SGD changed nothing")
            self.assertGreater(float(g.abs().sum()), 0.0)

    def test_sleep_cycles(self):
        self.assertEqual(check.sleep_cycles(1_980_000.0, 400.0), 792_000_000)
        self.assertEqual(check.sleep_cycles(0.5, 1.0), 1)
        with self.assertRaises(ValueError):
            check.sleep_cycles(0.0, 400.0)

    def test_arguments(self):
        args = check.parse_args(["--device", "cpu", "--batond", "/x/batond", "--worlds", "2,3"])
        self.assertEqual((args.device, args.batond, args.worlds, args.daemon_device),
                         ("cpu", "/x/batond", [2, 3], "auto"))
        for bad in (["--worlds", "1"], ["--worlds", "2,x"], ["--worlds", "9"],
                    ["--device", "mps"]):
            with self.assertRaises(SystemExit) as exited, \
                    contextlib.redirect_stderr(io.StringIO()):
                check.parse_args(bad)
            self.assertEqual(exited.exception.code, 2, bad)

    @unittest.skipIf(torch.cuda.is_available(), "there is a CUDA device")
    def test_skips_without_cuda(self):
        self.assertEqual(check.main(["--batond", "/nonexistent/batond"]), check.SKIPPED)


@unittest.skipUnless(torch.cuda.is_available(), "needs a CUDA device")
class CudaTensorsTest(unittest.TestCase):
    def test_gpu_check_on_two_ranks(self):
        batond = batond_path()
        if batond is None:
            self.skipTest("BATON_BIN_DIR is not set (run through ctest)")
        self.assertEqual(check.main(["--device", "cuda", "--batond", batond, "--worlds", "2"]), 0)


if __name__ == "__main__":
    unittest.main(verbosity=2)
