"""The Triton examples (models/ops/exhibits/triton_ops.py): right against torch, carded and
trained on a CPU under Triton's interpreter, natively on CUDA; and the lab without them. Needs
the triton extra (pip install -e ".[triton]"); CI runs these with `pytest -m triton`."""

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch

pytest.importorskip("triton", reason="the triton extra is not installed: pip install -e .[triton]")
pytestmark = pytest.mark.triton

ROOT = Path(__file__).resolve().parents[2]
OPS = "models.ops.exhibits.triton_ops"
INPUTS = "tests.ops.triton_inputs"
CUDA = pytest.mark.skipif(not torch.cuda.is_available(), reason="CUDA not available")


def python(*args: str, interpret: str | None = None, timeout: float = 300) -> subprocess.CompletedProcess:
    """`python ARGS` in a fresh process, as a user runs it, TRITON_INTERPRET as given (None: unset)."""
    env = {k: v for k, v in os.environ.items() if k not in ("TRITON_INTERPRET", "HYDRA_FULL_ERROR")}
    env |= {"PYTHONPATH": str(ROOT), "OMP_NUM_THREADS": "1"} | ({"TRITON_INTERPRET": interpret} if interpret else {})
    return subprocess.run([sys.executable, *args], cwd=ROOT, env=env, capture_output=True, text=True,
                          timeout=timeout)


def row(card: str, name: str) -> str:
    return next(line for line in card.splitlines() if line.startswith(f"{name:<16} "))


KERNELS_MATCH_TORCH = f"""
import torch, torch.nn.functional as F, {OPS} as ops
assert type(ops._silu_kernel).__name__ == "InterpretedFunction"
g = torch.Generator().manual_seed(0)
for dtype in (torch.float32, torch.float64):  # float32 inside the kernels: float32's precision
    x, a, b = (torch.randn(3, 700, generator=g, dtype=dtype) * 4 for _ in range(3))  # > a BLOCK
    for op, ref, args in [(ops.TritonSiLU.apply, F.silu, (x,)),
                          (ops.TritonSwiGLU.apply, lambda a, b: F.silu(a) * b, (a, b))]:
        mine, theirs = ([t.clone().requires_grad_() for t in args] for _ in range(2))
        out, want = op(*mine), ref(*theirs)
        dy = torch.randn(out.shape, generator=g, dtype=dtype)
        torch.testing.assert_close(out, want, rtol=1e-5, atol=1e-5)
        for got, expected in zip(torch.autograd.grad(out, mine, dy),
                                 torch.autograd.grad(want, theirs, dy), strict=True):
            torch.testing.assert_close(got, expected, rtol=1e-5, atol=1e-5)
print("ok")
"""


def test_the_kernels_compute_silu_and_swiglu_and_their_gradients_under_the_interpreter():
    done = python("-c", KERNELS_MATCH_TORCH, interpret="1")
    assert done.returncode == 0 and done.stdout == "ok\n", done.stderr


def test_importing_the_lab_imports_no_triton():
    code = ("import sys, fitting.run, fitting.opcheck.cli, models.ops.exhibits, train; "
            "print(sorted(m for m in sys.modules if m.split('.')[0] == 'triton'))")
    done = python("-c", code)
    assert done.returncode == 0, done.stderr
    assert done.stdout == "[]\n"


def test_an_op_of_torch_ops_is_not_taken_for_a_triton_op_once_torch_compile_imported_triton():
    code = ("import torch, fitting.opcheck.boundary as s, models.ops as o; "
            "torch.compile(o.relu, backend='aot_eager')(torch.randn(3, requires_grad=True)).sum().backward(); "
            f"import {OPS} as t; print(s.interpreted(o.relu), s.interpreted(t.TritonSiLU.apply))")
    done = python("-c", code, interpret="1")
    assert (done.returncode, done.stdout) == (0, "False True\n"), done.stderr


@pytest.mark.slow
def test_the_card_of_the_interpreted_silu_answers_every_row_and_exits_0():
    done = python("-m", "fitting.opcheck", "activation", f"{OPS}:TritonSiLU", "--ref",
                  "torch.nn.functional:silu")
    assert done.returncode == 0, done.stdout + done.stderr
    card = done.stdout
    assert row(card, "training").split()[1] == "note"  # its precision, judged at float32
    assert row(card, "training").endswith("gradcheck (float32): analytical = numerical")
    assert "note: it computes in float32 on float64 inputs: its checks ran at that precision" in card
    assert row(card, "second order").split()[2] == "unsupported"  # its backward is a kernel
    assert row(card, "compiles").split(None, 2)[1:] == \
        ["note", "not checked under Triton's interpreter (TRITON_INTERPRET=1)"]
    assert "under Triton's interpreter, whose time is not the kernel's (no time ratio" in row(card, "cost")
    assert "× time" not in row(card, "cost")
    trains = row(card, "trains the same")
    assert trains.split()[3] == "pass" and \
        "(mlp: 30 steps of SGD at lr 0.01, seeds 0-2, fewer under Triton's interpreter)" in trains
    assert card.rstrip().endswith("exit 0: nothing wrong; 2 notes (--strict fails on notes)")


@pytest.mark.skipif(torch.cuda.is_available(), reason="with CUDA, Triton finds a driver")
def test_triton_without_its_interpreter_on_a_cpu_is_one_line_saying_what_to_set():
    card = f"from fitting.opcheck.cli import main; raise SystemExit(main(['activation', '{OPS}:TritonSiLU']))"
    done = python("-c", f"import {OPS}; {card}")  # triton imported before: too late to set it
    assert (done.returncode, done.stdout) == (2, ""), done.stderr
    assert done.stderr == f"error: ops.activation={OPS}:TritonSiLU: triton was imported before " \
        "TRITON_INTERPRET=1 was set, so its kernels cannot run on this CPU: TRITON_INTERPRET=1 python ...\n"
    done = python("-c", card, interpret="0")  # the user's own setting is kept
    assert (done.returncode, done.stdout) == (2, ""), done.stderr
    assert done.stderr == f"error: ops.activation={OPS}:TritonSiLU: calling it on x, as the mlp calls " \
        "it: Triton finds no GPU here: TRITON_INTERPRET=1 python ... runs its kernels on the CPU (set " \
        "before they are defined)\n"


@pytest.mark.slow
def test_the_mlp_trains_with_the_interpreted_silu_as_with_torchs(tmp_path):
    final = {}
    for op in (f"{OPS}:TritonSiLU", "torch.nn.functional:silu"):
        out = tmp_path / op.split(":")[1]
        done = python("train.py", "task=mlp", f"ops.activation={op}", "optimizer=sgd", "steps=20",
                      "device=cpu", f"hydra.run.dir={out}")
        assert done.returncode == 0, done.stderr
        final[op] = json.loads((out / "results.json").read_text())["final_loss"]
    mine, theirs = final.values()
    assert abs(mine - theirs) <= 1e-4 * theirs, final  # float32 rounding inside the kernel only


@pytest.mark.slow
def test_the_card_of_the_interpreted_swiglu_passes_against_torch():
    done = python("-m", "fitting.opcheck", "any", f"{OPS}:TritonSwiGLU", "--ref", f"{INPUTS}:swiglu",
                  "--inputs", f"{INPUTS}:swiglu_samples", "--quick")
    assert done.returncode == 0, done.stdout + done.stderr
    assert row(done.stdout, "training").split()[1] == "note" and "gradcheck (float32)" in done.stdout
    assert "compiles         note                   not checked under Triton's interpreter" in done.stdout


@CUDA
def test_the_kernels_run_natively_on_cuda_and_the_card_measures_their_cost():
    code = (f"import torch, {OPS} as ops; x = torch.randn(256, 64, device='cuda', requires_grad=True); "
            "y = ops.TritonSiLU.apply(x); y.sum().backward(); "
            "torch.testing.assert_close(y, torch.nn.functional.silu(x)); "
            "print(type(ops._silu_kernel).__name__)")
    done = python("-c", code)
    assert done.returncode == 0 and done.stdout == "JITFunction\n", done.stderr
    done = python("-m", "fitting.opcheck", "activation", f"{OPS}:TritonSiLU", "--ref",
                  "torch.nn.functional:silu", "--device", "cuda", "--quick")
    assert done.returncode == 0, done.stdout + done.stderr
    assert "× time" in row(done.stdout, "cost") and "interpreter" not in done.stdout




@pytest.mark.slow
def test_ligers_fused_linear_cross_entropy_is_carded_on_a_cpu():
    pytest.importorskip("liger_kernel", reason="liger-kernel is not installed")
    done = python("-m", "fitting.opcheck", "any",
                  "liger_kernel.transformers.functional:liger_fused_linear_cross_entropy",
                  "--ref", f"{INPUTS}:linear_cross_entropy", "--inputs", f"{INPUTS}:linear_cross_entropy_samples", "--quick")
    assert done.returncode == 0, done.stdout + done.stderr
    assert row(done.stdout, "training").split()[1] == "note"  # float32 inside: its precision
    assert row(done.stdout, "training").endswith("gradcheck (float32): analytical = numerical")


def test_a_liger_op_that_fails_inside_the_interpreter_is_one_line_naming_it():
    pytest.importorskip("liger_kernel", reason="liger-kernel is not installed")
    done = python("-m", "fitting.opcheck", "any", "liger_kernel.ops.rms_norm:LigerRMSNormFunction",
                  "--ref", f"{INPUTS}:rms_norm", "--inputs", f"{INPUTS}:rms_norm_samples")
    assert done.returncode == 2 and done.stdout == ""
    assert done.stderr == "error: any liger_kernel.ops.rms_norm:LigerRMSNormFunction: calling it on " \
        "sample 0: AttributeError: 'float' object has no attribute 'to' (inside Triton's interpreter, " \
        "which does not run every kernel: try a GPU)\n"
