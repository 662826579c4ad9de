"""The exact derivatives newton and lm step with (and the card checks ops by): a Hessian by double
backward, a Jacobian by forward AD, each through torch.autograd so that `forward(ctx, ...)`
Functions work too, as long as their backward is itself differentiable."""

from collections.abc import Callable, Sequence

import torch
import torch.autograd.forward_ad as fwad
from torch import Tensor


def flatten(tensors: Sequence[Tensor | None], like: Sequence[Tensor]) -> Tensor:
    """The tensors as one vector, zeros where one is None (no dependence)."""
    return torch.cat([(torch.zeros_like(p) if t is None else t).reshape(-1)
                      for t, p in zip(tensors, like, strict=True)])


def hessian(loss: Callable[[], Tensor], params: Sequence[Tensor]) -> Tensor:
    """The (P, P) Hessian of the scalar `loss()` in `params` (tensors that require grad)."""
    params = list(params)
    grad = flatten(torch.autograd.grad(loss(), params, create_graph=True, allow_unused=True),
                   params)
    rows = [flatten(torch.autograd.grad(g, params, retain_graph=True, allow_unused=True), params)
            if g.requires_grad else torch.zeros_like(grad) for g in grad]
    return torch.stack(rows).detach()


def jacobian(residuals: Callable[[dict[str, Tensor] | None], Tensor],
             params: dict[str, Tensor]) -> Tensor:
    """The (N, P) Jacobian of `residuals({name: tensor})` (flattened) at `params`: forward AD,
    one dual pass per parameter entry; where an op defines no jvp, the double-vjp trick."""
    values = {name: p.detach() for name, p in params.items()}
    columns = []
    try:
        with fwad.dual_level():
            for name, value in values.items():
                for tangent in torch.eye(value.numel(), dtype=value.dtype, device=value.device):
                    dual = fwad.make_dual(value, tangent.view_as(value))
                    out = fwad.unpack_dual(residuals({**values, name: dual}))
                    columns.append(torch.zeros_like(out.primal) if out.tangent is None
                                   else out.tangent)
        return torch.stack([c.reshape(-1) for c in columns], dim=1)
    except NotImplementedError:  # a Function without jvp, or an op without a forward formula
        pass
    # g(v) = Jᵀv is linear in v, so ∂g_j/∂v, by a second backward, is column j of J.
    leaves = [v.clone().requires_grad_() for v in values.values()]
    with torch.enable_grad():
        out = residuals(dict(zip(values, leaves, strict=True))).reshape(-1)
        v = torch.zeros_like(out, requires_grad=True)
        g = flatten(torch.autograd.grad(out, leaves, v, create_graph=True, allow_unused=True),
                    leaves)
        columns = [torch.autograd.grad(gj, v, retain_graph=True, allow_unused=True)[0]
                   if gj.requires_grad else None for gj in g]
    return torch.stack([torch.zeros_like(out) if c is None else c for c in columns], dim=1).detach()


def jacobian_by_backward(residuals: Callable[[dict[str, Tensor]], Tensor],
                         params: dict[str, Tensor]) -> Tensor:
    """The (N, P) Jacobian of `residuals(params)` by reverse mode, one backward per row, each
    through a fresh forward (an op's backward may run once per forward)."""
    rows = []
    for i in range(residuals(params).numel()):
        leaves = {name: p.detach().clone().requires_grad_() for name, p in params.items()}
        out = residuals(leaves).reshape(-1)[i]
        rows.append(flatten(torch.autograd.grad(out, list(leaves.values()), allow_unused=True)
                            if out.requires_grad else [None] * len(leaves), list(leaves.values())))
    return torch.stack(rows)


class FreshForward(torch.autograd.Function):
    """f's outputs, each backward through a fresh forward of f: gradcheck of an op whose backward
    runs once per forward (as activation checkpointing frees its saved inputs)."""

    @staticmethod
    def forward(ctx, f, *values):
        ctx.f = f
        ctx.save_for_backward(*values)
        return tuple(o.detach() for o in f(*values))

    @staticmethod
    def backward(ctx, *grads):
        values = [v.detach().requires_grad_() for v in ctx.saved_tensors]
        with torch.enable_grad():
            return None, *torch.autograd.grad(ctx.f(*values), values, grads, allow_unused=True)
