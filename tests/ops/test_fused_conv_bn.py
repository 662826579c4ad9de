"""fused_conv_bn2d: gradients (gradcheck, gradgradcheck), parity with F.conv2d → F.batch_norm,
saved-for-backward bytes, and bad-input errors."""

import re

import pytest
import torch
import torch.nn.functional as F
from torch.autograd import gradcheck, gradgradcheck

from models.ops import fused_conv_bn2d, fused_conv_bn2d_builtin, saved_tensor_bytes

# PyTorch's own note on the built-in twin's padding='same' with an even kernel.
pytestmark = [
    pytest.mark.usefixtures("one_thread"),
    pytest.mark.filterwarnings("ignore:Using padding='same' with even kernel"),
]


# (c_in, c_out, kernel, stride, padding, dilation, groups)
CONVS = {
    "plain": (2, 3, 3, 1, 0, 1, 1),
    "stride2-pad1": (2, 3, 3, 2, 1, 1, 1),
    "dilation2-pad2": (2, 3, 3, 1, 2, 2, 1),
    "groups2": (4, 6, 3, 1, 1, 1, 2),
    "depthwise": (3, 3, 3, 1, 1, 1, 3),
    "depthwise-x2": (2, 4, 3, 1, 1, 1, 2),
    "same-even-kernel": (2, 3, 2, 1, "same", 1, 1),
    "rect-1x3": (2, 3, (1, 3), (2, 1), (0, 1), 1, 1),
}
# (affine, running stats, training)
MODES = {
    "affine-stats-train": (True, True, True),
    "affine-nostats-train": (True, False, True),
    "noaffine-stats-train": (False, True, True),
    "noaffine-nostats-train": (False, False, True),
    "affine-eval": (True, True, False),
    "noaffine-eval": (False, True, False),
}


def make(conv, mode, dtype=torch.float64, device="cpu", n=2, hw=5, seed=0):
    """Inputs of fused_conv_bn2d for a conv config and a BN mode, leaves requiring grad."""
    c_in, c_out, k, stride, padding, dilation, groups = conv
    affine, stats, training = mode
    g = torch.Generator().manual_seed(seed)
    kh, kw = (k, k) if isinstance(k, int) else k

    def rand(*shape, grad=True):
        return torch.randn(*shape, generator=g, dtype=dtype).to(device).requires_grad_(grad)

    tensors = {
        "x": rand(n, c_in, hw, hw),
        "weight": rand(c_out, c_in // groups, kh, kw),
        "bn_weight": rand(c_out) if affine else None,
        "bn_bias": rand(c_out) if affine else None,
        "running_mean": rand(c_out, grad=False) if stats else None,
        "running_var": (rand(c_out, grad=False).abs() + 0.5) if stats else None,
    }
    options = {
        "training": training,
        "momentum": 0.1,
        "eps": 1e-5,
        "stride": stride,
        "padding": padding,
        "dilation": dilation,
        "groups": groups,
    }
    return tensors, options


def differentiable(tensors, options, impl="custom"):
    """(f, leaves): f(*leaves) runs fused_conv_bn2d on copies of the running stats."""
    names = [k for k in ("x", "weight", "bn_weight", "bn_bias") if tensors[k] is not None]

    def f(*leaves):
        t = dict(tensors, **dict(zip(names, leaves, strict=True)))
        for k in ("running_mean", "running_var"):
            t[k] = None if t[k] is None else t[k].clone()
        return fused_conv_bn2d(**t, **options, impl=impl)

    return f, [tensors[k] for k in names]


@pytest.mark.parametrize("mode", MODES.values(), ids=MODES.keys())
@pytest.mark.parametrize("conv", CONVS.values(), ids=CONVS.keys())
def test_gradcheck(conv, mode):
    f, leaves = differentiable(*make(conv, mode))
    assert gradcheck(f, leaves)


# The backward is built from differentiable aten ops, so double backward works.
@pytest.mark.parametrize("mode", MODES.values(), ids=MODES.keys())
@pytest.mark.parametrize("conv", CONVS.values(), ids=CONVS.keys())
def test_gradgradcheck(conv, mode):
    f, leaves = differentiable(*make(conv, mode, hw=4))
    assert gradgradcheck(f, leaves)


def run(tensors, options, impl, grad_out):
    """Output, input/param grads and updated running stats of one call (on fresh copies)."""
    t = {
        k: None if v is None else v.detach().clone().requires_grad_(v.requires_grad)
        for k, v in tensors.items()
    }
    out = fused_conv_bn2d(**t, **options, impl=impl)
    out.backward(grad_out)
    grads = [t[k].grad for k in ("x", "weight", "bn_weight", "bn_bias") if t[k] is not None]
    stats = [t[k] for k in ("running_mean", "running_var") if t[k] is not None]
    return [out.detach(), *grads, *stats]


@pytest.mark.parametrize("dtype", [torch.float64, torch.float32])
@pytest.mark.parametrize("mode", MODES.values(), ids=MODES.keys())
@pytest.mark.parametrize("conv", CONVS.values(), ids=CONVS.keys())
def test_parity_with_builtin(conv, mode, dtype, device):
    tensors, options = make(conv, mode, dtype=dtype, device=device, n=4, hw=7, seed=1)
    with torch.no_grad():
        conv_args = [options[k] for k in ("stride", "padding", "dilation", "groups")]
        out_shape = F.conv2d(tensors["x"], tensors["weight"], None, *conv_args).shape
    grad_out = torch.randn(out_shape, dtype=dtype, device=device)
    custom = run(tensors, options, "custom", grad_out)
    builtin = run(tensors, options, "builtin", grad_out)
    tol = {"rtol": 1e-10, "atol": 1e-10} if dtype == torch.float64 else {"rtol": 1e-4, "atol": 1e-4}
    assert len(custom) == len(builtin)
    for c, b in zip(custom, builtin, strict=True):
        torch.testing.assert_close(c, b, **tol)


def test_builtin_twin_is_conv_then_batch_norm():
    tensors, options = make(CONVS["groups2"], MODES["affine-stats-train"], n=3)
    t = {k: None if v is None else v.detach() for k, v in tensors.items()}
    expected = F.batch_norm(
        F.conv2d(t["x"], t["weight"], None, 1, 1, 1, 2),
        t["running_mean"].clone(),
        t["running_var"].clone(),
        t["bn_weight"],
        t["bn_bias"],
        True,
        0.1,
        1e-5,
    )
    torch.testing.assert_close(fused_conv_bn2d_builtin(**t, **options), expected, rtol=0, atol=0)


def test_running_stats_update_like_batch_norm():
    """Unbiased variance into running_var, biased for normalizing, momentum blend, in place."""
    tensors, options = make(CONVS["plain"], MODES["noaffine-stats-train"], n=3)
    mean0, var0 = tensors["running_mean"].clone(), tensors["running_var"].clone()
    with torch.no_grad():
        out = fused_conv_bn2d(**tensors, **dict(options, momentum=0.25))
        y = F.conv2d(tensors["x"], tensors["weight"])
    m = 0.25
    torch.testing.assert_close(tensors["running_mean"], (1 - m) * mean0 + m * y.mean((0, 2, 3)))
    unbiased = y.var((0, 2, 3), correction=1)
    torch.testing.assert_close(tensors["running_var"], (1 - m) * var0 + m * unbiased)
    biased = y.var((0, 2, 3), correction=0).view(1, -1, 1, 1)
    expected = (y - y.mean((0, 2, 3), keepdim=True)) / torch.sqrt(biased + 1e-5)
    torch.testing.assert_close(out, expected)


def test_saves_input_weight_and_stats_only():
    """Saved-for-backward bytes ≤ 0.4× the built-in pair's (which keeps the conv output)."""
    tensors, options = make(
        (16, 32, 3, 1, 1, 1, 1), MODES["affine-stats-train"], dtype=torch.float32, n=8, hw=16
    )
    with saved_tensor_bytes() as custom:
        fused_conv_bn2d(**tensors, **options)
    with saved_tensor_bytes() as builtin:
        fused_conv_bn2d(**tensors, **options, impl="builtin")
    x, w = tensors["x"], tensors["weight"]
    floor = (x.numel() + w.numel() + 3 * 32) * 4  # input + weight + γ, mean, 1/std
    assert custom.bytes == floor
    assert custom.bytes <= 0.4 * builtin.bytes


def test_backward_only_computes_requested_grads():
    tensors, options = make(CONVS["plain"], MODES["affine-stats-train"])
    tensors["x"].requires_grad_(False)
    tensors["weight"].requires_grad_(False)
    tensors["bn_weight"].requires_grad_(False)
    out = fused_conv_bn2d(**tensors, **options)
    grad = torch.randn_like(out)
    (gb,) = torch.autograd.grad(out, tensors["bn_bias"], grad)
    torch.testing.assert_close(gb, grad.sum((0, 2, 3)))


IMPLS = ["custom", "builtin"]


def call(x_shape=(2, 4, 5, 5), w_shape=(6, 4, 3, 3), training=True, stats=True, **kw):
    c_out = w_shape[0] if len(w_shape) else 1
    args = {
        "x": torch.randn(x_shape),
        "weight": torch.randn(w_shape),
        "bn_weight": torch.ones(c_out),
        "bn_bias": torch.zeros(c_out),
        "running_mean": torch.zeros(c_out) if stats else None,
        "running_var": torch.ones(c_out) if stats else None,
        "training": training,
    }
    args.update(kw)
    return fused_conv_bn2d(**args)


@pytest.mark.parametrize("impl", IMPLS)
@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        (
            {"x_shape": (4, 5, 5)},
            "expected 4-D input (N, C, H, W), got 3-D input of shape (4, 5, 5)",
        ),
        ({"x_shape": (1, 2, 4, 5, 5)}, "expected 4-D input (N, C, H, W), got 5-D input"),
        (
            {"x_shape": (2, 3, 5, 5)},
            "channel mismatch: input has 3 channels but weight of shape "
            "(6, 4, 3, 3) with groups=1 expects 4",
        ),
        (
            {"w_shape": (6, 2, 3, 3), "groups": 3},
            "input channels (4) are not divisible by groups=3",
        ),
        (
            {"w_shape": (5, 2, 3, 3), "groups": 2},
            "weight's out_channels (5) are not divisible by groups=2",
        ),
        ({"groups": 0}, "groups must be a positive int, got 0"),
        ({"w_shape": (6, 4, 3)}, "weight must be 4-D (out_channels, in_channels/groups, kH, kW)"),
        (
            {"x_shape": (1, 4, 3, 3)},
            "expected more than 1 value per channel when training, got a "
            "conv output of shape (1, 6, 1, 1)",
        ),
        (
            {"x_shape": (2, 4, 2, 2)},
            "input of spatial size (2, 2) (padded by (0, 0)) is smaller than the dilated kernel",
        ),
        ({"training": False, "stats": False}, "training=False needs running_mean and running_var"),
        ({"running_var": None}, "pass both running_mean and running_var, or neither"),
        (
            {"bn_weight": torch.ones(5)},
            "bn_weight must have shape (6,) to match weight's out_channels, got (5,)",
        ),
        ({"running_mean": torch.zeros(6, 1)}, "running_mean must have shape (6,)"),
        ({"stride": 0}, "stride must be an int ≥ 1 or a pair of them, got 0"),
        ({"dilation": (1, 2, 3)}, "dilation must be an int ≥ 1 or a pair of them"),
        ({"padding": -1}, "padding must be an int ≥ 0 or a pair of them, got -1"),
        ({"padding": "full"}, "padding must be an int, a pair, 'valid' or 'same', got 'full'"),
        ({"padding": "same", "stride": 2}, "padding='same' is not supported for strided"),
    ],
)
def test_bad_input_value_errors(impl, kwargs, message):
    with pytest.raises(ValueError, match="fused_conv_bn2d: " + re.escape(message)):
        call(impl=impl, **kwargs)


@pytest.mark.parametrize("impl", IMPLS)
def test_bad_input_type_errors(impl):
    x, w = torch.randn(2, 4, 5, 5), torch.randn(6, 4, 3, 3)
    with pytest.raises(TypeError, match="fused_conv_bn2d: x must have a floating-point dtype"):
        fused_conv_bn2d(x.long(), w, training=True, impl=impl)
    with pytest.raises(TypeError, match="fused_conv_bn2d: weight has dtype torch.float64 but x"):
        fused_conv_bn2d(x, w.double(), training=True, impl=impl)
    with pytest.raises(TypeError, match="fused_conv_bn2d: momentum must be a float, got None; "):
        fused_conv_bn2d(x, w, training=True, momentum=None, impl=impl)
    with pytest.raises(TypeError, match="fused_conv_bn2d: x must be a torch.Tensor, got list"):
        fused_conv_bn2d([1.0], w, training=True, impl=impl)


def test_unknown_impl():
    with pytest.raises(ValueError, match=r"fused_conv_bn2d: impl must be one of \('custom', "):
        call(impl="fast")
