"""Ops written the way people write them, each for one rule of the card (docs/ops.md)."""

import sys
import time

import torch
from torch.autograd.function import once_differentiable


def where_relu(x):
    """The textbook ReLU: 0 at NaN (torch.relu keeps NaN)."""
    return torch.where(x > 0, x, 0)


def relu_one_at_zero(x):
    """Wrong: 1 at x = 0."""
    return torch.where(x == 0, torch.ones_like(x), x.clamp_min(0))


def nan_checked_relu(x):
    """Validates its input, as library code does."""
    if torch.isnan(x).any():
        raise ValueError("relu: x has NaN")
    return torch.relu(x)


class HardTanhInPlace(torch.autograd.Function):
    """An in-place clamp to [-1, 1] that marks its input dirty (as in-place quantizers do)."""

    @staticmethod
    def forward(ctx, x):
        ctx.save_for_backward(x.abs() <= 1)
        ctx.mark_dirty(x)
        return x.clamp_(-1, 1)

    @staticmethod
    def backward(ctx, grad):
        (inside,) = ctx.saved_tensors
        return grad * inside


def mse(input, target):
    """A loss with its target positional."""
    return (input - target).square().mean()


def mse_samples():
    g = torch.Generator().manual_seed(0)
    x, y = torch.randn(8, 3, generator=g), torch.randn(8, 3, generator=g)
    return [((x.requires_grad_(), y), {})]


@torch.library.custom_op("opcheck_tests::scale_shift", mutates_args=())
def scale_shift(xs: list[torch.Tensor], scale: float) -> tuple[torch.Tensor, torch.Tensor]:
    """Two outputs from a list argument, as a torch.library op."""
    return xs[0] * scale, xs[1] + scale


@scale_shift.register_fake
def _(xs, scale):
    return torch.empty_like(xs[0]), torch.empty_like(xs[1])


def _backward(ctx, grad_a, grad_b):
    return [grad_a * ctx.scale, grad_b], None


def _setup(ctx, inputs, output):
    ctx.scale = inputs[1]


scale_shift.register_autograd(_backward, setup_context=_setup)


def scale_shift_reference(xs, scale):
    return xs[0] * scale, xs[1] + scale


def scale_shift_samples():
    g = torch.Generator().manual_seed(0)
    a, b = torch.randn(4, 3, generator=g), torch.randn(5, generator=g)
    return [(([a.requires_grad_(), b.requires_grad_()], 2.0), {})]


class LayerNormNoMeanTerm(torch.autograd.Function):
    """A layer norm whose backward forgets the mean's and the variance's terms."""

    @staticmethod
    def forward(ctx, x, normalized_shape, weight, bias, eps=1e-5):
        mean, var = x.mean(-1, keepdim=True), x.var(-1, unbiased=False, keepdim=True)
        rstd = torch.rsqrt(var + eps)
        ctx.save_for_backward(x, mean, rstd, weight)
        return (x - mean) * rstd * weight + bias

    @staticmethod
    def backward(ctx, grad):
        x, mean, rstd, weight = ctx.saved_tensors
        return grad * weight * rstd, None, (grad * (x - mean) * rstd).sum(0), grad.sum(0), None


def linear_2d(x, weight, bias):
    """A linear for 2-D input only (.t() and .mm), as every model here calls it."""
    return x.mm(weight.t()) + bias


class LinearHalfWeightGrad(torch.autograd.Function):
    """Wrong: half the weight's gradient."""

    @staticmethod
    def forward(ctx, x, weight, bias):
        ctx.save_for_backward(x, weight)
        return x @ weight.t() + bias

    @staticmethod
    def backward(ctx, grad):
        x, weight = ctx.saved_tensors
        return grad @ weight, 0.5 * grad.t() @ x, grad.sum(0)


class ReLUOnce(torch.autograd.Function):
    """Right, but once_differentiable: no second derivative."""

    @staticmethod
    def forward(ctx, x):
        ctx.save_for_backward(x)
        return x.clamp_min(0)

    @staticmethod
    @once_differentiable
    def backward(ctx, grad):
        (x,) = ctx.saved_tensors
        return grad * (x > 0)


def exits(x):
    """Ends the process instead of returning."""
    raise SystemExit(3)


def layer_norm_samples():
    g = torch.Generator().manual_seed(0)
    x, weight, bias = (torch.randn(*shape, generator=g).requires_grad_()
                       for shape in ((3, 4), (4,), (4,)))
    return [((x, (4,), weight, bias), {})]


def relu_item(x):
    """Data-dependent Python control flow: no full graph for torch.compile (a graph break)."""
    if x.sum().item() > 1e9:
        return x
    return torch.relu(x)


@torch.library.custom_op("opcheck_tests::relu_no_fake", mutates_args=())
def relu_no_fake(x: torch.Tensor) -> torch.Tensor:
    """A torch.library op without register_fake: torch.compile cannot trace it at all."""
    return torch.relu(x)


relu_no_fake.register_autograd(lambda ctx, g: g * (ctx.saved_tensors[0] > 0),
                               setup_context=lambda ctx, inputs, output:
                               ctx.save_for_backward(inputs[0]))


# Hostile ops: each fails to return in its own way; the card and the app say so in one line,
# exit 2 (the app writes nothing).


def interrupts(x):
    """Raises KeyboardInterrupt, as an op that catches nothing would pass one on."""
    raise KeyboardInterrupt


def loops(x):
    """Never returns."""
    while True:
        pass


def sleeps(x):
    """Waits an hour."""
    time.sleep(3600)
    return x


def sleeps_after_its_first_calls(x, _calls=[]):  # noqa: B006  the calls of this process
    """Returns relu(x) on its first two calls (the card's, each with the first call's limit: the
    shape check, the first sample), waits an hour on the next."""
    _calls.append(1)
    time.sleep(3600 * (len(_calls) > 2))
    return torch.relu(x)


def allocates(x):
    """Asks for far more memory than any machine has (2**45 floats: 128 TiB)."""
    return torch.empty(2**45, dtype=x.dtype, device=x.device)[: x.numel()].view_as(x)


def returns_none(x):
    torch.relu(x)


def returns_int(x):
    return 0


def returns_sum(x):
    """x.sum() where an activation goes: a scalar."""
    return x.sum()


def returns_float64(x):
    """Computes in float64 and forgets to cast back."""
    return torch.relu(x.double())


def returns_one_tuple(x):
    """A forward written as `return y,` (as a Function's forward may): a 1-tuple, no tensor."""
    return (torch.relu(x),)


def slow_relu(x):
    """relu, right, at many times its cost: 200 more additions each way."""
    y = torch.relu(x)
    for _ in range(200):
        y = y + 0.0
    return y


class RaisesInBackward(torch.autograd.Function):
    """A right forward; its backward raises."""

    @staticmethod
    def forward(ctx, x):
        return x.clamp_min(0)

    @staticmethod
    def backward(ctx, grad):
        raise ValueError("backward: not implemented")


class ExitsInBackward(torch.autograd.Function):
    """A right forward; its backward ends the process."""

    @staticmethod
    def forward(ctx, x):
        return x.clamp_min(0)

    @staticmethod
    def backward(ctx, grad):
        sys.exit(1)


# Ops each of which only one row of the card catches.


def relu_off(x):
    """0.5 % off. Against torch.relu with no task to train (`any`), only the float32 tolerance
    (rtol 1e-5) sees it: wrong. In the activation slot it approximates relu, its twin: the mlp
    trains the same, so approximate, a note."""
    return torch.relu(x) * 1.005


class ReLUInFloat32(torch.autograd.Function):
    """ReLU computed in float32 whatever the dtype: exact in float32, so in the training row only
    gradcheck (in float64, against the numerical gradient of the rounded forward) sees it: wrong
    for training (and gradgradcheck for second order)."""

    @staticmethod
    def forward(ctx, x):
        ctx.save_for_backward(x)
        return x.float().clamp_min(0).to(x.dtype)

    @staticmethod
    def backward(ctx, grad):
        (x,) = ctx.saved_tensors
        return (grad.float() * (x.float() > 0)).to(grad.dtype)


class AddOneNoDirty(torch.autograd.Function):
    """The ctx.mark_dirty docstring's example with that line removed: x changed in place (through
    NumPy) unknown to autograd. Its forward is x + 1, its gradient 1: right as values; against
    add_one, wrong for training by what it does to x alone."""

    @staticmethod
    def forward(ctx, x):
        x_npy = x.numpy()  # x_npy shares storage with x
        x_npy += 1
        return x

    @staticmethod
    @once_differentiable
    def backward(ctx, grad_output):
        return grad_output


def add_one(x):
    return x + 1


class LinearDropsBiasTangent(torch.autograd.Function):
    """A linear whose jvp forgets the bias's tangent: wrong for forward AD (lm) alone."""

    generate_vmap_rule = True

    @staticmethod
    def forward(x, weight, bias):
        return x @ weight.t() + bias

    @staticmethod
    def setup_context(ctx, inputs, output):
        ctx.save_for_backward(*inputs[:2])
        ctx.save_for_forward(*inputs[:2])

    @staticmethod
    def backward(ctx, grad):
        x, weight = ctx.saved_tensors
        return grad @ weight, grad.t() @ x, grad.sum(0)

    @staticmethod
    def jvp(ctx, x_t, weight_t, bias_t):
        x, weight = ctx.saved_tensors
        return x_t @ weight.t() + x @ weight_t.t()


class HardSigmoid(torch.autograd.Function):
    """relu6(x + 3) / 6; its jvp takes the slope 1/6 at x = ±3, its backward 0 (as torch's):
    two subgradients at a kink, both right."""

    generate_vmap_rule = True

    @staticmethod
    def forward(x):
        return ((x + 3).clamp(0, 6)) / 6

    @staticmethod
    def setup_context(ctx, inputs, output):
        ctx.save_for_backward(inputs[0])
        ctx.save_for_forward(inputs[0])

    @staticmethod
    def backward(ctx, grad):
        (x,) = ctx.saved_tensors
        return grad * ((x > -3) & (x < 3)) / 6

    @staticmethod
    def jvp(ctx, x_t):
        (x,) = ctx.saved_tensors
        return x_t * ((x >= -3) & (x <= 3)) / 6


def hard_sigmoid_samples():
    """x with its kinks, ±3, exactly."""
    x = torch.tensor([-4.0, -3.0, -1.0, 0.5, 3.0, 4.0], requires_grad=True)
    return [((x,), {})]


class ReLUGradOver100(torch.autograd.Function):
    """A right forward, 1/100 of the gradient: wrong for training, and it trains far slower
    (trains the same: differs)."""

    @staticmethod
    def forward(ctx, x):
        ctx.save_for_backward(x)
        return x.clamp_min(0)

    @staticmethod
    def backward(ctx, grad):
        (x,) = ctx.saved_tensors
        return grad * (x > 0) / 100
