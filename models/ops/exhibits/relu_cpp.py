"""ReLU with C++ kernels: TORCH_LIBRARY ops built by load_inline, autograd added from Python.

`lab_cpp::relu(Tensor x)` and `lab_cpp::relu_backward(Tensor grad, Tensor out)` are defined
with TORCH_LIBRARY and given CPU kernels with TORCH_LIBRARY_IMPL; Python registers their
autograd formulas and fake kernels (for torch.compile and torch.library.opcheck). The build
runs on the first call (20-50 s on 2 cores; later runs reuse torch's extension cache) and needs
a C++ compiler and ninja. CPU only; forward-mode AD gets no tangent (no jvp is registered).
"""

import os
import shutil
import sys

import torch
from torch.utils import cpp_extension

CPP_SOURCE = r"""
#include <ATen/core/Tensor.h>
#include <ATen/Dispatch.h>
#include <ATen/ops/empty_like.h>
#include <torch/library.h>

// torch.relu's values: -0.0 and NaN pass through (x < 0 is false for both).
at::Tensor relu_cpu(const at::Tensor& x) {
  const at::Tensor xc = x.contiguous();
  at::Tensor out = at::empty_like(xc);
  AT_DISPATCH_FLOATING_TYPES_AND2(at::kHalf, at::kBFloat16, xc.scalar_type(), "relu", [&] {
    const scalar_t* in = xc.const_data_ptr<scalar_t>();
    scalar_t* o = out.mutable_data_ptr<scalar_t>();
    for (int64_t i = 0; i < xc.numel(); ++i) o[i] = in[i] < scalar_t(0) ? scalar_t(0) : in[i];
  });
  return out;
}

// torch's threshold_backward(grad, out, 0): the gradient passes where out > 0 or is NaN.
at::Tensor relu_backward_cpu(const at::Tensor& grad, const at::Tensor& out) {
  TORCH_CHECK(grad.sizes() == out.sizes(), "lab_cpp::relu_backward: grad has shape ",
              grad.sizes(), " but out has ", out.sizes());
  const at::Tensor gc = grad.contiguous(), oc = out.contiguous().to(grad.scalar_type());
  at::Tensor gx = at::empty_like(gc);
  AT_DISPATCH_FLOATING_TYPES_AND2(at::kHalf, at::kBFloat16, gc.scalar_type(), "relu_bwd", [&] {
    const scalar_t* g = gc.const_data_ptr<scalar_t>();
    const scalar_t* o = oc.const_data_ptr<scalar_t>();
    scalar_t* r = gx.mutable_data_ptr<scalar_t>();
    for (int64_t i = 0; i < gc.numel(); ++i) r[i] = o[i] <= scalar_t(0) ? scalar_t(0) : g[i];
  });
  return gx;
}

TORCH_LIBRARY(lab_cpp, m) {
  m.def("relu(Tensor x) -> Tensor");
  m.def("relu_backward(Tensor grad, Tensor out) -> Tensor");
}

TORCH_LIBRARY_IMPL(lab_cpp, CPU, m) {
  m.impl("relu", &relu_cpu);
  m.impl("relu_backward", &relu_backward_cpu);
}
"""


def missing_toolchain() -> str | None:
    """What building the kernels lacks, with how to get it; None when nothing is missing."""
    # `pip install ninja` puts it next to the venv's python, on PATH only in an activated venv.
    venv_bin = os.path.dirname(sys.executable)
    if venv_bin not in os.environ["PATH"].split(os.pathsep):
        os.environ["PATH"] += os.pathsep + venv_bin
    compiler = (os.environ.get("CXX") or "c++").split()[0]
    missing = [f"a C++ compiler ({compiler!r} is not on PATH): install g++ or set CXX"
               ] if shutil.which(compiler) is None else []
    if not cpp_extension.is_ninja_available():
        missing.append("ninja: pip install ninja")
    return "; ".join(missing) or None


def _backward(ctx, grad: torch.Tensor) -> torch.Tensor:
    return torch.ops.lab_cpp.relu_backward(grad, ctx.saved_tensors[0])


def _backward_backward(ctx, grad: torch.Tensor) -> tuple[torch.Tensor, None]:
    # relu_backward is linear in grad with the same mask, and a step (0 almost everywhere) in
    # out: torch's own threshold_backward formula, so a double backward is exact.
    return torch.ops.lab_cpp.relu_backward(grad, ctx.saved_tensors[0]), None


def _save(index: int):
    # relu saves its output (out > 0 exactly where x > 0); relu_backward its `out` argument.
    return lambda ctx, inputs, output: ctx.save_for_backward((output, *inputs)[index])


def load() -> None:
    """Compile (or take from torch's cache) and register the lab_cpp ops, once per process."""
    if hasattr(torch.ops.lab_cpp, "relu"):
        return
    missing = missing_toolchain()
    if missing:
        raise RuntimeError(f"relu_cpp: building its C++ kernels needs {missing}")
    # is_python_module=False: the library registers its ops when loaded; there is no module.
    cpp_extension.load_inline("lab_cpp_relu", CPP_SOURCE, extra_cflags=["-O2"],
                              is_python_module=False, no_implicit_headers=True)
    torch.library.register_fake("lab_cpp::relu", lambda x: torch.empty_like(x))
    torch.library.register_fake("lab_cpp::relu_backward", lambda g, out: torch.empty_like(g))
    torch.library.register_autograd("lab_cpp::relu", _backward, setup_context=_save(0))
    torch.library.register_autograd("lab_cpp::relu_backward", _backward_backward,
                                    setup_context=_save(2))


def relu_cpp(x: torch.Tensor) -> torch.Tensor:
    """max(x, 0) elementwise through the C++ op torch.ops.lab_cpp.relu (CPU tensors)."""
    load()
    return torch.ops.lab_cpp.relu(x)
