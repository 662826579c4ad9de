"""relu_cpp, the ReLU whose kernels are C++ TORCH_LIBRARY ops: torch.relu's values and
gradients, gradcheck, double backward and torch.library.opcheck (one test: it compiles)."""

import pytest
import torch
from torch.utils import cpp_extension

from models.ops.exhibits import relu_cpp as mod
from tests.ops.helpers import EDGES, INF, NAN

MISSING = mod.missing_toolchain()


@pytest.mark.slow  # the first build takes 10-50 s; later sessions load torch's cached build
@pytest.mark.skipif(MISSING is not None, reason=f"building relu_cpp needs {MISSING}")
def test_relu_cpp_equals_torch_relu_and_passes_gradcheck_and_opcheck():
    for dtype in (torch.float32, torch.bfloat16):
        x = torch.tensor(EDGES + [-2.0, 3.0], dtype=dtype, requires_grad=True)
        grad_out = torch.tensor([1.0, INF, NAN, -2.0] * 2 + [1.0, 2.0, 3.0], dtype=dtype)
        (got, want) = (fn(x) for fn in (mod.relu_cpp, torch.relu))
        torch.testing.assert_close(got, want, rtol=0, atol=0, equal_nan=True)
        torch.testing.assert_close(*(torch.autograd.grad(y, x, grad_out) for y in (got, want)),
                                   rtol=0, atol=0, equal_nan=True)
    x = torch.tensor([-1.5, -0.3, 0.4, 2.0], dtype=torch.float64, requires_grad=True)
    assert torch.autograd.gradcheck(mod.relu_cpp, (x,))
    assert torch.autograd.gradgradcheck(mod.relu_cpp, (x,))
    torch.library.opcheck(torch.ops.lab_cpp.relu.default, (x,))


def test_a_missing_compiler_or_ninja_is_named_with_the_fix(monkeypatch):
    monkeypatch.setenv("CXX", "no-such-cxx")
    monkeypatch.setattr(cpp_extension, "is_ninja_available", lambda: False)
    assert mod.missing_toolchain() == (
        "a C++ compiler ('no-such-cxx' is not on PATH): install g++ or set CXX; "
        "ninja: pip install ninja"
    )
