"""The helpers the ops share: compile-safe apply, spotting transform wrappers, memory format.

Each rests on a torch behaviour (Dynamo refusing a custom jvp, wrappers having no storage,
aten's stride rule): these tests fail loudly if a torch upgrade changes one.
"""

import inspect
import itertools

import pytest
import torch

from models.ops import LegendreP3, legendre_p3
from models.ops._function import compile_safe_apply, is_transform_wrapper
from models.ops._memory_format import suggest_memory_format


def _seen(x: torch.Tensor) -> list[bool]:
    seen = []

    def probe(t):
        seen.append(is_transform_wrapper(t))
        return t.sum()

    probe(x)
    for transform in (torch.func.grad, torch.func.jacrev, torch.func.jacfwd):
        transform(probe)(x)
    torch.func.vmap(probe)(x.expand(2, *x.shape))
    return seen


def test_is_transform_wrapper_spots_torch_func_wrappers_only():
    assert _seen(torch.ones(3)) == [False, True, True, True, True]
    for plain in (torch.ones(()), torch.ones(4, 4)[:, 1], torch.ones(3).expand(2, 3)):
        assert not is_transform_wrapper(plain)


def test_dynamo_still_refuses_a_custom_jvp():
    """Why compile_safe_apply exists: if this starts passing, the jvp-less variant can go."""
    x = torch.ones(3, requires_grad=True)
    torch._dynamo.reset()
    with pytest.raises(Exception, match="custom jvp"):
        torch.compile(lambda t: LegendreP3.apply(t), fullgraph=True, backend="eager")(x)
    torch._dynamo.reset()
    compiled = torch.compile(legendre_p3, fullgraph=True, backend="eager")
    torch.testing.assert_close(compiled(x), torch.ones(3))


def test_compile_safe_apply_is_plain_apply_without_a_jvp():
    class NoJvp(torch.autograd.Function):
        @staticmethod
        def forward(x):
            return x * 2

        @staticmethod
        def setup_context(ctx, inputs, output):
            pass

        @staticmethod
        def backward(ctx, grad):
            return grad * 2

    assert compile_safe_apply(NoJvp) == NoJvp.apply
    assert compile_safe_apply(LegendreP3) != LegendreP3.apply


CL = torch.channels_last
CF = torch.contiguous_format


@pytest.mark.parametrize(
    ("t", "want"),
    [
        (torch.empty(2, 3, 4, 5), CF),
        (torch.empty(2, 3, 4, 5, memory_format=CL), CL),
        (torch.empty(2, 3, 4, 5, memory_format=CL)[:, :, ::2], CL),
        (torch.empty(2, 3, 4, 5, memory_format=CL)[..., ::2], CF),  # W stride < C·W
        (torch.empty(2, 3, 4, 5)[:, ::2], CF),
        (torch.empty(4, 1, 1, 1, memory_format=CL), CF),  # ambiguous: NCHW
        (torch.empty(2, 1, 4, 1, memory_format=CL), CL),
        (torch.empty(2, 1, 4, 1), CF),
        (torch.empty(0, 3, 4, 5, memory_format=CL), CF),  # empty: NCHW
        (torch.empty(1, 3, 1, 1).expand(2, 3, 4, 5), CF),
        (torch.empty(2, 3, 4), CF),
        (torch.empty(2, 3, 4, 5, 6, memory_format=torch.channels_last_3d), CF),
    ],
)
def test_suggest_memory_format_cases(t, want):
    assert suggest_memory_format(t) == want


def _weights():
    """Conv weights in every stride order, dense and sliced, with and without size-1 dims."""
    for shape in ((3, 4, 5, 6), (3, 1, 5, 1), (3, 4, 1, 1)):
        base = torch.randn(shape)
        for perm in itertools.permutations(range(4)):
            inverse = torch.argsort(torch.tensor(perm)).tolist()
            dense = base.permute(perm).contiguous().permute(inverse)
            for dim, step in itertools.product(range(4), (1, 2)):
                yield dense.narrow(dim, 0, max(dense.shape[dim] - 1, 1))[..., ::step]


def test_suggest_memory_format_is_the_format_conv_picks_for_the_weight():
    """aten's CPU conv lays out its output channels_last iff the input or the weight suggests
    it: with a contiguous input, the output's layout shows what aten suggests for the weight."""
    seen = {CL: 0, CF: 0}
    for w in _weights():
        out = torch.nn.functional.conv2d(torch.randn(1, w.shape[1], 9, 9), w)
        if out.is_contiguous() == out.is_contiguous(memory_format=CL):
            continue  # both or neither: the output does not tell
        want = CL if out.is_contiguous(memory_format=CL) else CF
        assert suggest_memory_format(w) == want, (w.shape, w.stride())
        seen[want] += 1
    assert seen[CL] >= 5 and seen[CF] >= 100, seen


def test_compile_safe_apply_computes_the_forward_signature_once():
    """Function.apply binds each call's arguments to inspect.signature(forward): with the
    signature stored on forward, Python returns it instead of recomputing it every call."""
    compile_safe_apply(LegendreP3)
    assert inspect.signature(LegendreP3.forward) is LegendreP3.forward.__signature__
    assert list(inspect.signature(LegendreP3.forward).parameters) == ["x"]
