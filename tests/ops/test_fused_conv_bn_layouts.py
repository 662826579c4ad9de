"""fused_conv_bn2d's results do not depend on the memory layouts of its tensors.

Output, gradients and running-stat updates (in the caller's tensors) with strided per-channel
tensors, channels_last / strided / 1x1 x, weight, output and grad_output equal those of the
same call on contiguous copies, in training and eval. aten's CPU batch-norm and conv backwards
get some of these layouts wrong; the custom op hands them layouts they read right (the builtin
twin's upstream xfails are in test_conv_bn_upstream_bugs.py).
"""

from __future__ import annotations

import pytest
import torch
from hypothesis import event, given
from hypothesis import strategies as st

from models.ops import fused_conv_bn2d
from tests.helpers.property_checks import PROPERTY_MARKS, STATS, props
from tests.helpers.strategies import DEVICES, fill, layouts

pytestmark = PROPERTY_MARKS

TOL = {"rtol": 1e-9, "atol": 1e-9}  # float64: layouts change the rounding, never more
GRAD_ARGS = ("x", "weight", "bn_weight", "bn_bias")


def results(tensors: dict, grad_out: torch.Tensor, options: dict, impl: str, contiguous: bool):
    """[output, grads of the tensors that require grad, running stats after the call].

    Each tensor is passed as a leaf with its own strides, or (`contiguous`) as a contiguous copy;
    in training the running stats are fresh copies keeping their strides, updated in place.
    """
    def leaf(t):
        if t is None:
            return None
        copy = t.detach().contiguous() if contiguous else t.detach()
        return copy.requires_grad_(t.requires_grad)

    args = {k: leaf(tensors[k]) for k in GRAD_ARGS}
    for k in STATS:
        s = tensors[k]
        if s is not None and options["training"]:  # eval leaves them alone (expanded ones too)
            s = torch.empty_strided(s.shape, s.stride(), dtype=s.dtype, device=s.device).copy_(s)
        args[k] = s.contiguous() if contiguous and s is not None else s
    out = fused_conv_bn2d(**args, **options, impl=impl)
    need = [args[k] for k in GRAD_ARGS if args[k] is not None and args[k].requires_grad]
    g = grad_out.contiguous() if contiguous else grad_out
    grads = torch.autograd.grad(out, need, g) if need else ()
    return [out.detach(), *grads, *(args[k] for k in STATS if args[k] is not None)]


def check_layout_independent(tensors: dict, grad_out: torch.Tensor, options: dict) -> None:
    """The custom op on these layouts matches the builtin twin on contiguous copies."""
    got = results(tensors, grad_out, options, "custom", contiguous=False)
    want = results(tensors, grad_out, options, "builtin", contiguous=True)
    assert len(got) == len(want)
    for i, (a, b) in enumerate(zip(got, want, strict=True)):
        torch.testing.assert_close(a, b, **TOL, msg=lambda m, i=i: f"result {i}: {m}")


# -- explicit layouts ------------------------------------------------------------------------


def laid_out(t: torch.Tensor, kind: str) -> torch.Tensor:
    """`t`'s values in a layout: contiguous, nhwc (channels_last), nhwc-size1 (channels_last
    with stride 1 on its size-1 dims), step2 (1-D, every other element) or sliced (4-D,
    every other column)."""
    t = t.detach()
    if kind == "nhwc":
        return t.contiguous(memory_format=torch.channels_last)
    if kind == "nhwc-size1":
        cl = t.contiguous(memory_format=torch.channels_last)
        strides = [1 if n == 1 else s for n, s in zip(t.shape, cl.stride(), strict=True)]
        return cl.as_strided(t.shape, strides)
    if kind == "step2":
        buf = t.new_zeros(2 * t.shape[0] + 1)
        buf[1::2] = t
        return buf[1::2]
    if kind == "sliced":
        buf = t.new_zeros(*t.shape[:-1], 2 * t.shape[-1])
        buf[..., ::2] = t
        return buf[..., ::2]
    assert kind == "contiguous", kind
    return t.clone()


PER_CHANNEL_STEP2 = {k: "step2" for k in ("bn_weight", "bn_bias", *STATS)}
# name: (x shape, weight shape, conv options, layouts of the tensors that are not contiguous)
CASES = {
    "strided-bn_weight-1x1-output": ((4, 3, 1, 1), (5, 3, 1, 1), {}, {"bn_weight": "step2"}),
    "strided-bn_bias-1x1-output": ((4, 3, 1, 1), (5, 3, 1, 1), {}, {"bn_bias": "step2"}),
    "strided-running-stats-channels_last-output": (
        (2, 3, 2, 2), (5, 3, 1, 1), {},
        {"x": "nhwc", "running_mean": "step2", "running_var": "step2", "grad_out": "nhwc"},
    ),
    "strided-per-channel-nchw-output": ((2, 3, 4, 4), (5, 3, 3, 3), {"padding": 1},
                                        PER_CHANNEL_STEP2),
    "strided-per-channel-channels_last-output": (
        (2, 3, 4, 4), (5, 3, 3, 3), {"padding": 1},
        {"x": "nhwc", "grad_out": "nhwc", **PER_CHANNEL_STEP2},
    ),
    "grad_out-channels_last-output-nchw": (
        (1, 1, 3, 3), (5, 1, 1, 2), {"dilation": 2}, {"grad_out": "nhwc"}
    ),
    "grad_out-nchw-output-channels_last": ((2, 3, 3, 4), (5, 3, 2, 1), {}, {"x": "nhwc"}),
    "grad_out-sliced": ((2, 3, 4, 4), (5, 3, 3, 3), {}, {"grad_out": "sliced"}),
    "strided-weight-channels_last-x": (
        (1, 2, 3, 3), (1, 2, 2, 1), {}, {"x": "nhwc", "weight": "nhwc-size1"}
    ),
    "channels_last-weight": ((2, 3, 4, 4), (5, 3, 3, 3), {}, {"weight": "nhwc"}),
    "sliced-x-and-weight": ((2, 4, 4, 4), (6, 2, 2, 2), {"groups": 2},
                            {"x": "sliced", "weight": "sliced"}),
    "everything-strided-1x1-output": (
        (4, 3, 1, 1), (5, 3, 1, 1), {},
        {"x": "nhwc", "weight": "nhwc-size1", "grad_out": "nhwc", **PER_CHANNEL_STEP2},
    ),
}  # fmt: skip


@pytest.mark.parametrize("training", [True, False], ids=["train", "eval"])
@pytest.mark.parametrize("case", CASES)
def test_fused_conv_bn2d_results_do_not_depend_on_layouts(case, training):
    x_shape, w_shape, conv, kinds = CASES[case]
    c = w_shape[0]
    g = torch.Generator().manual_seed(0)

    def randn(*shape):
        return torch.randn(*shape, generator=g, dtype=torch.float64)

    values = {
        "x": randn(*x_shape),
        "weight": randn(*w_shape),
        "bn_weight": randn(c),
        "bn_bias": randn(c),
        "running_mean": randn(c),
        "running_var": randn(c).abs() + 0.5,
    }
    out_shape = fused_conv_bn2d(values["x"], values["weight"], **conv, training=True).shape
    grad_out = laid_out(randn(*out_shape), kinds.get("grad_out", "contiguous"))
    tensors = {k: laid_out(v, kinds.get(k, "contiguous")) for k, v in values.items()}
    for k in GRAD_ARGS:
        tensors[k].requires_grad_()
    # Repeated: aten's bugs here read memory they shouldn't, so a single pass may get lucky.
    for _ in range(5):
        check_layout_independent(tensors, grad_out, {"training": training, **conv})


def test_fused_conv_bn2d_contiguous_inputs_are_not_copied():
    """On contiguous inputs the layout handling is free: no aten copy in forward or backward."""
    g = torch.Generator().manual_seed(0)

    def leaf(*shape):
        return torch.randn(*shape, generator=g).requires_grad_()

    x, w, gamma, beta = leaf(2, 3, 5, 5), leaf(4, 3, 3, 3), leaf(4), leaf(4)
    stats = torch.zeros(4), torch.ones(4)
    with torch.profiler.profile(record_shapes=True) as prof:
        out = fused_conv_bn2d(x, w, gamma, beta, *stats, training=True, padding=1)
        torch.autograd.grad(out, (x, w, gamma, beta), torch.randn(out.shape, generator=g))
    assert "aten::convolution_backward" in {e.name for e in prof.events()}  # saw the backward
    copies = [
        (e.name, e.input_shapes)
        for e in prof.events()
        if e.name in {"aten::copy_", "aten::clone", "aten::contiguous"}
        and any(e.input_shapes)  # not the 0-dim tensors Python scalars in arithmetic become
    ]
    assert not copies


@pytest.mark.parametrize("stat", STATS)
def test_fused_conv_bn2d_training_refuses_expanded_running_stats(stat):
    """Training updates the running stats in place: an expanded view (one shared element,
    which F.batch_norm silently overwrites per channel) gets a clear error from both impls."""
    x, w = torch.randn(2, 3, 4, 4), torch.randn(5, 3, 1, 1)
    stats = {"running_mean": torch.zeros(5), "running_var": torch.ones(5)}
    stats[stat] = stats[stat][:1].expand(5)
    for impl in ("custom", "builtin"):
        with pytest.raises(ValueError, match=f"{stat} is an expanded view.*{stat}.clone"):
            fused_conv_bn2d(x, w, **stats, training=True, impl=impl)
    assert fused_conv_bn2d(x, w, **stats, training=False).shape == (2, 5, 4, 4)  # read only


# -- random layouts --------------------------------------------------------------------------


@st.composite
def laid_out_tensors(draw, shape, kinds, device, transform=None):
    """A float64 tensor of `shape` in a layout drawn from `kinds`: contiguous, channels_last,
    step (1-D, a slice with a start and a step) or random (any view from layouts())."""
    kind = draw(st.sampled_from(kinds))
    if kind == "random":
        base_shape, view = draw(layouts(shape))
    elif kind == "channels_last":
        base_shape, view = (shape[0], *shape[2:], shape[1]), lambda t: t.permute(0, 3, 1, 2)
    elif kind == "step":
        start, step = draw(st.integers(0, 2)), draw(st.integers(2, 3))
        base_shape, view = (start + (shape[0] - 1) * step + 1,), lambda t: t[start::step]
    else:
        base_shape, view = shape, lambda t: t
    base = fill(draw(st.integers(0, 2**31 - 1)), base_shape, torch.float64, device)
    return view(base if transform is None else transform(base))


@st.composite
def layout_calls(draw):
    """(tensors, grad_out, options) of a valid call, every tensor in a drawn layout."""
    device = draw(st.sampled_from(DEVICES), label="device")
    # Weighted towards what aten gets wrong: training (its batch-norm backward runs there),
    # several channels, 1x1 outputs and strided per-channel tensors.
    training = draw(st.sampled_from([True, True, False]), label="training")
    groups = draw(st.integers(1, 2), label="groups")
    c_in, c_out = groups * draw(st.integers(1, 2)), draw(st.integers(2, 6)) // groups * groups
    kernel = draw(st.tuples(st.integers(1, 2), st.integers(1, 2)), label="kernel")
    stride, dilation = draw(st.integers(1, 2), label="stride"), draw(st.integers(1, 2))
    sides = st.integers(1, 3)
    out_hw = draw(st.one_of(st.just((1, 1)), st.tuples(sides, sides)), label="output H, W")
    padding = draw(st.integers(0, 1), label="padding")
    hw = [(o - 1) * stride + dilation * (k - 1) + 1 for o, k in zip(out_hw, kernel, strict=True)]
    if min(hw) <= 2 * padding:
        padding = 0
    hw = [s - 2 * padding for s in hw]
    n = draw(st.integers(1, 3), label="N")
    if training and n * out_hw[0] * out_hw[1] == 1:
        n = 2  # batch statistics need more than one value per channel
    four_d = ["contiguous", "channels_last", "random"]
    affine = st.sampled_from([True, True, True, False])
    per_channel = ["contiguous", "step", "step", "random"]
    # Expanded running stats cannot hold a training update: only strided slices there.
    stats_kinds = ["contiguous", "step"] if training else per_channel

    def tensor(shape, kinds, label, transform=None):
        return draw(laid_out_tensors(shape, kinds, device, transform), label=label)

    tensors = {
        "x": tensor((n, c_in, *hw), four_d, "x"),
        "weight": tensor((c_out, c_in // groups, *kernel), four_d, "weight"),
        "bn_weight": tensor((c_out,), per_channel, "bn_weight") if draw(affine) else None,
        "bn_bias": tensor((c_out,), per_channel, "bn_bias") if draw(affine) else None,
        "running_mean": None,
        "running_var": None,
    }
    if not training or draw(st.booleans(), label="running stats"):
        tensors["running_mean"] = tensor((c_out,), stats_kinds, "running_mean")
        tensors["running_var"] = tensor(
            (c_out,), stats_kinds, "running_var", lambda t: t.abs() + 0.25
        )
    for k in GRAD_ARGS:
        if tensors[k] is not None:
            needs = draw(st.sampled_from([True, True, False]), label=f"{k} requires grad")
            tensors[k].requires_grad_(needs)
    grad_out = tensor((n, c_out, *out_hw), four_d, "grad_out")
    options = {
        "training": training,
        "momentum": draw(st.sampled_from([0.1, 0.5]), label="momentum"),
        "eps": draw(st.sampled_from([1e-5, 0.1]), label="eps"),
        "stride": stride,
        "padding": padding,
        "dilation": dilation,
        "groups": groups,
    }
    return tensors, grad_out, options


@props(150)
@given(call=layout_calls())
def test_fused_conv_bn2d_random_layouts_match_contiguous(call):
    """Random layouts of every tensor (incl. 1x1 outputs and grad_outputs in the other memory
    format): the custom op's results equal the contiguous-layout ones."""
    tensors, grad_out, options = call
    event("train" if options["training"] else "eval")
    event(f"output H x W: {tuple(grad_out.shape[2:])}")
    check_layout_independent(tensors, grad_out, options)
