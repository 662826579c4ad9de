"""A user op for the curve-fitting lab: ReLU as a torch.autograd.Function.

Its report card (run from the directory holding this file, or with it on PYTHONPATH):

    PYTHONPATH=docs/examples python -m fitting.opcheck activation my_relu:my_relu
"""

import torch


class MyReLU(torch.autograd.Function):
    """max(x, 0), saving its output for backward.

    The output is what the next layer (a Linear in the mlp, a max-pool in the cnn) saves
    anyway, so inside a model this op costs no extra bytes for backward.
    """

    # torch.func (vmap, jacfwd, jacrev: the lm and newton optimizers) batches the op by
    # running forward/setup_context/backward/jvp on batched tensors; that needs the
    # forward/setup_context split below.
    generate_vmap_rule = True

    @staticmethod
    def forward(x):
        return x.clamp_min(0)

    @staticmethod
    def setup_context(ctx, inputs, output):
        ctx.save_for_backward(output)
        ctx.save_for_forward(output)

    @staticmethod
    def backward(ctx, grad):
        (out,) = ctx.saved_tensors
        # where, not grad * mask: a NaN or inf gradient where x <= 0 gives 0, and at x = NaN
        # the gradient passes, as in F.relu. Built from torch ops, so autograd can
        # differentiate it again (double backward).
        return torch.where(out <= 0, 0, grad)

    @staticmethod
    def jvp(ctx, x_tangent):
        (out,) = ctx.saved_tensors
        return torch.where(out <= 0, 0, x_tangent)


class _MyReLUNoJvp(MyReLU):
    # torch.compile stops its graph at a Function that defines jvp ("Unsupported custom jvp"),
    # and compiled code never asks for one: trace this variant instead.
    jvp = torch.autograd.Function.jvp


def my_relu(x):
    """max(x, 0): the op the app calls, as relu(x)."""
    fn = _MyReLUNoJvp if torch.compiler.is_compiling() else MyReLU
    return fn.apply(x)
