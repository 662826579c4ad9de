"""Property tests (issue 7, "bad tensors"): hypothesis throws random shapes, dtypes, devices,
strided views and requires_grad subsets at every op and layer. Each call either matches its
built-in twin (forward, gradients, running stats) within a dtype-derived error bound, or raises
the op's clear ValueError/TypeError ("<op>: ...") - and impl="builtin" raises the same class.

Bugs found along the way are pinned by the strict xfail tests at the end of this file. The
property strategies steer clear of exactly those inputs (each spot is marked KNOWN BUG) so the
properties stay green and keep guarding everything else; when a bug is fixed its xfail turns
into an XPASS failure, and the matching KNOWN BUG restriction should go too. Some are upstream
torch kernel bugs the op inherits; their xfails apply only where the plain torch twin shows
them on the machine running the tests (see _upstream_bug).

Deterministic (derandomize=True, no example database) and ~10 s on 2 busy cores. For a deeper
search, run a test with more examples and derandomize=False; every failure found that way so
far is listed at the end of this file.
"""

from __future__ import annotations

import decimal
import fractions

import pytest
import torch
import torch.nn.functional as F
from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st
from strategies import (
    BAD_IMPLS,
    DEVICES,
    FLOATS,
    NON_FLOATS,
    NON_TENSORS,
    Arg,
    Outcome,
    assert_clear_error,
    assert_close_bound,
    assert_same_error,
    grad_output,
    shapes,
    tensors,
)
from torch import nn

from models.layers import FusedConvBN2d, Linear, ReLU
from models.ops import (
    ScalarTensor,
    cube,
    fused_conv_bn2d,
    fused_conv_bn2d_builtin,
    legendre_p3,
    linear,
    mul_constant,
    relu,
)

pytestmark = [
    # PyTorch's own notes: padding='same' with an even kernel, and init of an empty weight.
    pytest.mark.filterwarnings("ignore:Using padding='same' with even kernel"),
    pytest.mark.filterwarnings("ignore:Initializing zero-element tensors is a no-op"),
    pytest.mark.filterwarnings("ignore:ComplexHalf support is experimental"),
]
OP = "fused_conv_bn2d"


def props(n: int):
    """Deterministic, database-free hypothesis settings running `n` examples."""
    return settings(
        max_examples=n,
        deadline=None,
        derandomize=True,
        database=None,
        # Drawing tensors through st.data() is slower than hypothesis expects of a strategy;
        # that is the cost of the inputs, not a sign of excessive filtering.
        suppress_health_check=[HealthCheck.too_slow],
    )


@pytest.fixture(autouse=True, scope="module")
def one_thread():
    """Tiny tensors: a second intra-op thread only adds sync cost on a busy 2-core box."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


def snapshot(args):
    return [None if a is None else a.leaf.detach().clone() for a in args]


def assert_unchanged(before, args):
    """Ops may work in place on their own buffers, never on their inputs."""
    for b, a in zip(before, args, strict=True):
        if b is not None:
            torch.testing.assert_close(a.leaf.detach(), b, rtol=0, atol=0, equal_nan=True)


def grads(out: torch.Tensor, leaves, g: torch.Tensor) -> list[torch.Tensor]:
    """d(out)/d(leaf)·g for each leaf that requires grad (zeros for unused ones)."""
    need = [t for t in leaves if t is not None and t.requires_grad]
    if not need or not out.requires_grad:
        return []
    return list(torch.autograd.grad(out, need, g, materialize_grads=True))


def abs_param(p: torch.Tensor | None) -> torch.Tensor | None:
    """|p| in float64 on the CPU, a leaf requiring grad like p: for error bounds."""
    if p is None:
        return None
    return p.detach().to("cpu", torch.float64).abs().requires_grad_(p.requires_grad)


def leaves(*args: Arg | None) -> list[torch.Tensor | None]:
    return [None if a is None else a.leaf for a in args]


def t(a: Arg | None) -> torch.Tensor | None:
    return None if a is None else a.tensor


def abs64(a: Arg | None):
    """(leaf, view) over |a| in float64, or (None, None)."""
    return (None, None) if a is None else a.abs64()


def compare(outs_c, outs_b, bounds, dtype, what, n=0):
    """Pairwise assert_close_bound; n bounds the length of the sums behind the results."""
    assert len(outs_c) == len(outs_b) == len(bounds), what
    for i, (c, b, bound) in enumerate(zip(outs_c, outs_b, bounds, strict=True)):
        assert_close_bound(c, b, bound, dtype, n=n, what=f"{what}[{i}]")


def per_tensor(ts):
    """Bounds for results of the same aten kernels: each tensor's largest magnitude."""
    return [x.detach().abs().nan_to_num(0.0).max() if x.numel() else 0.0 for x in ts]


def int_or_pair(lo, hi):
    """An int in [lo, hi] or a pair (tuple or list) of them, as conv arguments are given."""
    n = st.integers(lo, hi)
    return st.one_of(n, st.tuples(n, n), st.lists(n, min_size=2, max_size=2))


def mostly(good, bad, k: int = 5):
    """`good` k times out of k + 1, else `bad`."""
    return st.integers(0, k).flatmap(lambda i: bad if i == 0 else good)


def other_device(device: str) -> str:
    return next(d for d in DEVICES if d != device)


# =============================================================================================
# Unary ops: legendre_p3, relu, cube, mul_constant
# =============================================================================================

# Real numbers mul_constant takes: Python ints and floats (nan, ±inf, -0.0, subnormals, huge).
CONSTANTS = st.one_of(
    st.floats(allow_nan=True, allow_infinity=True),
    st.integers(-(2**20), 2**20),
    st.fractions(max_denominator=1000),
    st.sampled_from([0.0, -0.0, 1.0, -1.0, 0.5, 5e-324, 1e300]),
)
BAD_CONSTANTS = st.sampled_from(
    [True, False, 1j, "2", None, torch.tensor(2.0), [2.0], decimal.Decimal(2)]
)

# name -> (op, the op on |x| (the size of its terms, for the error bound), non-finite inputs
# and incoming gradients?)
# Exact ops (relu, mul_constant: one rounding, same as the twin) get a zero bound. legendre_p3
# gets finite inputs only: at ±inf the built-in ½(5x³ − 3x) is inf − inf = nan while the custom
# x·(2.5x² − 1.5) gives ±inf - a deliberate difference (the custom is right), not a bug.
UNARY = {
    "legendre_p3": (legendre_p3, lambda x: 0.5 * (5 * x**3 + 3 * x), False),
    "cube": (cube, lambda x: x**3, True),
    "relu": (relu, None, True),
    "mul_constant": (mul_constant, None, True),
}


@pytest.mark.parametrize("name", UNARY)
@props(80)
@given(data=st.data())
def test_unary_op_matches_builtin_or_raises_clearly(name, data):
    op, abs_problem, special = UNARY[name]
    draw = data.draw
    extra = (draw(CONSTANTS, label="c"),) if name == "mul_constant" else ()
    cases = ["float"] * 8 + ["non_float", "non_tensor", "bad_impl"]
    case = draw(st.sampled_from(cases + ["bad_constant"] * bool(extra)), label="case")
    device = draw(st.sampled_from(DEVICES), label="device")
    dtype = draw(st.sampled_from(NON_FLOATS if case == "non_float" else FLOATS), label="dtype")
    shape = draw(shapes(), label="shape")
    # |x| up to ~10: x³ (and the twin's 5x³) stays finite even in float16.
    scale = draw(st.sampled_from([1e-3, 1.0, 3.0]), label="scale")
    x = draw(tensors(shape, dtype, device, scale=scale, special=special), label="x")
    arg = x.tensor
    if case == "non_tensor":
        arg = draw(NON_TENSORS, label="x")
    if case == "bad_constant":
        extra = (draw(BAD_CONSTANTS, label="c"),)
    if case == "bad_impl":
        bad = draw(BAD_IMPLS, label="impl")
        assert_clear_error(Outcome(op, arg, *extra, impl=bad).error, name, kind=ValueError)
        return

    before = snapshot([x])
    custom = Outcome(op, arg, *extra, impl="custom")
    builtin = Outcome(op, arg, *extra, impl="builtin")
    if case != "float":
        assert_same_error(custom, builtin, name, kind=TypeError)
        return
    assert custom.ok, f"{name} rejected a valid input: {custom.error!r}"
    assert builtin.ok, f"{name}(impl='builtin') rejected a valid input: {builtin.error!r}"
    out_c, out_b = custom.value, builtin.value
    assert out_c.requires_grad == out_b.requires_grad == x.leaf.requires_grad
    g = grad_output(draw, out_b, special=special)  # non-finite gradients too, where allowed
    grads_c, grads_b = grads(out_c, [x.leaf], g), grads(out_b, [x.leaf], g)

    if abs_problem is None:
        bounds = [0.0] * (1 + len(grads_b))
    else:  # the op on |x| bounds the forward error; its gradient for |g|, the backward's
        lx, vx = x.abs64()
        out_abs = abs_problem(vx)
        bounds = [out_abs.detach(), *grads(out_abs, [lx], g.to("cpu", torch.float64).abs())]
    compare([out_c, *grads_c], [out_b, *grads_b], bounds, dtype, name)
    assert_unchanged(before, [x])


# =============================================================================================
# linear
# =============================================================================================

LINEAR_BAD = {  # mutation of a valid call -> the error class both impls must raise
    "last_dim": ValueError,
    "x_0d": ValueError,
    "weight_dims": ValueError,
    "bias_shape": ValueError,
    "dtype_mix": TypeError,
    "non_float": TypeError,
    "non_tensor": TypeError,
    "bad_impl": ValueError,
    **({"device_mix": ValueError} if len(DEVICES) > 1 else {}),
}


@props(120)
@given(data=st.data())
def test_linear_matches_builtin_or_raises_clearly(data):
    draw = data.draw
    case = draw(st.sampled_from(["valid"] * 5 + list(LINEAR_BAD)), label="case")
    device = draw(st.sampled_from(DEVICES), label="device")
    dtype = draw(st.sampled_from(FLOATS), label="dtype")
    in_f, out_f = draw(st.integers(0, 5), label="in"), draw(st.integers(0, 5), label="out")
    batch = draw(shapes(0, 3), label="batch")
    has_bias = draw(st.booleans(), label="bias")
    shape = {"x": (*batch, in_f), "weight": (out_f, in_f), "bias": (out_f,)}
    dtypes = dict.fromkeys(shape, dtype)
    devs = dict.fromkeys(shape, device)
    if case == "last_dim":
        shape["x"] = (*batch, draw(st.integers(0, 6).filter(lambda n: n != in_f)))
    elif case == "x_0d":
        shape["x"] = ()
    elif case == "weight_dims":
        shape["weight"] = draw(shapes(0, 4, 1, 3).filter(lambda s: len(s) != 2))
    elif case == "bias_shape":  # includes shapes F.linear would broadcast: nn.Linear's are exact
        has_bias = True
        wrong = [(out_f + 1,), (), (1, out_f), (out_f, 1), (0,)] + [(1,)] * (out_f != 1)
        shape["bias"] = draw(st.sampled_from(wrong))
    elif case in ("dtype_mix", "non_float", "device_mix", "non_tensor"):
        which = draw(st.sampled_from(["x", "weight", "bias"]), label="which")
        if case in ("dtype_mix", "device_mix") and which == "x":
            which = "weight"
        has_bias = has_bias or which == "bias"
        if case == "dtype_mix":
            dtypes[which] = draw(st.sampled_from([d for d in FLOATS if d != dtype]))
        elif case == "non_float":
            dtypes[which] = draw(st.sampled_from(NON_FLOATS))
        elif case == "device_mix":
            devs[which] = other_device(device)
    args = {
        k: draw(tensors(shape[k], dtypes[k], devs[k]), label=k)
        for k in ("x", "weight", "bias")
        if k != "bias" or has_bias
    }
    x, w, b = args["x"], args["weight"], args.get("bias")
    call = [x.tensor, w.tensor, t(b)]
    if case == "non_tensor":
        bad = NON_TENSORS if which != "bias" else NON_TENSORS.filter(lambda v: v is not None)
        call[["x", "weight", "bias"].index(which)] = draw(bad, label="non_tensor")
    if case == "bad_impl":
        error = Outcome(linear, *call, impl=draw(BAD_IMPLS)).error
        assert_clear_error(error, "linear", kind=ValueError)
        return

    before = snapshot([x, w, b])
    custom = Outcome(linear, *call, impl="custom")
    builtin = Outcome(linear, *call, impl="builtin")
    if case != "valid":
        assert_same_error(custom, builtin, "linear", kind=LINEAR_BAD[case])
        return
    assert Outcome(F.linear, *call).ok  # the strategy's valid calls are valid for torch too
    assert custom.ok, f"linear rejected a valid call: {custom.error!r}"
    assert builtin.ok, f"linear(impl='builtin') rejected a valid call: {builtin.error!r}"
    g = grad_output(draw, builtin.value)
    leafs = leaves(x, w, b)
    grads_c, grads_b = grads(custom.value, leafs, g), grads(builtin.value, leafs, g)

    # Error bound: |x|·|W|ᵀ + |b| (dot-product terms) and its gradients for |g|.
    (lx, vx), (lw, vw), (lb, vb) = abs64(x), abs64(w), abs64(b)
    out_abs = F.linear(vx, vw, vb)
    bounds = [out_abs.detach(), *grads(out_abs, [lx, lw, lb], g.to("cpu", torch.float64).abs())]
    n = max(x.tensor.numel(), w.tensor.numel())  # the longest sum (x·Wᵀ, grad_W, grad_b)
    compare([custom.value, *grads_c], [builtin.value, *grads_b], bounds, dtype, "linear", n)
    assert_unchanged(before, [x, w, b])


# =============================================================================================
# fused_conv_bn2d
# =============================================================================================


@st.composite
def conv_call(draw, device, dtype, structure=True):
    """Tensors (Args) and options of a fused_conv_bn2d call, random in every argument.

    With `structure`, the sizes are drawn freely (valid or not for conv/BN: groups that don't
    divide, kernels larger than the input, one value per channel in training, padding='same'
    with a stride, ...); without, the call is a valid one.
    """
    training = draw(st.booleans(), label="training")
    groups = draw(st.integers(1, 3), label="groups")
    # KNOWN BUG (xfail below): training on an empty input (N = 0 or C_in = 0) crashes the
    # custom op, so those sizes are drawn only in eval mode.
    n = draw(st.integers(0 if not training else 1, 3), label="N")
    cin_g = draw(st.integers(0 if not training else 1, 2), label="C_in/groups")
    cout_g = draw(st.integers(1, 2), label="C_out/groups")  # KNOWN BUG: C_out = 0 (xfail)
    kh = draw(st.integers(1, 3), label="kH")  # KNOWN BUG: a 0-size kernel
    kw = draw(st.integers(1, 3), label="kW")
    if structure:
        side = st.one_of(st.integers(3, 7), st.integers(0, 7))  # mostly big enough
        h, w = draw(side, label="H"), draw(side, label="W")
        stride = draw(st.one_of(st.just(1), int_or_pair(1, 2)), label="stride")
        dilation = draw(st.one_of(st.just(1), int_or_pair(1, 2)), label="dilation")
        padding = draw(
            st.one_of(int_or_pair(0, 2), st.sampled_from(["valid", "same"])), label="padding"
        )
        if (h == 0 or w == 0) and not isinstance(padding, str):
            padding = 0  # KNOWN BUG: a 0-size input padded to a valid size raises aten's error
        mismatch = draw(st.sampled_from(["none"] * 10 + ["w_in", "c_out"]), label="mismatch")
    else:
        stride, dilation, mismatch = 1, 1, "none"
        padding = draw(st.sampled_from([0, 1, "same"]), label="padding")
        h, w = draw(st.integers(kh + 1, 5), label="H"), draw(st.integers(kw, 5), label="W")
    affine = draw(st.booleans(), label="affine")
    stats = (not training) or draw(st.booleans(), label="running stats")
    if structure and training is False:
        stats = draw(st.sampled_from([True] * 7 + [False]), label="eval stats")
    c_in, c_out, w_in = groups * cin_g, groups * cout_g, cin_g
    if mismatch == "w_in":
        w_in += draw(st.integers(1, 2))
    elif mismatch == "c_out" and groups > 1:
        c_out += 1

    def arg(shape, **kw):
        return draw(tensors(shape, dtype, device, **kw))

    call = {
        "x": arg((n, c_in, h, w)),
        "weight": arg((c_out, w_in, kh, kw), scale=0.5),
        "bn_weight": arg((c_out,)) if affine else None,
        "bn_bias": arg((c_out,)) if affine else None,
        "running_mean": arg((c_out,), requires_grad=False) if stats else None,
        "running_var": None,
    }
    if stats:  # a variance: positive, and not tiny (the eval fold computes var + eps in dtype)
        rv = arg((c_out,), requires_grad=False)
        call["running_var"] = Arg(rv.leaf.abs() + 0.25, rv.view)
    options = {
        "training": training,
        "momentum": draw(st.sampled_from([0.1, 0.0, 1.0, 0.5, 1]), label="momentum"),
        "eps": draw(st.sampled_from([1e-5, 1e-3, 0.1, 1]), label="eps"),
        "stride": stride,
        "padding": padding,
        "dilation": dilation,
        "groups": groups,
    }
    return call, options


TENSOR_ARGS = ("x", "weight", "bn_weight", "bn_bias", "running_mean", "running_var")
STATS = ("running_mean", "running_var")
PER_CHANNEL = ("bn_weight", "bn_bias", *STATS)
GRAD_ARGS = ("x", "weight", "bn_weight", "bn_bias")


def conv_run(fn, call, options, **kw):
    """Outcome of fn on the call, with fresh copies of the running stats (updated in place)."""
    tensors_ = {
        k: (None if a is None else (a.fresh() if k in STATS else a.tensor)) for k, a in call.items()
    }
    out = Outcome(fn, **tensors_, **options, **kw)
    return out, [tensors_[k] for k in STATS if tensors_[k] is not None]


def conv_bn_eval_abs(x, w, gamma, beta, mean, var, eps, stride, padding, dilation, groups):
    """Eval-mode conv → BN on |inputs|: bounds the error of folding BN into the conv."""
    s = (var + eps).rsqrt()
    if gamma is not None:
        s = s * gamma
    shift = mean * s if beta is None else mean * s + beta
    y = F.conv2d(x, w, None, stride, padding, dilation, groups)
    return y * s.view(-1, 1, 1) + shift.view(-1, 1, 1)


def bn_grad_output(draw, out: torch.Tensor) -> torch.Tensor:
    """A random incoming gradient for a batch-norm output.

    KNOWN BUG (upstream, xfail below): aten's CPU batch-norm backward gets its gradients wrong
    for some grad_outputs in the other memory format than the output (NCHW-only output with
    a channels_last-only gradient, or the reverse); such a gradient is made contiguous in the
    output's format. All other strided layouts are kept.
    """
    g = grad_output(draw, out)
    formats = (torch.contiguous_format, torch.channels_last)
    if g.dim() == 4 and g.numel():
        flags = [[t.is_contiguous(memory_format=f) for f in formats] for t in (out, g)]
        if flags[0] in ([True, False], [False, True]) and flags[1] == flags[0][::-1]:
            g = g.contiguous(memory_format=formats[flags[0].index(True)])
    return g


def bf16_depthwise_multiplier_bug(x: torch.Tensor, weight: torch.Tensor, groups, out) -> bool:
    """KNOWN BUG (upstream, xfail below): aten's CPU bfloat16 conv gives wrong outputs for a
    grouped conv with one input channel and several output channels per group when its output
    is channels_last (seen with stride (1, 2)): both impls share the wrong result, so such
    calls are skipped."""
    return (
        x.dtype == torch.bfloat16
        and isinstance(groups, int)
        and groups > 1
        and weight.dim() == 4
        and weight.shape[1] == 1
        and weight.shape[0] > groups
        and out.dim() == 4
        and out.is_contiguous(memory_format=torch.channels_last)
    )


def check_conv_parity(draw, call, options, dtype, what, custom, builtin, stats_c, stats_b):
    """Custom and builtin agree: output, updated running stats and gradients."""
    out_c, out_b = custom.value, builtin.value
    g = bn_grad_output(draw, out_b)
    leafs = [None if call[k] is None else call[k].leaf for k in GRAD_ARGS]
    backward_c, backward_b = Outcome(grads, out_c, leafs, g), Outcome(grads, out_b, leafs, g)
    if not backward_b.ok:
        # KNOWN BUG (upstream, xfail below): aten's CPU conv backward refuses some strided
        # weights ("slow_conv2d: grad_weight must be contiguous") - the twin itself fails.
        # The custom may fail the same way, never differently.
        event(f"twin backward raised {type(backward_b.error).__name__}")
        assert backward_c.ok or type(backward_c.error) is type(backward_b.error), backward_c
        grads_c = grads_b = []
    elif not backward_c.ok and "grad_weight must be contiguous" in str(backward_c.error):
        # KNOWN BUG (xfail below): the same refusal, hit by the custom eval path alone (its
        # folded weight keeps the strided weight's layout).
        event("skipped: KNOWN BUG custom eval backward, strided weight")
        return
    else:
        assert backward_c.ok, f"{what} backward failed where its twin's ran: {backward_c.error!r}"
        grads_c, grads_b = backward_c.value, backward_b.value
    if options["training"] or out_b.numel() == 0:
        # Batch statistics: the custom runs the twin's own aten kernels (convolution,
        # native_batch_norm and their backwards), so each result is within a few ulps of
        # the twin's at its own scale.
        bounds = per_tensor([out_b, *stats_b, *grads_b])
    else:
        # Running statistics: the custom folds BN into the conv weight and bias.
        # (Contiguous views: the bound doesn't depend on layouts, and aten's conv backward
        # refuses some strided weights - see the KNOWN BUG above.)
        absed = {k: abs64(call[k]) for k in TENSOR_ARGS}
        absed = {k: (a, None if v is None else v.contiguous()) for k, (a, v) in absed.items()}
        conv = [options[k] for k in ("stride", "padding", "dilation", "groups")]
        out_abs = conv_bn_eval_abs(*(absed[k][1] for k in TENSOR_ARGS), options["eps"], *conv)
        g_abs = g.to("cpu", torch.float64).abs()
        abs_grads = grads(out_abs, [absed[k][0] for k in GRAD_ARGS], g_abs) if grads_b else []
        bounds = [out_abs.detach(), *per_tensor(stats_b), *abs_grads]
    n = max(out_b.numel(), call["weight"].tensor.numel())  # the longest sum (conv, BN stats)
    compare([out_c, *stats_c, *grads_c], [out_b, *stats_b, *grads_b], bounds, dtype, what, n)


@props(120)
@given(data=st.data())
def test_fused_conv_bn2d_matches_builtin_or_raises_clearly(data):
    """Random sizes and conv/BN options: where the twin (F.conv2d → F.batch_norm, unchecked)
    runs, both impls run and match it; where it fails, both raise the op's clear error."""
    draw = data.draw
    device = draw(st.sampled_from(DEVICES), label="device")
    dtype = draw(st.sampled_from(FLOATS), label="dtype")
    call, options = draw(conv_call(device, dtype), label="call")
    raw, stats_raw = conv_run(fused_conv_bn2d_builtin, call, options)
    if raw.ok and raw.value.is_contiguous(memory_format=torch.channels_last):
        # KNOWN BUG (upstream, xfail below): aten's CPU batch-norm backward reads strided
        # per-channel tensors (BN weight, running stats) as if contiguous when its input is
        # channels_last (which a 1×1 output always is): there they are made contiguous.
        for k in PER_CHANNEL:
            if call[k] is not None and not call[k].tensor.is_contiguous():
                call[k] = call[k].contiguous()
        raw, stats_raw = conv_run(fused_conv_bn2d_builtin, call, options)
    if raw.ok and bf16_depthwise_multiplier_bug(
        call["x"].tensor, call["weight"].tensor, options["groups"], raw.value
    ):
        event("skipped: KNOWN BUG bf16 depthwise multiplier")
        return
    before = snapshot([call[k] for k in GRAD_ARGS])
    custom, stats_c = conv_run(fused_conv_bn2d, call, options, impl="custom")
    builtin, stats_b = conv_run(fused_conv_bn2d, call, options, impl="builtin")
    mode = "train" if options["training"] else "eval"
    event(f"{mode}: " + ("twin ran" if raw.ok else f"twin raised {type(raw.error).__name__}"))
    if not options["training"] and call["running_mean"] is None:
        # Deliberately stricter than the twin, which lets an empty input through.
        assert_same_error(custom, builtin, OP, kind=ValueError)
        return
    if not raw.ok:
        assert_same_error(custom, builtin, OP)
        return
    assert custom.ok, f"{OP} rejected a call its twin runs: {custom.error!r}"
    assert builtin.ok, f"{OP}(impl='builtin') rejected a call its twin runs: {builtin.error!r}"
    for a, b in zip([builtin.value, *stats_b], [raw.value, *stats_raw], strict=True):
        torch.testing.assert_close(a, b, rtol=0, atol=0, equal_nan=True)
    check_conv_parity(draw, call, options, dtype, OP, custom, builtin, stats_c, stats_b)
    if not options["training"]:
        for s, a in zip(stats_c, (call["running_mean"], call["running_var"]), strict=True):
            torch.testing.assert_close(s, a.tensor, rtol=0, atol=0)  # eval: stats untouched
    assert_unchanged(before, [call[k] for k in GRAD_ARGS])


CONV_BAD = {  # mutation of a valid call -> the error class both impls must raise
    "non_float": TypeError,
    "dtype_mix": TypeError,
    "non_tensor": TypeError,
    "x_dims": ValueError,
    "weight_dims": ValueError,
    "bn_shape": ValueError,
    "one_stat": ValueError,
    "eval_no_stats": ValueError,
    "stride": ValueError,
    "dilation": ValueError,
    "padding": ValueError,
    "same_strided": ValueError,
    "groups": ValueError,
    "momentum": TypeError,
    "eps": TypeError,
    **({"device_mix": ValueError} if len(DEVICES) > 1 else {}),
}
BAD_STEPS = [0, -1, True, 1.0, (1,), (1, 1, 1), (0, 1), [1, -2], "1", None]
BAD_PADDINGS = [-1, (0, -1), 1.5, (1,), (1, 1, 1), "SAME", "full", "", None, True]
BAD_GROUPS = [0, -1, True, 1.0, "1", None]


@props(100)
@given(data=st.data())
def test_fused_conv_bn2d_bad_arguments_raise_clearly(data):
    """One bad argument in an otherwise valid call: both impls raise its clear error."""
    draw = data.draw
    case = draw(st.sampled_from(list(CONV_BAD) + ["bad_impl"]), label="case")
    device = draw(st.sampled_from(DEVICES), label="device")
    dtype = draw(st.sampled_from(FLOATS), label="dtype")
    call, options = draw(conv_call(device, dtype, structure=False), label="call")
    present = [k for k in TENSOR_ARGS if call[k] is not None]
    tensors_ = {k: t(a) for k, a in call.items()}

    def redraw(name, shape=None, dtype_=dtype, device_=device):
        old = tensors_[name] if tensors_[name] is not None else tensors_["weight"][:, 0, 0, 0]
        shape = tuple(old.shape) if shape is None else shape
        return draw(tensors(shape, dtype_, device_), label=name).tensor

    if case in ("non_float", "dtype_mix", "device_mix", "non_tensor"):
        which = draw(st.sampled_from(present if case != "dtype_mix" else present[1:]))
        if case == "non_float":
            tensors_[which] = redraw(which, dtype_=draw(st.sampled_from(NON_FLOATS)))
        elif case == "dtype_mix":
            tensors_[which] = redraw(
                which, dtype_=draw(st.sampled_from([d for d in FLOATS if d != dtype]))
            )
        elif case == "device_mix":
            tensors_[which] = redraw(which, device_=other_device(device))
        else:
            tensors_[which] = draw(NON_TENSORS.filter(lambda v: v is not None))
    elif case == "x_dims":
        tensors_["x"] = redraw("x", draw(shapes(0, 5, 1, 3).filter(lambda s: len(s) != 4)))
    elif case == "weight_dims":
        tensors_["weight"] = redraw(
            "weight", draw(shapes(0, 5, 1, 3).filter(lambda s: len(s) != 4))
        )
    elif case == "bn_shape":
        which = draw(st.sampled_from(present[2:] or ["running_mean"]))
        c_out = tensors_["weight"].shape[0]
        tensors_[which] = redraw(
            which, draw(st.sampled_from([(c_out + 1,), (), (1, c_out), (c_out, 1), (0,)]))
        )
        if which == "running_mean" and tensors_["running_var"] is None:
            tensors_["running_var"] = redraw("running_var", (c_out,)).abs() + 0.25
    elif case == "one_stat":
        tensors_[draw(st.sampled_from(STATS))] = None
        if tensors_["running_mean"] is None and tensors_["running_var"] is None:
            tensors_["running_mean"] = redraw("running_mean", (tensors_["weight"].shape[0],))
    elif case == "eval_no_stats":
        options["training"] = False
        tensors_["running_mean"] = tensors_["running_var"] = None
    elif case in ("stride", "dilation", "padding", "groups"):
        bad = {"padding": BAD_PADDINGS, "groups": BAD_GROUPS}.get(case, BAD_STEPS)
        options[case] = draw(st.sampled_from(bad), label=case)
    elif case == "same_strided":
        options.update(padding="same", stride=draw(st.sampled_from([2, (1, 2), (2, 1)])))
    elif case in ("momentum", "eps"):
        options[case] = draw(st.sampled_from([None, "0.1", [0.1], True, 1j]), label=case)

    if case == "bad_impl":
        error = Outcome(fused_conv_bn2d, **tensors_, **options, impl=draw(BAD_IMPLS)).error
        assert_clear_error(error, OP, kind=ValueError)
        return
    for k in STATS:  # the running stats are updated in place: each call gets its own
        if isinstance(tensors_[k], torch.Tensor):
            tensors_[k] = tensors_[k].detach()
    custom = Outcome(fused_conv_bn2d, **tensors_, **options, impl="custom")
    builtin = Outcome(fused_conv_bn2d, **tensors_, **options, impl="builtin")
    assert_same_error(custom, builtin, OP, kind=CONV_BAD[case])


# =============================================================================================
# Layers: Linear, ReLU, FusedConvBN2d against nn.Linear, nn.ReLU, nn.Conv2d → nn.BatchNorm2d
# =============================================================================================

BAD_SIZES = [0, -1, True, 2.0, None, "3"]
# KNOWN BUG (xfail below): non-float dtypes make the constructors raise aten's RuntimeError.
LAYER_DTYPES = st.sampled_from([None, *FLOATS])


def impls():
    return mostly(st.sampled_from(["custom", "builtin"]), BAD_IMPLS)


def layer_input(draw, device, dtype, shape):
    """x for a layer: usually the module's dtype and given shape, sometimes neither."""
    kind = draw(st.sampled_from(["ok"] * 6 + ["dtype", "shape"]), label="x kind")
    if kind == "dtype":
        dtype = draw(st.sampled_from([d for d in (*FLOATS, *NON_FLOATS) if d != dtype]))
    if kind == "shape":
        shape = draw(shapes(0, 5, 0, 4))
    return draw(tensors(shape, dtype, device), label="x")


def module_twin_step(draw, ours, twin, x, names, dtype, bound_fn=None):
    """ours(x) vs twin(x): if the twin fails, ours raises a clear error; else they match
    (output, parameter and input gradients, buffers)."""
    ref = Outcome(twin, x.tensor)
    out = Outcome(ours, x.tensor)
    event(f"{names[0]}: twin " + ("ran" if ref.ok else "raised"))
    if x.tensor.dtype != dtype:
        # Deliberately stricter than the twins, which let an empty input of any dtype through.
        # (A TypeError, unless a bad constructor argument is reported first.)
        assert_clear_error(out.error, *names)
        return False
    if not ref.ok:
        assert_clear_error(out.error, *names)
        return False
    assert out.ok, f"{names[0]} rejected an input its twin takes: {out.error!r}"
    if isinstance(ours, FusedConvBN2d) and bf16_depthwise_multiplier_bug(
        x.tensor, ours.conv.weight, ours.conv.groups, ref.value
    ):
        return False
    g = (bn_grad_output if isinstance(ours, FusedConvBN2d) else grad_output)(draw, ref.value)
    params_o, params_t = list(ours.parameters()), list(twin.parameters())
    grads_o = grads(out.value, [x.leaf, *params_o], g)
    grads_t = grads(ref.value, [x.leaf, *params_t], g)
    buffers_o = [b for b in ours.buffers() if b.is_floating_point()]
    buffers_t = [b for b in twin.buffers() if b.is_floating_point()]
    if bound_fn is None:
        bounds = per_tensor([ref.value, *grads_t, *buffers_t])
    else:
        bounds = bound_fn(g)
        bounds = [*bounds, *per_tensor(buffers_t)]
    n = max([ref.value.numel(), *(p.numel() for p in params_t)])  # the longest sum
    compare(
        [out.value, *grads_o, *buffers_o],
        [ref.value, *grads_t, *buffers_t],
        bounds,
        dtype,
        names[0],
        n,
    )
    for a, b in zip(ours.buffers(), twin.buffers(), strict=True):
        if not a.is_floating_point():
            assert torch.equal(a, b)  # num_batches_tracked
    return True


@props(60)
@given(data=st.data())
def test_linear_layer_matches_nn_linear_or_raises_clearly(data):
    # Module init draws from the global RNG: seed it per example (and leave it as it was).
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(data.draw(st.integers(0, 2**32 - 1), label="init seed"))
        _linear_layer_matches_nn_linear_or_raises_clearly(data.draw)


def _linear_layer_matches_nn_linear_or_raises_clearly(draw):
    device = draw(st.sampled_from(DEVICES), label="device")
    size = mostly(st.integers(1, 4), st.sampled_from(BAD_SIZES))
    in_f, out_f = draw(size, label="in_features"), draw(size, label="out_features")
    bias = draw(st.sampled_from([True, False, 1, 0]), label="bias")
    impl = draw(impls(), label="impl")
    dtype = draw(LAYER_DTYPES, label="dtype")
    made = Outcome(Linear, in_f, out_f, bias=bias, impl=impl, device=device, dtype=dtype)
    event("constructed" if made.ok else "constructor raised")
    if not made.ok:
        assert_clear_error(made.error, "Linear")
        return
    ours = made.value
    assert isinstance(in_f, int) and in_f > 0 and isinstance(out_f, int) and out_f > 0
    assert impl in ("custom", "builtin")
    twin = nn.Linear(in_f, out_f, bias=bool(bias), device=device, dtype=dtype)
    twin.load_state_dict(ours.state_dict())
    dtype = ours.weight.dtype
    batch = draw(shapes(0, 3), label="batch")
    x = layer_input(draw, device, dtype, (*batch, in_f))

    def bounds(g):
        lx, vx = x.abs64()
        w, b = abs_param(ours.weight), abs_param(ours.bias)
        out = F.linear(vx, w, b)
        return [out.detach(), *grads(out, [lx, w, b], g.to("cpu", torch.float64).abs())]

    module_twin_step(draw, ours, twin, x, ("Linear", "linear"), dtype, bounds)


@props(50)
@given(data=st.data())
def test_relu_layer_matches_nn_relu_or_raises_clearly(data):
    draw = data.draw
    impl = draw(impls(), label="impl")
    made = Outcome(ReLU, impl=impl)
    if not made.ok:
        assert_clear_error(made.error, "ReLU", kind=ValueError)
        return
    assert impl in ("custom", "builtin")
    device = draw(st.sampled_from(DEVICES), label="device")
    dtype = draw(st.sampled_from([*FLOATS, *NON_FLOATS]), label="dtype")
    x = draw(tensors(draw(shapes()), dtype, device, special=True), label="x")
    if not dtype.is_floating_point:  # deliberately stricter than torch.relu
        assert_clear_error(Outcome(made.value, x.tensor).error, "ReLU", "relu", kind=TypeError)
        return
    exact = [0.0, *[0.0] * x.leaf.requires_grad]  # max(x, 0) and its mask: no rounding
    module_twin_step(draw, made.value, nn.ReLU(), x, ("ReLU", "relu"), dtype, lambda g: exact)


@st.composite
def conv_layer_args(draw):
    """FusedConvBN2d(...) keyword arguments: mostly valid, sometimes one bad value."""
    groups = draw(st.integers(1, 3))
    kw = {
        "in_channels": groups * draw(st.integers(1, 2)),
        "out_channels": groups * draw(st.integers(1, 2)),
        "kernel_size": draw(int_or_pair(1, 3)),  # KNOWN BUG: sizes ≤ 0, non-ints
        "stride": draw(int_or_pair(1, 2)),
        "padding": draw(st.one_of(int_or_pair(0, 2), st.just("valid"))),
        "dilation": draw(int_or_pair(1, 2)),
        "groups": groups,
        "eps": draw(st.sampled_from([1e-5, 1e-3, 0.1])),
        "momentum": draw(st.sampled_from([0.1, None, 0.0, 1.0])),
        "affine": draw(st.booleans()),
        "track_running_stats": draw(st.booleans()),
        "impl": draw(st.sampled_from(["custom", "builtin"])),
        "dtype": draw(LAYER_DTYPES),
    }
    if draw(st.booleans()):  # 'same' is only for stride 1 (KNOWN BUG: else nn.Conv2d's error)
        kw.update(padding="same", stride=1)
    bad = draw(
        st.sampled_from(
            ["none"] * 9
            + [
                "in_channels",
                "out_channels",
                "groups",
                "impl",
                "indivisible",
                "stride",
                "padding",
                "dilation",
                "momentum",
            ]
        )
    )
    if bad in ("in_channels", "out_channels", "groups"):
        kw[bad] = draw(st.sampled_from(BAD_SIZES))
    elif bad == "impl":
        kw["impl"] = draw(BAD_IMPLS)
    elif bad == "indivisible":
        kw.update(groups=2, in_channels=draw(st.sampled_from([1, 3, 2])), out_channels=3)
    elif bad in ("stride", "dilation"):  # nn.Conv2d takes these; the forward refuses them
        kw[bad] = draw(st.sampled_from([0, -1, (1, 0)]))
        if bad == "stride" and kw["padding"] == "same":
            kw["padding"] = 0  # KNOWN BUG: nn.Conv2d's own error for 'same' with a stride
    elif bad == "padding":
        kw["padding"], kw["stride"] = draw(st.sampled_from([-1, (0, -2)])), 1
    elif bad == "momentum":
        kw["momentum"] = draw(st.sampled_from(["0.1", [0.1]]))
    kw["bad"] = bad
    return kw


def pair_like(ours: FusedConvBN2d, kw) -> nn.Sequential:
    """nn.Sequential(nn.Conv2d(bias=False), nn.BatchNorm2d) with ours' config and state."""
    conv_kw = {k: kw[k] for k in ("stride", "padding", "dilation", "groups", "dtype")}
    twin = nn.Sequential(
        nn.Conv2d(
            kw["in_channels"],
            kw["out_channels"],
            kw["kernel_size"],
            **conv_kw,
            bias=False,
            device=ours.conv.weight.device,
        ),
        nn.BatchNorm2d(
            kw["out_channels"],
            kw["eps"],
            kw["momentum"],
            kw["affine"],
            kw["track_running_stats"],
            device=ours.conv.weight.device,
            dtype=kw["dtype"],
        ),
    )
    twin.load_state_dict(ours.state_dict())
    return twin


@props(60)
@given(data=st.data())
def test_fused_conv_bn_layer_matches_nn_pair_or_raises_clearly(data):
    # Module init draws from the global RNG: seed it per example (and leave it as it was).
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(data.draw(st.integers(0, 2**32 - 1), label="init seed"))
        _fused_conv_bn_layer_matches_nn_pair_or_raises_clearly(data.draw)


def _fused_conv_bn_layer_matches_nn_pair_or_raises_clearly(draw):
    kw = draw(conv_layer_args(), label="kwargs")
    bad = kw.pop("bad")
    device = draw(st.sampled_from(DEVICES), label="device")
    made = Outcome(FusedConvBN2d, **kw, device=device)
    event("constructed" if made.ok else "constructor raised")
    if not made.ok:
        assert_clear_error(made.error, "FusedConvBN2d")
        return
    ours = made.value
    twin = pair_like(ours, kw)
    train = draw(st.booleans(), label="train")
    ours.train(train), twin.train(train)
    dtype = ours.conv.weight.dtype
    batch_stats = train or not kw["track_running_stats"]
    # KNOWN BUG (xfail below): batch statistics of an empty input crash the custom op.
    n = draw(st.integers(1 if batch_stats else 0, 3), label="N")
    side = st.one_of(st.integers(4, 7), st.integers(1, 7))
    hw = draw(side, label="H"), draw(side, label="W")
    x = layer_input(draw, device, dtype, (n, kw["in_channels"], *hw))
    if kw["impl"] == "custom" and batch_stats and x.tensor.numel() == 0:
        return  # KNOWN BUG, as above (the drawn input was swapped for another shape)
    pad = kw["padding"]
    padded = not isinstance(pad, str) and any((pad, pad) if isinstance(pad, int) else pad)
    if x.tensor.dim() == 4 and 0 in x.tensor.shape[2:] and padded:
        return  # KNOWN BUG (xfail below): a 0-size input that padding makes large enough
    if bad in ("stride", "dilation", "padding", "momentum"):
        # Accepted by nn.Conv2d/nn.BatchNorm2d, refused by the forward - also where the twin
        # lets an empty input through.
        assert_clear_error(Outcome(ours, x.tensor).error, "FusedConvBN2d", OP)
        return

    def folded_bounds(g):
        """Eval with running stats: the custom folds BN into the conv (see check_conv_parity)."""
        conv, bn = ours.conv, ours.bn
        lx, vx = x.abs64()
        params = [abs_param(p) for p in (conv.weight, bn.weight, bn.bias)]
        stats = [abs_param(b).detach() for b in (bn.running_mean, bn.running_var)]
        out = conv_bn_eval_abs(
            vx, *params, *stats, bn.eps, conv.stride, conv.padding, conv.dilation, conv.groups
        )
        return [out.detach(), *grads(out, [lx, *params], g.to("cpu", torch.float64).abs())]

    for _ in range(draw(st.integers(1, 2), label="steps")):  # momentum=None averages steps
        bounds = None if batch_stats else folded_bounds
        if not module_twin_step(draw, ours, twin, x, ("FusedConvBN2d", OP), dtype, bounds):
            return


# =============================================================================================
# ScalarTensor: the torch functions it handles agree with its dense N×N tensor
# =============================================================================================


@props(60)
@given(data=st.data())
def test_scalar_tensor_matches_dense_or_raises_clearly(data):
    draw = data.draw
    n = draw(st.one_of(st.integers(1, 4), st.sampled_from([0, -2, True, 2.0, None])), label="N")
    value = draw(
        st.one_of(
            st.floats(-1e3, 1e3),
            st.integers(-5, 5),
            st.sampled_from([True, "1", None, torch.tensor(1.0)]),
        ),
        label="value",
    )
    made = Outcome(ScalarTensor, n, value)
    if not made.ok:
        assert_clear_error(made.error, "ScalarTensor")
        return
    s = made.value
    m = draw(st.sampled_from([n, n + 1]), label="other N")
    other_shape = draw(st.sampled_from([(n, n), (m, n), (n,), (2, n, n), (m,), ()]))
    other = draw(tensors(other_shape, torch.float32, "cpu", requires_grad=False)).tensor
    other_value = draw(st.floats(-10, 10), label="other value")
    if m != n:
        # Deliberately stricter than dense N = 1 broadcasting: value·I of different sizes.
        error = Outcome(torch.add, s, ScalarTensor(m, other_value)).error
        assert_clear_error(error, "torch.add", kind=ValueError)
    calls = {
        "mean": (torch.mean, s),
        "diagonal": (torch.diagonal, s, draw(st.integers(-4, 4), label="offset")),
        "add": (torch.add, s, ScalarTensor(n, other_value)),
        "mul": (torch.mul, s, other),
        "mul_number": (torch.mul, s, other_value),
        "matmul": (torch.matmul, s, other),
        "rmatmul": (torch.matmul, other, s),
        "mm": (torch.mm, s, other),
    }
    name = draw(st.sampled_from(sorted(calls)), label="function")
    fn, *args = calls[name]
    dense_args = [a.tensor() if isinstance(a, ScalarTensor) else a for a in args]
    # KNOWN BUG (xfail below): torch.mm of a non-matrix or of mismatched sizes, and diagonal
    # of an int value (dim1/dim2 are never drawn).
    if name == "mm" and (other.dim() != 2 or other.shape[0] != n):
        return
    if name == "diagonal" and isinstance(value, int):
        return
    got, want = Outcome(fn, *args), Outcome(fn, *dense_args)
    event(f"{name}: dense " + ("ran" if want.ok else "raised"))
    if not want.ok:
        assert not got.ok, f"torch.{fn.__name__} took a ScalarTensor its dense twin refuses"
        if type(got.error) is not type(want.error):  # else: the dense fallback's own error
            assert_clear_error(got.error, f"torch.{fn.__name__}")
        return
    assert got.ok, f"torch.{fn.__name__} on a ScalarTensor failed: {got.error!r}"
    result = got.value.tensor() if isinstance(got.value, ScalarTensor) else got.value
    # The dense twin rounds value to float32 first, ScalarTensor computes in Python floats:
    # a couple of roundings of the terms (for add, of both operands).
    bound = dense_args[0].abs() + dense_args[1].abs() if name == "add" else want.value.abs()
    assert_close_bound(result, want.value, bound, torch.float32, k=4, what=name)


# =============================================================================================
# Bugs found by the properties: minimal repros, strict xfails (see the module docstring)
# =============================================================================================


@pytest.mark.parametrize("in_f, out_f", [(4, 0), (0, 2)], ids=["out_features=0", "in_features=0"])
def test_linear_zero_features_backward(in_f, out_f):
    x = torch.randn(3, in_f, requires_grad=True)
    w = torch.randn(out_f, in_f, requires_grad=True)
    b = torch.randn(out_f, requires_grad=True)
    for impl in ("builtin", "custom"):
        out = linear(x, w, b, impl=impl)
        gx, gw, gb = torch.autograd.grad(out, (x, w, b), torch.ones_like(out))
        assert gx.shape == x.shape and gw.shape == w.shape and gb.shape == b.shape


FLOAT8 = torch.float8_e4m3fn


@pytest.mark.parametrize("name", ["legendre_p3", "cube", "relu", "mul_constant", OP])
def test_float8_rejected_clearly(name):
    x = torch.zeros(2, 3, 4, 4).to(FLOAT8)
    calls = {
        "legendre_p3": lambda impl: legendre_p3(x, impl=impl),
        "cube": lambda impl: cube(x, impl=impl),
        "relu": lambda impl: relu(x, impl=impl),
        "mul_constant": lambda impl: mul_constant(x, 2.0, impl=impl),
        OP: lambda impl: fused_conv_bn2d(
            x, torch.zeros(2, 3, 1, 1).to(FLOAT8), training=True, impl=impl
        ),
    }
    for impl in ("custom", "builtin"):
        with pytest.raises(TypeError, match=f"^{name}: "):
            calls[name](impl)


@pytest.mark.xfail(
    strict=True,
    raises=RuntimeError,
    reason=(
        "fused_conv_bn2d training mode on an empty input (N=0 or C_in=0): the custom op's "
        "torch.native_batch_norm raises 'input tensor must have at least one element' while "
        "F.batch_norm (the twin, and nn.BatchNorm2d) returns the empty output"
    ),
)
@pytest.mark.parametrize(
    "x_shape, w_shape",
    [((0, 3, 5, 5), (4, 3, 3, 3)), ((2, 0, 5, 5), (4, 0, 3, 3))],
    ids=["N=0", "C_in=0"],
)
def test_xfail_fused_conv_bn2d_training_on_empty_input(x_shape, w_shape):
    x, w = torch.randn(x_shape), torch.randn(w_shape)
    expected = fused_conv_bn2d(x, w, training=True, impl="builtin")
    torch.testing.assert_close(fused_conv_bn2d(x, w, training=True), expected)


@pytest.mark.xfail(
    strict=True,
    raises=RuntimeError,
    reason=(
        "fused_conv_bn2d's validation lets through a 0-size kernel, 0 out_channels and a 0-size "
        "input that padding makes large enough; both impls then raise aten's RuntimeError "
        "(oneDNN 'could not create a primitive descriptor', 'expected weight to be at least 1 at "
        "dimension 0', 'Only zero batch or zero channel inputs are supported')"
    ),
)
@pytest.mark.parametrize(
    "x_shape, w_shape, padding",
    [
        ((2, 3, 5, 5), (4, 3, 0, 3), 0),
        ((2, 3, 5, 5), (0, 3, 3, 3), 0),
        ((2, 3, 0, 5), (4, 3, 1, 1), 1),
    ],
    ids=["kernel-0", "C_out=0", "H=0-padded"],
)
def test_xfail_fused_conv_bn2d_zero_sizes_rejected_clearly(x_shape, w_shape, padding):
    x, w = torch.randn(x_shape), torch.randn(w_shape)
    c = w_shape[0]
    for training in (True, False):
        for impl in ("custom", "builtin"):
            with pytest.raises(ValueError, match=f"^{OP}: "):
                fused_conv_bn2d(
                    x,
                    w,
                    running_mean=torch.zeros(c),
                    running_var=torch.ones(c),
                    training=training,
                    padding=padding,
                    impl=impl,
                )


def test_relu_backward_non_finite_grad_where_inactive():
    """Found by the unary property (fixed in c4b282c): a nan/inf incoming gradient where
    x <= 0 gives 0 like torch.relu's, not nan (0·inf) as multiplying by the mask did."""
    x = torch.tensor([-1.0, -2.0, 3.0, -0.0], requires_grad=True)
    g = torch.tensor([float("nan"), float("inf"), 1.0, -float("inf")])
    (expected,) = torch.autograd.grad(relu(x, impl="builtin"), x, g)
    (got,) = torch.autograd.grad(relu(x), x, g)
    assert torch.equal(got, expected), (got, expected)  # [0, 0, 1, 0]


@pytest.mark.parametrize("c", [10**400, fractions.Fraction(1, 3)], ids=["huge-int", "Fraction"])
def test_mul_constant_real_numbers(c):
    x = torch.ones(3)
    custom, builtin = Outcome(mul_constant, x, c), Outcome(mul_constant, x, c, impl="builtin")
    if custom.ok or builtin.ok:
        assert custom.ok and builtin.ok
        torch.testing.assert_close(custom.value, builtin.value)
    else:
        assert_same_error(custom, builtin, "mul_constant")


@pytest.mark.xfail(
    strict=True,
    raises=RuntimeError,
    reason=(
        "Linear/FusedConvBN2d(dtype=<int/bool>) raise aten's RuntimeError 'Only Tensors of "
        "floating point and complex dtype can require gradients' (from nn.Parameter / nn.Conv2d) "
        "instead of a clear error naming the class"
    ),
)
@pytest.mark.parametrize(
    "make",
    [
        lambda: Linear(3, 4, dtype=torch.int64),
        lambda: FusedConvBN2d(3, 4, 3, dtype=torch.int32),
    ],
    ids=["Linear", "FusedConvBN2d"],
)
def test_xfail_layers_reject_integer_dtype_clearly(make):
    with pytest.raises((ValueError, TypeError), match=r"^(Linear|FusedConvBN2d): "):
        make()


@pytest.mark.xfail(
    strict=True,
    reason=(
        "FusedConvBN2d leaves these constructor arguments to nn.Conv2d, whose errors don't name "
        "the class (ValueError 'Invalid padding string', ValueError \"padding='same' is not "
        "supported for strided convolutions\", TypeError from torch.empty, RuntimeError 'negative "
        "dimension') or accepts kernel_size=0, which fails in forward with aten's RuntimeError"
    ),
)
@pytest.mark.parametrize(
    "kwargs",
    [
        {"padding": "full"},
        {"padding": "same", "stride": 2},
        {"kernel_size": -1},
        {"kernel_size": "3"},
        {"kernel_size": 0},
    ],
    ids=["padding-string", "same-strided", "kernel-negative", "kernel-str", "kernel-0"],
)
def test_xfail_fused_conv_bn_layer_constructor_errors_name_the_class(kwargs):
    kw = {"in_channels": 3, "out_channels": 4, "kernel_size": 3, **kwargs}
    made = Outcome(FusedConvBN2d, **kw)
    if made.ok:  # accepted: then the forward must fail clearly
        made = Outcome(made.value, torch.randn(2, 3, 5, 5))
        assert_clear_error(made.error, "FusedConvBN2d", OP)
    else:
        assert_clear_error(made.error, "FusedConvBN2d")


@pytest.mark.xfail(
    strict=True,
    reason=(
        "ScalarTensor's handlers differ from the dense N×N tensor: torch.mm accepts a 1-D or 3-D "
        "operand (the dense mm raises), torch.diagonal ignores dim1/dim2 (no IndexError for dim2=2) "
        "and returns int64 for an int value (dense: float32); torch.mm's size error says "
        "'torch.matmul: ...'"
    ),
)
@pytest.mark.parametrize(
    "call",
    [
        lambda s: torch.mm(s, torch.ones(3)),
        lambda s: torch.mm(s, torch.ones(2, 3, 3)),
        lambda s: torch.diagonal(s, 0, 0, 2),
        lambda s: torch.diagonal(s),
        lambda s: torch.mm(s, torch.ones(2, 3)),
    ],
    ids=["mm-vector", "mm-3d", "diagonal-dims", "diagonal-int-dtype", "mm-error-names-matmul"],
)
def test_xfail_scalar_tensor_matches_dense(call):
    s = ScalarTensor(3, 2)
    got, want = Outcome(call, s), Outcome(call, s.tensor())
    if want.ok:
        assert got.ok and got.value.dtype == want.value.dtype
        torch.testing.assert_close(got.value, want.value)
    else:
        assert_clear_error(got.error, "torch.mm", "torch.diagonal", "ScalarTensor")


@pytest.mark.xfail(
    strict=True,
    reason=(
        "sparse COO inputs are not validated: relu's custom fails in aten::clamp_min "
        "(NotImplementedError for SparseCPU) and legendre_p3's custom in add (RuntimeError "
        "'add(sparse, dense) is not supported') while torch.relu / the eager expression work"
    ),
)
@pytest.mark.parametrize("op", [relu, legendre_p3], ids=["relu", "legendre_p3"])
def test_xfail_sparse_input(op):
    x = torch.tensor([[0.0, -1.5], [2.0, 0.0]]).to_sparse()
    custom, builtin = Outcome(op, x), Outcome(op, x, impl="builtin")
    if custom.ok:
        torch.testing.assert_close(custom.value.to_dense(), builtin.value.to_dense())
    else:
        assert_same_error(custom, builtin, op.__name__)


def _bn_backward_case(name: str):
    """(x, conv weight, options, BN tensors, grad_out) of an upstream batch-norm backward bug."""
    g = torch.Generator().manual_seed(0)

    def randn(*shape):
        return torch.randn(*shape, generator=g, dtype=torch.float64)

    bn = {"bn_weight": randn(5), "running_mean": randn(5), "running_var": randn(5).abs() + 0.5}
    if name == "strided-bn_weight-1x1-output":
        x, w, options = randn(4, 3, 1, 1), randn(5, 3, 1, 1), {}
        bn["bn_weight"] = randn(10)[::2]
    elif name == "grad_out-channels_last-output-nchw":
        # output (1, 5, 3, 1): NCHW-contiguous only; grad_out strides (15, 1, 5, 1):
        # channels_last-contiguous only
        x, w, options = randn(1, 1, 3, 3), randn(5, 1, 1, 2), {"dilation": 2}
        return x, w, options, bn, randn(1, 3, 5, 1).permute(0, 2, 1, 3)
    else:  # "strided-running-stats-channels_last-output"
        x = randn(2, 2, 2, 3).permute(0, 3, 1, 2)  # channels_last (2, 3, 2, 2)
        w, options = randn(5, 3, 1, 1), {}
        # Step-2 slices: read as contiguous, the kernel still stays inside their storage
        # (an expand(5) of one element also triggers it, but by reading out of bounds).
        bn["running_mean"] = randn(10)[::2]
        bn["running_var"] = (randn(10).abs() + 0.5)[::2]
        return x, w, options, bn, randn(2, 2, 2, 5).permute(0, 3, 1, 2)  # channels_last
    return x, w, options, bn, randn(F.conv2d(x, w, None, 1, 0, options.get("dilation", 1)).shape)


# (case, impl, training): where the result is wrong. Not affected: the custom op in eval mode
# (folded conv, no batch-norm backward) and, for running stats, training mode (unused there).
UPSTREAM_BN_BACKWARD = [
    ("strided-bn_weight-1x1-output", "custom", True),
    ("strided-bn_weight-1x1-output", "builtin", True),
    ("strided-bn_weight-1x1-output", "builtin", False),
    ("grad_out-channels_last-output-nchw", "custom", True),
    ("grad_out-channels_last-output-nchw", "builtin", True),
    ("grad_out-channels_last-output-nchw", "builtin", False),
    ("strided-running-stats-channels_last-output", "builtin", False),
]


def _upstream_bug(check) -> bool:
    """Whether an upstream kernel bug shows on this machine's torch build (`check` raises).

    The xfails of upstream bugs apply only where the plain torch twin reproduces them: their
    kernels differ with the CPU and build, and where torch gets it right the op must too.
    """
    try:
        check()
    except Exception:  # noqa: BLE001 - any failure of the twin is the bug showing
        return True
    return False


def _bn_backward_layouts_check(case, impl, training):
    # Repeated: the running-stats case reads memory it shouldn't, and is wrong only in ~3 of
    # 4 calls (all of 20 calls right has odds of ~1e-13 while the bug lasts).
    for _ in range(20):
        got, want = _bn_backward_grads(case, impl, training)
        for a, b in zip(got, want, strict=True):
            torch.testing.assert_close(a, b)


def _bn_backward_grads(case, impl, training):
    """Gradients for x, conv weight, bn_weight: with the case's layouts and made contiguous."""
    x, w, options, bn, grad_out = _bn_backward_case(case)
    leaves_ = [x.requires_grad_(), w.requires_grad_(), bn["bn_weight"].requires_grad_()]
    results = []
    for layout in (lambda t: t, lambda t: t.contiguous()):
        # Fresh running stats for each call (training updates them; the strided ones are
        # only used in eval mode, where they stay untouched).
        stats = [layout(bn[k]) if training is False else layout(bn[k]).clone() for k in STATS]
        out = fused_conv_bn2d(
            layout(x), w, layout(bn["bn_weight"]), None, *stats, training=training,
            **options, impl=impl,
        )  # fmt: skip
        results.append(torch.autograd.grad(out, leaves_, layout(grad_out)))
    return results


_BN_LAYOUTS_REASON = (
    "silently wrong gradients from an upstream aten CPU bug the op inherits: "
    "native_batch_norm_backward on a channels_last input (a 1x1 output always is) reads a "
    "strided bn_weight / running_mean / running_var as if contiguous (wrong values, even "
    "out-of-bounds garbage like 1e+214), and mishandles a grad_output in the other memory "
    "format than the input. Hit by the custom op in training mode (it calls "
    "native_batch_norm_backward with the caller's tensors) and by impl='builtin' "
    "(F.batch_norm); the custom eval path (folded conv) is right. The op could pass "
    ".contiguous() per-channel tensors and a grad_out in y's memory format"
)


@pytest.mark.parametrize(
    "case, impl, training",
    [
        pytest.param(
            *entry,
            marks=pytest.mark.xfail(
                # probed with the twin (impl="builtin" is F.conv2d -> F.batch_norm as is)
                _upstream_bug(lambda e=entry: _bn_backward_layouts_check(e[0], "builtin", e[2])),
                strict=True,
                raises=AssertionError,
                reason=_BN_LAYOUTS_REASON,
            ),
        )
        for entry in UPSTREAM_BN_BACKWARD
    ],
)
def test_xfail_fused_conv_bn2d_batch_norm_backward_layouts(case, impl, training):
    _bn_backward_layouts_check(case, impl, training)


@pytest.mark.parametrize("case", sorted({c for c, _, _ in UPSTREAM_BN_BACKWARD}))
def test_fused_conv_bn2d_eval_gradients_do_not_depend_on_layouts(case):
    """The custom eval path (BN folded into the conv) is free of that upstream bug."""
    got, want = _bn_backward_grads(case, "custom", False)
    for a, b in zip(got, want, strict=True):
        torch.testing.assert_close(a, b)


def _strided_weight_case():
    g = torch.Generator().manual_seed(0)
    x = torch.randn(1, 3, 3, 2, generator=g).permute(0, 3, 1, 2)  # (1, 2, 3, 3) channels_last
    leaf = torch.randn(1, 2, 2, 1, generator=g, requires_grad=True)
    return x, leaf, leaf.permute(0, 2, 1, 3)  # weight (1, 2, 2, 1), strides (4, 1, 2, 1)


def _strided_weight_twin_check():
    x, leaf, weight = _strided_weight_case()
    torch.autograd.grad(F.conv2d(x, weight).sum(), leaf)


@pytest.mark.xfail(
    _upstream_bug(_strided_weight_twin_check),
    strict=True,
    raises=RuntimeError,
    reason=(
        "fused_conv_bn2d's backward (both impls, both modes; F.conv2d's too: upstream aten CPU) "
        "raises 'slow_conv2d: grad_weight must be contiguous' for a channels_last x and a conv "
        "weight that is channels_last-contiguous with a non-canonical stride on a size-1 dim; "
        "the op could hand the kernel weight.contiguous()"
    ),
)
@pytest.mark.parametrize("impl", ["custom", "builtin"])
@pytest.mark.parametrize("training", [True, False], ids=["train", "eval"])
def test_xfail_fused_conv_bn2d_backward_strided_weight(impl, training):
    x, leaf, weight = _strided_weight_case()
    stats = torch.zeros(1), torch.ones(1)
    out = fused_conv_bn2d(x, weight, None, None, *stats, training=training, impl=impl)
    (grad,) = torch.autograd.grad(out, leaf, torch.ones_like(out))
    assert grad.shape == leaf.shape


def _folded_weight_case(dtype=torch.float64):
    g = torch.Generator().manual_seed(0)
    x = torch.randn(3, 4, 1, 4, generator=g, dtype=dtype)
    x = x.contiguous(memory_format=torch.channels_last)
    w = torch.randn(4, 3, 2, 1, generator=g, dtype=dtype).permute(0, 2, 3, 1)  # (4, 2, 1, 3)
    return x, w, {"stride": 2, "padding": (0, 2), "groups": 2}


def _folded_weight_twin_check():
    # What the custom eval path does: a conv with weight·scale, differentiated for the scale.
    x, w, conv = _folded_weight_case()
    scale = torch.ones(4, dtype=x.dtype, requires_grad=True)
    y = F.conv2d(x, w * scale.view(-1, 1, 1, 1), None, conv["stride"], conv["padding"], 1, 2)
    torch.autograd.grad(y.sum(), scale)


@pytest.mark.xfail(
    _upstream_bug(_folded_weight_twin_check),
    strict=True,
    raises=RuntimeError,
    reason=(
        "fused_conv_bn2d custom eval mode: the gradient for bn_weight goes through the conv "
        "with the folded weight·scale, which keeps a strided weight's layout, and aten's CPU "
        "conv backward refuses it ('slow_conv2d: grad_weight must be contiguous') for a "
        "channels_last x - while impl='builtin' runs; the op could fold into weight.contiguous()"
    ),
)
def test_xfail_fused_conv_bn2d_custom_eval_strided_weight():
    x, w, conv = _folded_weight_case()
    gamma = torch.randn(4, dtype=x.dtype, requires_grad=True)
    stats = torch.zeros(4, dtype=x.dtype), torch.ones(4, dtype=x.dtype)
    want = torch.autograd.grad(
        fused_conv_bn2d(x, w, gamma, None, *stats, **conv, impl="builtin").sum(), gamma
    )
    got = torch.autograd.grad(fused_conv_bn2d(x, w, gamma, None, *stats, **conv).sum(), gamma)
    torch.testing.assert_close(got, want)


def _bf16_depthwise_case():
    g = torch.Generator().manual_seed(0)
    x = torch.randn(3, 6, 3, 3, generator=g).permute(0, 3, 1, 2)  # (3, 3, 6, 3) channels_last
    return x, torch.randn(6, 1, 3, 2, generator=g)


def _bf16_depthwise_twin_check():
    x, w = _bf16_depthwise_case()
    got = F.conv2d(x.bfloat16(), w.bfloat16(), None, (1, 2), 0, 1, 3).double()
    want = F.conv2d(x.double(), w.double(), None, (1, 2), 0, 1, 3)
    torch.testing.assert_close(got, want, rtol=0.05, atol=0.05)


@pytest.mark.xfail(
    _upstream_bug(_bf16_depthwise_twin_check),
    strict=True,
    raises=AssertionError,
    reason=(
        "silently wrong forward (upstream aten/oneDNN CPU bfloat16 conv, inherited by both "
        "impls): a grouped conv with 1 input and 2 output channels per group, stride (1, 2) and "
        "a channels_last input returns scrambled values (~100% relative error) in bfloat16, "
        "with 1 or 2 threads; float16/float32 are right"
    ),
)
@pytest.mark.parametrize("impl", ["custom", "builtin"])
@pytest.mark.parametrize("training", [True, False], ids=["train", "eval"])
def test_xfail_fused_conv_bn2d_bf16_depthwise_multiplier(impl, training):
    x, w = _bf16_depthwise_case()

    def run(dtype, impl):
        stats = torch.zeros(6, dtype=dtype), torch.ones(6, dtype=dtype)
        return fused_conv_bn2d(
            x.to(dtype), w.to(dtype), None, None, *stats, training=training, stride=(1, 2),
            groups=3, impl=impl,
        )  # fmt: skip

    want = run(torch.float64, "builtin")
    torch.testing.assert_close(run(torch.bfloat16, impl).double(), want, rtol=0.05, atol=0.05)
    # (float32 gets it right: the same call agrees with float64)
