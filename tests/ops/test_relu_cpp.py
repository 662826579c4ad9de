"""relu_cpp, the ReLU whose kernels are C++ TORCH_LIBRARY ops: torch.relu's values and gradients,
gradcheck, torch.library.opcheck, its errors, and the op in its slot (training and the card).

The extension is built once per session (module fixture `built`), and only where a C++ compiler
and ninja are present; elsewhere those tests skip and say what is missing."""

import re
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from torch.utils import cpp_extension

from models.ops.exhibits import relu_cpp as mod
from tests.helpers.train_cli import user_env

REPO = Path(__file__).resolve().parents[2]
SPEC = "models.ops.exhibits.relu_cpp:relu_cpp"
MISSING = mod.missing_toolchain()
needs_toolchain = pytest.mark.skipif(
    MISSING is not None, reason=f"building relu_cpp's C++ kernels needs {MISSING}"
)


@pytest.fixture(scope="module")
def built() -> None:
    """Build the extension once (or load it from torch's cache, later sessions)."""
    mod.load()


def _expression(relu, x: torch.Tensor) -> torch.Tensor:
    # micrograd's test expression, with relu in three places.
    z = 2 * x + 2 + x
    q = relu(z) + z * x
    h = relu(z * z)
    y = h + q + q * x
    return relu(y - 20) + y


def _away_from_zero(*shape: int, seed: int = 0) -> torch.Tensor:
    g = torch.Generator().manual_seed(seed)
    t = torch.randn(*shape, generator=g, dtype=torch.float64)
    return (t + 0.1 * t.sign()).requires_grad_()


@needs_toolchain
def test_an_expression_through_relu_cpp_equals_it_through_torch_relu(built):
    x = torch.tensor([-4.0, -1.5, -0.5, 0.5, 2.0, 3.0], requires_grad=True)
    got = _expression(mod.relu_cpp, x)
    got.sum().backward()
    got_grad, x.grad = x.grad, None
    want = _expression(torch.relu, x)
    want.sum().backward()
    assert torch.equal(got, want) and torch.equal(got_grad, x.grad)


@needs_toolchain
@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16, torch.float32, torch.float64])
def test_values_and_gradient_equal_torch_relu_for_every_float_dtype(built, dtype):
    x = torch.tensor([-2.0, -0.0, 0.0, 1.5, float("nan"), -float("inf")], dtype=dtype)
    x = torch.cat([x, torch.randn(1000).to(dtype)]).requires_grad_()
    grad = torch.randn(x.shape).to(dtype)
    got = mod.relu_cpp(x)
    (got_grad,) = torch.autograd.grad(got, x, grad)
    want = torch.relu(x)
    (want_grad,) = torch.autograd.grad(want, x, grad)
    # relu(-0.0) is -0.0, as in torch (a NaN's sign means nothing: torch's bfloat16 flips it).
    real = ~want.isnan()
    assert torch.equal(got.signbit()[real], want.signbit()[real])
    torch.testing.assert_close(got, want, rtol=0, atol=0, equal_nan=True)
    torch.testing.assert_close(got_grad, want_grad, rtol=0, atol=0, equal_nan=True)


@needs_toolchain
def test_a_strided_input_gives_a_contiguous_output_with_the_same_values(built):
    x = torch.randn(2, 3, 4, 5).to(memory_format=torch.channels_last)[:, :, ::2]
    out = mod.relu_cpp(x)
    assert out.is_contiguous() and torch.equal(out, torch.relu(x))


@needs_toolchain
def test_gradcheck_and_gradgradcheck_in_float64(built):
    x = _away_from_zero(5, 7)
    assert torch.autograd.gradcheck(mod.relu_cpp, (x,))
    assert torch.autograd.gradgradcheck(mod.relu_cpp, (x,))


@needs_toolchain
def test_torch_library_opcheck_passes_for_both_ops(built):
    x = _away_from_zero(4, 8)
    grad = torch.randn(4, 8, dtype=x.dtype, requires_grad=True)
    for op, args in [
        (torch.ops.lab_cpp.relu.default, (x,)),
        (torch.ops.lab_cpp.relu_backward.default, (grad, torch.relu(x).detach())),
    ]:
        results = torch.library.opcheck(op, args)
        assert set(results.values()) == {"SUCCESS"}, (op, results)


@needs_toolchain
def test_vmap_has_a_rule_and_matches_torch_relu(built):
    xs = torch.randn(3, 4, 5)
    assert torch.equal(torch.func.vmap(mod.relu_cpp, in_dims=1)(xs), torch.relu(xs).movedim(1, 0))


@needs_toolchain
def test_relu_backward_refuses_mismatched_shapes(built):
    with pytest.raises(RuntimeError, match=r"lab_cpp::relu_backward: grad has shape \[2, 3\] "):
        torch.ops.lab_cpp.relu_backward(torch.ones(2, 3), torch.ones(3, 2))


def test_an_input_off_the_cpu_is_refused_before_anything_is_built():
    x = torch.empty(3, device="meta")
    with pytest.raises(ValueError, match="relu_cpp: its C.. kernels are CPU only, got a tensor on meta"):
        mod.relu_cpp(x)


def test_forward_mode_ad_is_refused_instead_of_dropping_the_tangent():
    x = torch.randn(3)
    with pytest.raises(TypeError, match="relu_cpp: forward-mode AD .* is not supported"):
        torch.func.jvp(mod.relu_cpp, (x,), (torch.ones(3),))


def test_a_missing_compiler_or_ninja_is_named_with_the_fix(monkeypatch):
    monkeypatch.setenv("CXX", "no-such-cxx")
    monkeypatch.setattr(cpp_extension, "is_ninja_available", lambda: False)
    monkeypatch.setattr(mod, "_loaded", False)
    with pytest.raises(RuntimeError) as err:
        mod.load()
    message = str(err.value)
    assert message.startswith(
        "relu_cpp: building its C++ kernels needs a C++ compiler ('no-such-cxx' is not on PATH)"
    )
    assert "ninja (torch builds extensions with it): pip install ninja" in message


def _run(*args: str, cwd: Path = REPO) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, *args], cwd=cwd, env=user_env(), capture_output=True,
                          text=True, timeout=600)


def _final_loss(stdout: str) -> float:
    found = re.findall(r"final loss (\S+) \(", stdout)
    assert len(found) == 1, stdout
    return float(found[0])


@pytest.mark.slow
@needs_toolchain
def test_it_trains_in_the_activation_slot_like_the_builtin(built, tmp_path):
    losses = {}
    for spec in ("builtin", SPEC):
        run_dir = tmp_path / spec.replace(":", "-")
        proc = _run("train.py", "task=mlp", "steps=30", f"ops.activation={spec}",
                    f"hydra.run.dir={run_dir}")
        assert proc.returncode == 0, proc.stderr
        losses[spec] = _final_loss(proc.stdout)
    assert losses[SPEC] == pytest.approx(losses["builtin"], rel=1e-6)


@pytest.mark.slow
@needs_toolchain
def test_the_card_accepts_and_cards_it(built, tmp_path):
    proc = _run("-m", "fitting.opcheck", "activation", SPEC, "--quick", "--out", str(tmp_path))
    # 2 would be a refused spec; 0 or 1 is a card, whatever its rows say.
    assert proc.returncode in (0, 1), proc.stderr
    assert (tmp_path / "opcheck.md").is_file()

