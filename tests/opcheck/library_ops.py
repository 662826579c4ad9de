"""torch.library custom ops for the card's torch.library.opcheck row (`tests.opcheck.library_ops:…`)."""

import torch


@torch.library.custom_op("opcheck_tests::relu", mutates_args=())
def relu(x: torch.Tensor) -> torch.Tensor:
    """max(x, 0) as a torch.library custom op with a fake kernel and an autograd formula."""
    return x.clamp_min(0)


@relu.register_fake
def _(x):
    return torch.empty_like(x)


def _setup(ctx, inputs, output):
    ctx.save_for_backward(output)


def _backward(ctx, grad):
    (out,) = ctx.saved_tensors
    return torch.where(out > 0, grad, 0)


relu.register_autograd(_backward, setup_context=_setup)


@torch.library.custom_op("opcheck_tests::relu_bad_fake", mutates_args=())
def relu_bad_fake(x: torch.Tensor) -> torch.Tensor:
    """The same op, whose fake kernel gets the output's shape wrong."""
    return x.clamp_min(0)


@relu_bad_fake.register_fake
def _(x):
    return x.new_empty(x.shape[1:])


relu_bad_fake.register_autograd(_backward, setup_context=_setup)
