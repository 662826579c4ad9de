"""The transformer ops against their twins (values and gradients, float32 and float64), gradcheck,
what they leave unchanged, and what they save: attention's bytes, the fused cross-entropy's peak."""

from functools import partial

import pytest
import torch

from fitting.track.memory import step_peak
from models.ops import (
    attention,
    attention_formula,
    attention_reference,
    linear_cross_entropy,
    linear_cross_entropy_reference,
    rms_norm,
    rms_norm_reference,
    rope,
    rope_reference,
    rope_tables,
    saved_tensor_bytes,
    swiglu,
    swiglu_reference,
)
from tests.ops.helpers import DEVICES, grads


def _inputs(name: str, dtype: torch.dtype, device: str) -> list:
    """Small seeded inputs of each op; the float ones that take gradients require them."""
    g = torch.Generator().manual_seed(0)

    def t(*shape, grad=True):
        return torch.randn(*shape, generator=g, dtype=torch.float64).to(device, dtype
                                                                           ).requires_grad_(grad)
    if name == "norm":
        return [t(3, 5, 16), t(16), 1e-6]
    if name == "glu":
        return [t(4, 10), t(4, 10)]
    if name == "rope":
        return [t(2, 3, 8, 8), *(c.to(device, dtype) for c in rope_tables(8, 8))]
    if name == "attention":
        return [t(2, 2, 10, 4), t(2, 2, 10, 4), t(2, 2, 10, 4)]
    return [t(10, 8), t(12, 8), torch.randint(0, 12, (10,), generator=g).to(device)]


# name: ours (attention and cross_entropy in blocks smaller than the inputs), twin
OPS = {"norm": (rms_norm, rms_norm_reference), "glu": (swiglu, swiglu_reference),
       "rope": (rope, rope_reference), "attention": (partial(attention, block=4),
                                                     attention_reference),
       "cross_entropy": (partial(linear_cross_entropy, chunk=4), linear_cross_entropy_reference)}


def _leaves(inputs: list) -> list[torch.Tensor]:
    return [x for x in inputs if isinstance(x, torch.Tensor) and x.requires_grad]


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
@pytest.mark.parametrize("name", OPS)
def test_values_and_gradients_match_the_twin(name, dtype, device):
    ours, twin = OPS[name]
    inputs = _inputs(name, dtype, device)
    got, want = ours(*inputs), twin(*inputs)
    grad_out = torch.randn(got.shape, generator=torch.Generator().manual_seed(1),
                           dtype=torch.float64).to(device, dtype)
    tol = {"rtol": 1e-5, "atol": 1e-6} if dtype == torch.float32 else {}
    torch.testing.assert_close(got, want, **tol)
    for a, b in zip(grads(got, _leaves(inputs), grad_out), grads(want, _leaves(inputs), grad_out),
                    strict=True):
        torch.testing.assert_close(a, b, **tol)


@pytest.mark.parametrize("name", OPS)
def test_gradcheck_in_float64(name):
    ours, _ = OPS[name]
    inputs = _inputs(name, torch.float64, "cpu")
    if name == "rope":  # the tables too: their gradient is right, though no model asks for it
        inputs = [inputs[0], *(c.requires_grad_() for c in inputs[1:])]
    at = [i for i, x in enumerate(inputs) if isinstance(x, torch.Tensor) and x.requires_grad]

    def fn(*leaves):
        args = list(inputs)
        for i, x in zip(at, leaves, strict=True):
            args[i] = x
        return ours(*args)
    assert torch.autograd.gradcheck(fn, [inputs[i] for i in at])


@pytest.mark.parametrize("name", ["glu", "rope"])
def test_double_backward_where_backward_uses_only_inputs(name):
    ours, _ = OPS[name]
    inputs = _inputs(name, torch.float64, "cpu")
    assert torch.autograd.gradgradcheck(lambda x: ours(x, *inputs[1:]), (inputs[0],))


@pytest.mark.parametrize("name", OPS)
def test_inputs_are_left_unchanged(name):
    inputs = _inputs(name, torch.float64, "cpu")
    before = [(x.clone(), x._version) for x in inputs if isinstance(x, torch.Tensor)]
    out = OPS[name][0](*inputs)
    grads(out, _leaves(inputs), torch.ones_like(out))
    for x, (copy, version) in zip([x for x in inputs if isinstance(x, torch.Tensor)], before,
                                  strict=True):
        assert torch.equal(x, copy) and x._version == version


@pytest.mark.parametrize("device", DEVICES)
def test_attention_saves_less_than_the_twin_and_half_the_formula_at_context_256(device):
    qkv = [torch.randn(1, 2, 256, 16, device=device, requires_grad=True) for _ in range(3)]
    saved = {}
    for name, fn in (("ours", attention), ("twin", attention_reference),
                     ("formula", attention_formula)):
        with saved_tensor_bytes() as counted:
            fn(*qkv)
        saved[name] = counted.bytes
    assert saved["ours"] == 3 * qkv[0].nbytes + 256 * 2 * 4  # q, k, v and one lse per row
    assert saved["ours"] < saved["twin"] and saved["ours"] <= 0.5 * saved["formula"]


@pytest.mark.parametrize("device", DEVICES)
def test_fused_cross_entropy_peaks_below_half_the_twins(device):
    x = torch.randn(1024, 64, device=device, requires_grad=True)
    weight = torch.randn(4096, 64, device=device, requires_grad=True)
    target = torch.randint(0, 4096, (1024,), device=device)
    peaks = {}
    for fn in (linear_cross_entropy, linear_cross_entropy_reference):
        with step_peak(device) as peak:
            fn(x, weight, target).backward()
        peaks[fn] = peak.bytes
    logits = 1024 * 4096 * 4
    assert peaks[linear_cross_entropy] <= 0.5 * peaks[linear_cross_entropy_reference]
    assert peaks[linear_cross_entropy] < logits <= peaks[linear_cross_entropy_reference]


def test_fused_cross_entropy_without_grad_gives_the_loss():
    x, weight, target = _inputs("cross_entropy", torch.float64, "cpu")
    with torch.no_grad():
        loss = linear_cross_entropy(x, weight, target, chunk=3)
    torch.testing.assert_close(loss, linear_cross_entropy_reference(x, weight, target))
