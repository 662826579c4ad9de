"""Triton kernels as autograd ops (pip install -e ".[triton]"): SiLU for the `activation` slot,
SwiGLU, silu(a)·b, for the `glu` slot. Each is a forward and a backward kernel over a flat
block of elements, in float32 whatever the tensor's dtype (as most Triton kernels are), inside
a torch.autograd.Function. On CUDA they compile; on a CPU they run under Triton's interpreter
(TRITON_INTERPRET=1, which the lab sets before it imports your op on a CPU device)."""

import torch
import triton
import triton.language as tl

BLOCK = 1024  # elements per program: the interpreter runs one NumPy step per block


@triton.jit
def _silu_kernel(x_ptr, dy_ptr, out_ptr, n, BACKWARD: tl.constexpr, BLOCK: tl.constexpr):
    """out = silu(x) = x·σ(x), or with BACKWARD out = dy·silu'(x) = dy·σ(x)·(1 + x·(1 − σ(x)))."""
    i = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    x = tl.load(x_ptr + i, mask=i < n).to(tl.float32)
    sig = tl.sigmoid(x)
    if BACKWARD:
        dy = tl.load(dy_ptr + i, mask=i < n).to(tl.float32)
        out = dy * sig * (1 + x * (1 - sig))
    else:
        out = x * sig
    tl.store(out_ptr + i, out.to(out_ptr.dtype.element_ty), mask=i < n)


@triton.jit
def _swiglu_kernel(a_ptr, b_ptr, dy_ptr, out_ptr, db_ptr, n, BACKWARD: tl.constexpr,
                   BLOCK: tl.constexpr):
    """out = silu(a)·b, or with BACKWARD out = da = dy·b·silu'(a) and db = dy·silu(a)."""
    i = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    a = tl.load(a_ptr + i, mask=i < n).to(tl.float32)
    b = tl.load(b_ptr + i, mask=i < n).to(tl.float32)
    sig = tl.sigmoid(a)
    if BACKWARD:
        dy = tl.load(dy_ptr + i, mask=i < n).to(tl.float32)
        tl.store(db_ptr + i, (dy * a * sig).to(db_ptr.dtype.element_ty), mask=i < n)
        out = dy * b * sig * (1 + a * (1 - sig))
    else:
        out = a * sig * b
    tl.store(out_ptr + i, out.to(out_ptr.dtype.element_ty), mask=i < n)


def _launch(kernel, *tensors: torch.Tensor, backward: bool) -> None:
    """One program per BLOCK elements of the (contiguous) tensors."""
    n = tensors[0].numel()
    kernel[(triton.cdiv(n, BLOCK),)](*tensors, n, BACKWARD=backward, BLOCK=BLOCK)


class TritonSiLU(torch.autograd.Function):
    """silu(x) by a Triton kernel; saves x, its backward kernel recomputes σ(x)."""

    @staticmethod
    def forward(ctx, x: torch.Tensor) -> torch.Tensor:
        x = x.contiguous()
        ctx.save_for_backward(x)
        out = torch.empty_like(x)
        _launch(_silu_kernel, x, x, out, backward=False)  # dy unused: x stands in
        return out

    @staticmethod
    def backward(ctx, dy: torch.Tensor) -> torch.Tensor:
        (x,) = ctx.saved_tensors
        dx = torch.empty_like(x)
        _launch(_silu_kernel, x, dy.contiguous(), dx, backward=True)
        return dx


class TritonSwiGLU(torch.autograd.Function):
    """silu(a)·b by a Triton kernel; saves a and b, one backward kernel writes both gradients."""

    @staticmethod
    def forward(ctx, a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
        a, b = a.contiguous(), b.contiguous()
        ctx.save_for_backward(a, b)
        out = torch.empty_like(a)
        _launch(_swiglu_kernel, a, b, a, out, out, backward=False)  # dy, db unused
        return out

    @staticmethod
    def backward(ctx, dy: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        a, b = ctx.saved_tensors
        da, db = torch.empty_like(a), torch.empty_like(b)
        _launch(_swiglu_kernel, a, b, dy.contiguous(), da, db, backward=True)
        return da, db
