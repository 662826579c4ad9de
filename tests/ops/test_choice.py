"""resolve_op / check_op: custom, builtin or a user's <module>:<name>, and one clear line when a
user op cannot run as the op."""

import hashlib
import itertools
import sys
import textwrap

import pytest
import torch
import torch.nn.functional as F

from models.ops import fused_conv_bn2d, legendre_p3, linear, relu
from models.ops.choice import OPS, OpSpecError, check_op, resolve_op

_names = itertools.count()


@pytest.fixture
def user_module(tmp_path, monkeypatch):
    """Write a module into a fresh current directory; returns its (unique) name and path."""
    monkeypatch.chdir(tmp_path)

    def write(source: str) -> tuple[str, str]:
        name = f"user_ops_{next(_names)}"
        path = tmp_path / f"{name}.py"
        path.write_text("import torch\n\n" + textwrap.dedent(source))
        return name, str(path)

    return write


def test_every_op_has_custom_builtin_and_inputs():
    assert set(OPS) == {"activation", "linear", "legendre_p3", "conv_bn"}
    assert OPS["activation"].custom is relu and OPS["linear"].custom is linear
    assert OPS["legendre_p3"].custom is legendre_p3 and OPS["conv_bn"].custom is fused_conv_bn2d
    assert OPS["linear"].builtin is F.linear
    for op, entry in OPS.items():
        for spec in ("custom", "builtin"):
            resolved = resolve_op(op, spec)
            assert resolved.fn is getattr(entry, spec) and resolved.source is None
            check_op(op, resolved.fn, spec)
            check_op(op, resolved.fn, spec, dtype=torch.float64)


def test_function_subclass_is_called_through_apply(user_module):
    name, path = user_module(
        """
        class MyReLU(torch.autograd.Function):
            @staticmethod
            def forward(ctx, x):
                ctx.save_for_backward(x)
                return x.clamp_min(0)

            @staticmethod
            def backward(ctx, grad):
                (x,) = ctx.saved_tensors
                return grad * (x > 0)
        """
    )
    resolved = resolve_op("activation", f"{name}:MyReLU")
    assert resolved.fn.__name__ == "apply" and resolved.fn.__self__.__name__ == "MyReLU"
    check_op("activation", resolved.fn, resolved.spec)
    x = torch.tensor([-1.0, 2.0])
    assert torch.equal(resolved.fn(x), torch.relu(x))
    assert resolved.key == f"ops.activation={name}:MyReLU"
    assert resolved.source == path
    with open(path, "rb") as f:
        assert resolved.sha256 == hashlib.sha256(f.read()).hexdigest()


def test_plain_function_is_called_directly(user_module):
    name, path = user_module(
        """
        def my_linear(x, weight, bias):
            return x @ weight.T + bias
        """
    )
    resolved = resolve_op("linear", f"{name}:my_linear")
    assert resolved.fn.__name__ == "my_linear" and resolved.source == path
    check_op("linear", resolved.fn, resolved.spec)


def test_dotted_name_inside_the_module(user_module):
    name, _ = user_module(
        """
        class Ops:
            p3 = staticmethod(lambda x: 0.5 * (5 * x**3 - 3 * x))
        """
    )
    check_op("legendre_p3", resolve_op("legendre_p3", f"{name}:Ops.p3").fn)


def _error(op: str, spec: str, call: bool = False) -> str:
    with pytest.raises(OpSpecError) as info:
        resolved = resolve_op(op, spec)
        if call:
            check_op(op, resolved.fn, spec)
    message = str(info.value)
    assert "\n" not in message
    return message


def test_bad_spec_format():
    assert _error("activation", "cutsom") == (
        "ops.activation=cutsom: expected custom, builtin or <module>:<name>, e.g. ops.activation=my_ops:my_activation"
    )
    assert _error("activation", "mod:").startswith("ops.activation=mod:: expected custom, builtin")


def test_unknown_op():
    assert _error("rleu", "custom") == (
        "unknown op 'rleu'; choose one of ['activation', 'conv_bn', 'legendre_p3', 'linear']"
    )


def test_module_not_found(user_module):
    user_module("")  # chdir into an empty-ish directory
    message = _error("activation", "no_such_module_xyz:f")
    assert message.startswith(
        "ops.activation=no_such_module_xyz:f: no module named 'no_such_module_xyz' in the current "
        "directory ("
    )
    assert message.endswith(") or on PYTHONPATH")


def test_module_that_does_not_import(user_module):
    syntax, _ = user_module("def f(x:\n    return x\n")
    assert _error("activation", f"{syntax}:f").startswith(
        f"ops.activation={syntax}:f: importing '{syntax}' failed: SyntaxError: "
    )
    raising, _ = user_module("raise RuntimeError('no GPU here')\n")
    assert _error("activation", f"{raising}:f") == (
        f"ops.activation={raising}:f: importing '{raising}' failed: RuntimeError: no GPU here"
    )
    missing_dep, _ = user_module("import not_installed_dep_xyz\n")
    assert _error("activation", f"{missing_dep}:f") == (
        f"ops.activation={missing_dep}:f: importing '{missing_dep}' failed: ModuleNotFoundError: "
        "No module named 'not_installed_dep_xyz'"
    )


def test_missing_name(user_module):
    name, path = user_module("def my_relu(x):\n    return x.clamp_min(0)\n")
    assert _error("activation", f"{name}:myrelu") == (
        f"ops.activation={name}:myrelu: module '{name}' ({path}) has no 'myrelu'"
    )


def test_not_callable(user_module):
    name, _ = user_module("my_relu = 3\n")
    assert _error("activation", f"{name}:my_relu") == (
        f"ops.activation={name}:my_relu: 'my_relu' is a int, not callable; name a function or a "
        "torch.autograd.Function subclass"
    )


def test_wrong_signature(user_module):
    name, _ = user_module("def my_linear(x, weight):\n    return x @ weight.T\n")
    assert _error("linear", f"{name}:my_linear", call=True) == (
        f"ops.linear={name}:my_linear: wrong signature: calling it as linear(x, weight, bias) "
        "raised TypeError: my_linear() takes 2 positional arguments but 3 were given"
    )


def test_wrong_output_shape(user_module):
    name, _ = user_module("def my_relu(x):\n    return x.clamp_min(0).sum(0)\n")
    assert _error("activation", f"{name}:my_relu", call=True) == (
        f"ops.activation={name}:my_relu: wrong output on a reference input: shape (8,) torch.float32, "
        "expected (4, 8) "
        "torch.float32 (the builtin's on the same input)"
    )


def test_not_a_tensor_or_not_differentiable_or_failing(user_module):
    name, _ = user_module(
        """
        import numpy

        def pair(x):
            return x, x

        def detached(x):
            return torch.from_numpy(numpy.maximum(x.detach().numpy(), 0))

        def raises(x):
            raise ValueError("only 1-D")

        class BadGrad(torch.autograd.Function):
            @staticmethod
            def forward(ctx, x):
                return x.clamp_min(0)

            @staticmethod
            def backward(ctx, grad):
                return grad.sum()[None]
        """
    )
    assert _error("activation", f"{name}:pair", call=True) == (
        f"ops.activation={name}:pair: returned tuple, expected one tensor of shape (4, 8)"
    )
    assert _error("activation", f"{name}:detached", call=True).startswith(
        f"ops.activation={name}:detached: its output does not require grad for inputs that do"
    )
    assert _error("activation", f"{name}:raises", call=True) == (
        f"ops.activation={name}:raises: activation(x) on a reference input raised ValueError: only 1-D"
    )
    assert _error("activation", f"{name}:BadGrad", call=True).startswith(
        f"ops.activation={name}:BadGrad: backward on a reference input raised RuntimeError: "
        "Function BadGradBackward returned an invalid gradient at index 0"
    )


def test_import_leaves_sys_path_as_it_was(user_module):
    name, _ = user_module("def f(x):\n    return x\n")
    before = list(sys.path)
    resolve_op("activation", f"{name}:f")
    assert sys.path == before


def test_extra_arguments_are_bound_as_literals():
    resolved = resolve_op("activation", "torch.nn.functional:leaky_relu(negative_slope=0.1)")
    assert resolved.key == "ops.activation=torch.nn.functional:leaky_relu(negative_slope=0.1)"
    x = torch.tensor([-1.0, 2.0])
    assert torch.equal(resolved.fn(x), F.leaky_relu(x, negative_slope=0.1))
    check_op("activation", resolved.fn, resolved.spec)
    both = resolve_op("activation", "torch:clamp(min=-0.5, max=None)")
    assert torch.equal(both.fn(x), torch.clamp(x, min=-0.5))


@pytest.mark.parametrize(("args", "says"), [
    ("(negative_slope=)", "malformed arguments '(negative_slope=)': expected (name=value, ...) "
                          "with Python literals as values, e.g. (negative_slope=0.1)"),
    ("(0.1)", "malformed arguments '(0.1)': expected (name=value, ...)"),
    ("(negative_slope=0.1", "malformed arguments '(negative_slope=0.1': expected"),
    ("(negative_slope=slope)", "argument negative_slope=slope is not a Python literal: "
                               "expected (name=value, ...)"),
])  # fmt: skip
def test_malformed_extra_arguments_are_one_line(args, says):
    spec = f"torch.nn.functional:leaky_relu{args}"
    assert _error("activation", spec).startswith(f"ops.activation={spec}: {says}")


def test_a_partial_built_by_hydra_passes_the_pre_check():
    import functools

    check_op("activation", functools.partial(F.leaky_relu, negative_slope=0.1), "hydra")


def test_a_user_file_named_like_the_labs_package_is_named(user_module, tmp_path):
    user_module("")
    (tmp_path / "models.py").write_text("def my_relu(x):\n    return x.clamp_min(0)\n")
    message = _error("activation", "models:my_relu")
    assert message.startswith(
        f"ops.activation=models:my_relu: your file {tmp_path / 'models.py'} has the name of the "
        "already imported package 'models' ("
    )
    assert message.endswith("which is used instead; rename your file (e.g. my_models.py) and "
                            "name the op by the new module")


def test_the_pre_check_calls_the_op_as_the_models_do():
    bad = "tests.opcheck.wrong_ops:"
    assert _error("linear", bad + "LinearNoWeightGrad", call=True) == (
        f"ops.linear={bad}LinearNoWeightGrad: its backward returns no gradient for weight, so "
        "weight would never train"
    )
    assert _error("activation", bad + "ReLUInPlace", call=True) == (
        f"ops.activation={bad}ReLUInPlace: modifies its input x in place; call "
        "ctx.mark_dirty(x) or work on a copy"
    )
    assert _error("conv_bn", bad + "conv_bn_ints_only", call=True).startswith(
        f"ops.conv_bn={bad}conv_bn_ints_only: conv_bn(x, weight, bn_weight, bn_bias, "
        "running_mean, running_var, training, momentum, eps, stride, padding, dilation, groups) "
        "on a reference input raised TypeError: "
    )
    assert _error("linear", bad + "linear_2d_only", call=True).startswith(
        f"ops.linear={bad}linear_2d_only: linear(x, weight, bias) on N-D input (2, 3, 8) raised "
    )


def test_the_pre_check_refuses_an_op_lacking_what_the_optimizer_needs(monkeypatch):
    monkeypatch.syspath_prepend("docs/examples")
    spec = "tutorial_ops:LegendrePolynomial3"
    fn = resolve_op("legendre_p3", spec).fn
    check_op("legendre_p3", fn, spec, needs=("double_backward",))
    with pytest.raises(OpSpecError) as info:
        check_op("legendre_p3", fn, spec, needs=("forward_ad",))
    assert str(info.value) == (
        f"ops.legendre_p3={spec}: optimizer=lm needs forward-mode AD (jvp), which this op does not "
        "support (no jvp: the Function defines no jvp staticmethod); use optimizer=lbfgs or gd, "
        "or add a jvp staticmethod"
    )
    once = "tests.opcheck.bad_ops:ReLUOnce"
    with pytest.raises(OpSpecError) as info:
        check_op("activation", resolve_op("activation", once).fn, once, needs=("double_backward",))
    assert str(info.value) == (
        f"ops.activation={once}: optimizer=newton needs double backward (the Hessian), which this "
        "op does not support (once_differentiable: its backward is not differentiable); use "
        "optimizer=lbfgs or gd, or write its backward with differentiable torch ops"
    )
    lib = "tests.opcheck.library_ops:relu"
    with pytest.raises(OpSpecError, match=r"\(torch.library op: torch drops the tangent"):
        check_op("activation", resolve_op("activation", lib).fn, lib, needs=("forward_ad",))
    check_op("legendre_p3", legendre_p3, needs=("double_backward", "forward_ad"))


def test_an_op_that_exits_or_hangs_is_refused(monkeypatch):
    import models.ops.precheck as precheck

    bad = "tests.opcheck.wrong_ops:"
    assert _error("activation", bad + "exits", call=True) == (
        f"ops.activation={bad}exits: called sys.exit(3); an op must return a tensor or raise"
    )
    monkeypatch.setattr(precheck, "CHECK_TIMEOUT", 0.5)
    assert _error("activation", bad + "hangs", call=True) == (
        f"ops.activation={bad}hangs: did not return within 0.5 s (an endless loop, or a deadlock?)"
    )
