"""MLP, CurveCNN and Poly3 run the ops their slot keywords name; with the twins in every
slot they compute what the models with ours compute."""

import pytest
import torch

from fitting.slots import SLOTS
from fitting.tasks import TASKS
from models.cnn import CurveCNN
from models.mlp import MLP
from models.ops import legendre_p3_reference, saved_tensor_bytes
from models.poly3 import TUTORIAL_START, Poly3
from tests.ops.helpers import DEVICES

TWINS = {slot: s.twin for slot, s in SLOTS.items()}


def _same_with_twins(build, x):
    """Build with ours and with the twins (same seed); outputs and gradients agree."""
    results = []
    for ops in ({}, {slot: TWINS[slot] for slot in build.slots}):
        torch.manual_seed(0)
        model = build(**ops)
        model.zero_grad()
        out = model(x)
        out.square().sum().backward()
        results.append([out.detach(), *(p.grad for p in model.parameters())])
    for got, want in zip(*results, strict=True):
        torch.testing.assert_close(got, want)


def _builder(cls, slots, **kw):
    def build(**ops):
        return cls(**kw, **ops)
    build.slots = slots
    return build


@pytest.mark.parametrize("device", DEVICES)
def test_mlp_with_ours_equals_mlp_with_the_twins(device):
    build = _builder(MLP, TASKS["mlp"].slots, in_features=2, hidden=(8, 8),
                     out_features=3, device=device, dtype=torch.float64)
    _same_with_twins(build, torch.randn(5, 2, dtype=torch.float64, device=device))
    names = [type(m).__name__ for m in build()]  # Linear → activation → … → Linear
    assert names[0] == names[-1] == "Linear" and names.count("Linear") == 3
    assert all(b == "Activation" for a, b in zip(names[:-1], names[1:], strict=True) if a == "Linear")


@pytest.mark.parametrize("device", DEVICES)
def test_cnn_with_ours_equals_cnn_with_the_twins(device):
    build = _builder(CurveCNN, TASKS["cnn"].slots, image_size=8,
                     channels=(2, 3), hidden=4, device=device, dtype=torch.float64)
    _same_with_twins(build, torch.randn(3, 1, 8, 8, dtype=torch.float64, device=device))


def test_cnn_saves_no_conv_output_for_backward():
    x = torch.randn(4, 1, 16, 16)
    saved = {}
    for name, ops in (("ours", {}), ("twins", TWINS)):
        model = CurveCNN(image_size=16, **{k: v for k, v in ops.items() if k in TASKS["cnn"].slots})
        with saved_tensor_bytes() as saved[name]:
            model(x)
    # The twin keeps each block's conv output (4·8·16² + 4·16·8² floats) on top.
    assert saved["twins"].bytes - saved["ours"].bytes >= (4 * 8 * 256 + 4 * 16 * 64) * 4


def test_cnn_refuses_an_image_size_its_pooling_cannot_halve():
    with pytest.raises(ValueError, match=r"image_size=12 must be divisible by 2\*\*len"):
        CurveCNN(image_size=12, channels=(2, 2, 2))


def test_poly3_starts_at_the_tutorials_point_and_equals_its_twin():
    model = Poly3(dtype=torch.float64)
    assert {k: p.item() for k, p in model.named_parameters()} == TUTORIAL_START
    assert model.formula() == "y = 0 + -1 * P3(0 + 0.3 x)"
    build = _builder(Poly3, TASKS["poly3"].slots, a=0.1, b=-1.0, c=0.2, d=0.3, dtype=torch.float64)
    _same_with_twins(build, torch.linspace(-3.14, 3.14, 50, dtype=torch.float64))
    assert repr(Poly3(legendre_p3=legendre_p3_reference)) == \
        "Poly3(legendre_p3=legendre_p3_reference)"


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_poly3_prints_a_coefficient_below_the_rounding_of_the_largest_as_0(dtype):
    """What every CPU prints the same: a and c of the tutorial's fit are 0 up to rounding
    (-3.3e-10 with AVX2 kernels, 4.7e-10 without); 10x the dtype's eps of the largest is not."""
    eps = torch.finfo(dtype).eps
    model = Poly3(a=4.7e-10 * eps / 1.2e-7, b=-2.2085, c=-0.9 * eps * 2.2085, d=0.25549,
                  dtype=dtype)
    assert model.formula() == "y = 0 + -2.2085 * P3(0 + 0.25549 x)"
    model = Poly3(a=10 * eps * 2.2085, b=-2.2085, c=0.0, d=0.25549, dtype=dtype)
    assert model.formula().startswith(f"y = {model.a.item():.5g} + -2.2085")
