"""Hypothesis strategies and checks for the property tests (tests/test_properties_*.py).

Bad tensors: random shapes, dtypes, devices, strided views and requires_grad subsets, plus the
assertions the properties share: "a clear error" (ValueError/TypeError naming the op) and
"close to the twin" within a bound derived from the dtype's epsilon.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import torch
from hypothesis import strategies as st

DEVICES = ["cpu", *(["cuda"] if torch.cuda.is_available() else [])]
FLOATS = (torch.float16, torch.bfloat16, torch.float32, torch.float64)
# Dtypes every op must reject with a TypeError (the ops only run on real floating point).
NON_FLOATS = (
    torch.bool,
    torch.uint8,
    torch.int8,
    torch.int16,
    torch.int32,
    torch.int64,
    torch.complex32,
    torch.complex64,
    torch.complex128,
)
# Things that are not tensors at all, passed where a tensor is expected.
NON_TENSORS = st.sampled_from([None, 1.0, 3, [1.0, 2.0], "x", (2, 3)])

BAD_IMPLS = st.sampled_from(["Custom", "BUILTIN", "fast", "", None, 1, ["custom"]])


# ---------------------------------------------------------------------------------------------
# Shapes and strided views
# ---------------------------------------------------------------------------------------------


def shapes(min_dims=0, max_dims=4, min_side=0, max_side=3) -> st.SearchStrategy[tuple]:
    """Small shapes: 0-d up to max_dims dims, sides in [min_side, max_side] (0 = empty)."""
    return st.lists(st.integers(min_side, max_side), min_size=min_dims, max_size=max_dims).map(
        tuple
    )


@st.composite
def layouts(draw, shape: Sequence[int], depth: int = 2):
    """(base_shape, view): view(base) is a view of a `base_shape` tensor with `shape`.

    Up to `depth` of: permuted dims (transposes), slices with a start and a step (storage
    offset, non-unit strides), broadcasts (stride-0 dims, also new leading dims) and, for 4-D,
    channels_last strides. A base that requires grad gets its gradient through the view.
    """
    ops = []
    cur = tuple(shape)
    for _ in range(draw(st.integers(0, depth))):
        kinds = ["slice"] if cur else []
        if len(cur) >= 2:
            kinds.append("permute")
        if cur:
            kinds.append("expand")
        if len(cur) == 4:
            kinds.append("channels_last")
        if not kinds:
            break
        kind = draw(st.sampled_from(kinds))
        if kind == "permute":
            perm = tuple(draw(st.permutations(range(len(cur)))))
            base = [0] * len(cur)
            for i, p in enumerate(perm):
                base[p] = cur[i]
            ops.append(("permute", perm))
            cur = tuple(base)
        elif kind == "channels_last":
            # NCHW view of an NHWC buffer: exactly channels_last strides.
            ops.append(("permute", (0, 3, 1, 2)))
            cur = (cur[0], cur[2], cur[3], cur[1])
        elif kind == "slice":
            dim = draw(st.integers(0, len(cur) - 1))
            start, step = draw(st.integers(0, 2)), draw(st.integers(1, 3))
            n = cur[dim]
            size = start + (n - 1) * step + 1 if n else start
            ops.append(("slice", dim, start, step, n))
            cur = cur[:dim] + (size,) + cur[dim + 1 :]
        else:  # expand: some dims (and maybe leading dims) broadcast from size 1
            new_lead = draw(st.integers(0, len(cur) - 1))
            rest = cur[new_lead:]
            ones = draw(st.lists(st.booleans(), min_size=len(rest), max_size=len(rest)))
            ops.append(("expand", cur))
            cur = tuple(1 if one else s for one, s in zip(ones, rest, strict=True))

    def view(base: torch.Tensor) -> torch.Tensor:
        t = base
        for op in reversed(ops):
            if op[0] == "permute":
                t = t.permute(op[1])
            elif op[0] == "slice":
                _, dim, start, step, n = op
                index = [slice(None)] * t.dim()
                index[dim] = slice(start, start + (n - 1) * step + 1 if n else start, step)
                t = t[tuple(index)]
            else:
                t = t.expand(op[1])
        assert tuple(t.shape) == tuple(shape), (t.shape, shape, ops)
        return t

    view.ops = ops  # for hypothesis' failure reports
    return cur, view


def fill(
    seed: int, shape, dtype: torch.dtype, device, *, scale: float = 1.0, special: bool = False
):
    """Deterministic random values of `dtype`: normal·scale with some exact ±0 (and with
    `special`, ±inf/nan); non-float dtypes get bools, small ints or complex numbers."""
    g = torch.Generator().manual_seed(seed)
    v = torch.randn(shape, generator=g, dtype=torch.float64) * scale
    u = torch.rand(shape, generator=g, dtype=torch.float64)
    v = torch.where(u < 0.1, torch.zeros_like(v), v)
    v = torch.where((u >= 0.1) & (u < 0.15), torch.full_like(v, -0.0), v)
    if special:
        for lo, value in ((0.15, float("inf")), (0.18, -float("inf")), (0.21, float("nan"))):
            v = torch.where((u >= lo) & (u < lo + 0.03), torch.full_like(v, value), v)
    if dtype == torch.bool:
        out = v > 0
    elif dtype.is_complex:
        out = torch.complex(v, v.flip(list(range(v.dim())))).to(dtype)
    elif not dtype.is_floating_point:
        out = (v * 3).round().clamp(-8, 8).to(dtype) if dtype != torch.uint8 else v.abs().to(dtype)
    else:
        out = v.to(dtype)
    return out.to(device)


def _identity(t: torch.Tensor) -> torch.Tensor:
    return t


_identity.ops = []


class Arg:
    """A tensor argument: `view(leaf)` where `leaf` is a fresh tensor that may require grad.

    `tensor` is the view itself; the same view can be re-applied to another leaf of the same
    shape (a copy for in-place running stats, |leaf| in float64 for error bounds).
    """

    def __init__(self, leaf: torch.Tensor, view: Callable) -> None:
        self.leaf, self.view = leaf, view
        self.tensor = view(leaf)

    def fresh(self) -> torch.Tensor:
        """The same view over a copy of the leaf (for arguments updated in place)."""
        return self.view(self.leaf.detach().clone())

    def contiguous(self) -> Arg:
        """The same values as a fresh contiguous leaf (requiring grad like this one)."""
        leaf = self.tensor.detach().contiguous().requires_grad_(self.leaf.requires_grad)
        return Arg(leaf, _identity)

    def abs64(self) -> tuple[torch.Tensor, torch.Tensor]:
        """(leaf, view) over |leaf| in float64 on the CPU, requiring grad like the leaf."""
        leaf = self.leaf.detach().to("cpu", torch.float64).abs()
        leaf.requires_grad_(self.leaf.requires_grad)
        return leaf, self.view(leaf)

    def __repr__(self) -> str:
        t = self.tensor
        return (
            f"Arg({tuple(t.shape)}, {t.dtype}, {t.device}, stride={t.stride()}, "
            f"offset={t.storage_offset()}, requires_grad={self.leaf.requires_grad}, "
            f"view={getattr(self.view, 'ops', None)})"
        )


@st.composite
def tensors(
    draw,
    shape,
    dtype: torch.dtype,
    device,
    *,
    requires_grad: bool | None = None,
    scale: float = 1.0,
    special: bool = False,
    depth: int = 2,
) -> Arg:
    """A random strided view of `shape` over a fresh leaf. With requires_grad None it is
    drawn (for floating dtypes only); gradients go to the leaf."""
    base_shape, view = draw(layouts(shape, depth))
    seed = draw(st.integers(0, 2**31 - 1))
    leaf = fill(seed, base_shape, dtype, device, scale=scale, special=special)
    if requires_grad is None:
        requires_grad = dtype.is_floating_point and draw(st.booleans())
    leaf.requires_grad_(requires_grad)
    return Arg(leaf, view)


def grad_output(draw, like: torch.Tensor, *, special: bool = False) -> torch.Tensor:
    """A random (possibly strided, broadcast) incoming gradient shaped like `like`: finite,
    or with `special` also ±inf and nan."""
    shape = tuple(like.shape)
    return draw(
        tensors(shape, like.dtype, like.device, requires_grad=False, special=special)
    ).tensor


# ---------------------------------------------------------------------------------------------
# Outcomes and errors
# ---------------------------------------------------------------------------------------------


class Outcome:
    """What a call did: returned `value` or raised `error`."""

    def __init__(self, fn: Callable, *args, **kwargs) -> None:
        self.value, self.error = None, None
        try:
            self.value = fn(*args, **kwargs)
        except Exception as e:  # noqa: BLE001 - classifying every exception is the point
            self.error = e

    @property
    def ok(self) -> bool:
        return self.error is None

    def __repr__(self) -> str:
        return f"Outcome(error={self.error!r})" if self.error else "Outcome(ok)"


def assert_clear_error(error: BaseException | None, *names: str, kind=None) -> None:
    """`error` is a ValueError/TypeError (of `kind`, if given) whose message starts with one of
    `names` followed by ':' - never an IndexError, an aten RuntimeError or an AssertionError."""
    assert error is not None, f"expected a clear error from {names}, got a result"
    assert isinstance(error, (ValueError, TypeError)), (
        f"{names}: unclear error {type(error).__name__}: {error}"
    )
    if kind is not None:
        assert isinstance(error, kind), f"expected {kind.__name__}, got {error!r}"
    message = str(error)
    assert any(message.startswith(f"{n}:") for n in names), (
        f"error message does not start with {' or '.join(names)}: {message!r}"
    )


def assert_same_error(custom: Outcome, builtin: Outcome, *names: str, kind=None) -> None:
    """Both impls raise a clear error of the same class (they share one validation)."""
    assert_clear_error(custom.error, *names, kind=kind)
    assert_clear_error(builtin.error, *names, kind=kind)
    assert type(custom.error) is type(builtin.error), (custom.error, builtin.error)


# ---------------------------------------------------------------------------------------------
# Closeness
# ---------------------------------------------------------------------------------------------


def eps(dtype: torch.dtype) -> float:
    return torch.finfo(dtype).eps


def assert_close_bound(
    actual, expected, bound, dtype, *, k: float = 8.0, n: int = 0, what: str = ""
) -> None:
    """|actual − expected| ≤ (k·eps(dtype) + n·eps_acc)·bound + k·tiny(dtype), elementwise.

    `bound` (≥ 0, broadcastable) is the size of the terms the result is computed from, e.g.
    |x|·|W|ᵀ for x·Wᵀ; `n` is the longest sum behind a result (its worst-case rounding grows
    with the length, in the accumulation type: float32 for the half types, else the dtype's
    own). Infinities and nans must be in the same places; shape, dtype, device must match.
    """
    assert actual.shape == expected.shape, (what, actual.shape, expected.shape)
    assert actual.dtype == expected.dtype, (what, actual.dtype, expected.dtype)
    assert actual.device == expected.device, (what, actual.device, expected.device)
    a = actual.detach().to("cpu", torch.float64)
    e = expected.detach().to("cpu", torch.float64)
    b = torch.as_tensor(bound).detach().to("cpu", torch.float64).expand_as(e)
    assert torch.equal(a.isnan(), e.isnan()), f"{what}: nans differ\n{a}\n{e}"
    inf = e.isinf()
    assert torch.equal(a.isinf(), inf) and torch.equal(a[inf], e[inf]), f"{what}: infs differ"
    fin = e.isfinite()
    err = (a - e).abs()[fin]
    eps_acc = eps(torch.float64 if dtype == torch.float64 else torch.float32)
    tol = (k * eps(dtype) + n * eps_acc) * b[fin] + k * torch.finfo(dtype).tiny
    bad = ~(err <= tol)
    assert not bad.any(), (
        f"{what} ({dtype}): {int(bad.sum())} elements off, worst error "
        f"{(err - tol).max().item():.3g} above tolerance; actual {a[fin][bad][:5].tolist()} vs "
        f"expected {e[fin][bad][:5].tolist()}"
    )
