"""The custom ops of the PyTorch tutorials "Learning PyTorch with Examples" (MyReLU,
LegendrePolynomial3) and "Double Backward with Custom Functions" (Sinh, SinhBad), with the
tutorials' code (forward(ctx, ...), no jvp, MyReLU's gradient 1 at x = 0).

Their report cards (from the repository root):

    PYTHONPATH=docs/examples python -m fitting.opcheck activation tutorial_ops:MyReLU
    PYTHONPATH=docs/examples python -m fitting.opcheck legendre_p3 tutorial_ops:LegendrePolynomial3
    PYTHONPATH=docs/examples python -m fitting.opcheck any tutorial_ops:sinh --ref torch:sinh \
        --shape 16
    PYTHONPATH=docs/examples python -m fitting.opcheck legendre_p3 tutorial_ops:SinhBad   # exit 1
    PYTHONPATH=docs/examples python -m fitting.opcheck legendre_p3 tutorial_ops:Sinh      # exit 2
"""

import torch


class MyReLU(torch.autograd.Function):
    """max(x, 0); its backward passes the gradient wherever x >= 0 (x = 0 included)."""

    @staticmethod
    def forward(ctx, input):
        ctx.save_for_backward(input)
        return input.clamp(min=0)

    @staticmethod
    def backward(ctx, grad_output):
        (input,) = ctx.saved_tensors
        grad_input = grad_output.clone()
        grad_input[input < 0] = 0
        return grad_input


class LegendrePolynomial3(torch.autograd.Function):
    """P3(x) = (5x³ − 3x) / 2, and P3'(x) = 1.5 (5x² − 1) in backward."""

    @staticmethod
    def forward(ctx, input):
        ctx.save_for_backward(input)
        return 0.5 * (5 * input**3 - 3 * input)

    @staticmethod
    def backward(ctx, grad_output):
        (input,) = ctx.saved_tensors
        return grad_output * 1.5 * (5 * input**2 - 1)


# From the tutorial "Double Backward with Custom Functions": sinh, which saves intermediate
# results as extra outputs so that a double backward can reach them, and SinhBad, which keeps
# them on ctx instead: its gradient is right, its second derivative is not.


class Sinh(torch.autograd.Function):
    """sinh(x), and exp(x), exp(-x) as outputs too: three outputs, so not a slot's op."""

    @staticmethod
    def forward(ctx, x):
        expx = torch.exp(x)
        expnegx = torch.exp(-x)
        ctx.save_for_backward(expx, expnegx)
        return (expx - expnegx) / 2, expx, expnegx

    @staticmethod
    def backward(ctx, grad_out, _grad_out_exp, _grad_out_negexp):
        expx, expnegx = ctx.saved_tensors
        grad_input = grad_out * (expx + expnegx) / 2
        grad_input += _grad_out_exp * expx
        grad_input -= _grad_out_negexp * expnegx
        return grad_input


def sinh(x):
    """The tutorial's wrapper: Sinh's first output only."""
    return Sinh.apply(x)[0]


class SinhBad(torch.autograd.Function):
    """sinh(x) with exp(x) and exp(-x) kept on ctx: autograd cannot differentiate through them."""

    @staticmethod
    def forward(ctx, x):
        expx = torch.exp(x)
        expnegx = torch.exp(-x)
        ctx.expx = expx
        ctx.expnegx = expnegx
        return (expx - expnegx) / 2

    @staticmethod
    def backward(ctx, grad_out):
        expx = ctx.expx
        expnegx = ctx.expnegx
        grad_input = grad_out * (expx + expnegx) / 2
        return grad_input
