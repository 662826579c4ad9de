"""What a user op supports beyond first-order eager autograd: double backward (the newton
optimizer's Hessian) and forward-mode AD with vmap (the lm optimizer's jacfwd).

A missing capability is not a bug: these helpers tell "unsupported" (with the reason) apart
from an op that runs but computes the wrong numbers.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Sequence

import torch
from torch.autograd.function import once_differentiable

# The objects torch.library.custom_op returns, and torch.ops.* ops (a packet or an overload).
LIBRARY_OP_TYPES = (
    torch.library.CustomOpDef,
    type(torch.ops.aten.sin.default),
    type(torch.ops.aten.sin),
)
_ONCE_DIFFERENTIABLE_CODE = once_differentiable(lambda ctx: None).__code__


def _unwrap(fn: object) -> object:
    while isinstance(fn, functools.partial):
        fn = fn.func
    return fn


def is_library_op(fn: object) -> bool:
    """True for a torch.library custom op (or a torch.ops.* op), possibly under a partial."""
    return isinstance(_unwrap(fn), LIBRARY_OP_TYPES)


def function_class(fn: object) -> type | None:
    """The torch.autograd.Function subclass `fn` is the `.apply` of, if it is one."""
    owner = getattr(_unwrap(fn), "__self__", None)
    is_function = isinstance(owner, type) and issubclass(owner, torch.autograd.Function)
    return owner if is_function else None


def known_reason(fn: object, need: str) -> str | None:
    """Why `fn` cannot support `need` ("double_backward", "forward_ad" or "vmap"), read off its
    definition; None when nothing there says so."""
    cls = function_class(fn)
    old_style = cls is not None and cls.setup_context is torch.autograd.Function.setup_context
    if need == "vmap" and old_style:
        return "its forward takes ctx: torch.func transforms need forward + setup_context"
    if need == "vmap" and cls is not None and not cls.generate_vmap_rule \
            and cls.vmap is torch.autograd.Function.vmap:
        return "no vmap rule: set generate_vmap_rule = True or define a vmap staticmethod"
    if need == "forward_ad":
        if is_library_op(fn):
            return "torch.library op: torch drops the tangent (it comes back zero)"
        if cls is not None and cls.jvp is torch.autograd.Function.jvp:
            return "no jvp: the Function defines no jvp staticmethod"
        if old_style:
            return "its forward takes ctx: torch.func transforms need forward + setup_context"
    if need == "double_backward" and cls is not None:
        if getattr(cls.backward, "__code__", None) is _ONCE_DIFFERENTIABLE_CODE:
            return "once_differentiable: its backward is not differentiable"
    return None


def first_grads(out: torch.Tensor, inputs: Sequence[torch.Tensor], grad_out: torch.Tensor,
                create_graph: bool = False) -> list[torch.Tensor | None]:  # fmt: skip
    """d out / d inputs for `grad_out`; None for an input the backward gives no gradient."""
    return list(torch.autograd.grad(out, list(inputs), grad_out, create_graph=create_graph,
                                    allow_unused=True))  # fmt: skip


def second_grads(fn: Callable[..., torch.Tensor], args: tuple, diff: Sequence[int],
                 seed: int = 4) -> list[torch.Tensor | None]:  # fmt: skip
    """Double backward: d/d(inputs, grad_out) of <d out/d inputs for grad_out, r>; all None
    when the first-order gradients do not depend on anything (a backward not differentiable)."""
    g = torch.Generator().manual_seed(seed)
    out = fn(*args)
    v = torch.randn(out.shape, generator=g, dtype=out.dtype).to(out.device).requires_grad_()
    inputs = [args[i] for i in diff]
    grads = [gr for gr in first_grads(out, inputs, v, create_graph=True) if gr is not None]
    terms = [(gr * torch.randn(gr.shape, generator=g, dtype=gr.dtype).to(gr.device)).sum()
             for gr in grads if gr.requires_grad]  # fmt: skip
    if not terms:
        return [None] * (len(inputs) + 1)
    return list(torch.autograd.grad(sum(terms), [*inputs, v], allow_unused=True))


def jvp_tangent(fn: Callable[..., torch.Tensor], args: tuple, diff: Sequence[int],
                seed: int = 2) -> torch.Tensor:  # fmt: skip
    """torch.func.jvp's output tangent of fn at `args` along random tangents of `diff`."""
    g = torch.Generator().manual_seed(seed)
    primals = tuple(args[i] for i in diff)
    tangents = tuple(torch.randn(p.shape, generator=g, dtype=p.dtype).to(p.device)
                     for p in primals)  # fmt: skip

    def call(*d):
        full = list(args)
        for i, v in zip(diff, d, strict=True):
            full[i] = v
        return fn(*full)

    return torch.func.jvp(call, primals, tangents)[1]
