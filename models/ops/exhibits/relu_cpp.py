"""ReLU with C++ kernels: a TORCH_LIBRARY extension built by load_inline, autograd from Python.

The forward and backward kernels are C++ operators `lab_cpp::relu(Tensor x) -> Tensor` and
`lab_cpp::relu_backward(Tensor grad, Tensor out) -> Tensor`, registered with TORCH_LIBRARY
(schemas) and TORCH_LIBRARY_IMPL (CPU kernels). Python adds what C++ leaves out: autograd
(`torch.library.register_autograd`) and fake kernels (`torch.library.register_fake`), which
torch.compile and `torch.library.opcheck` need.

The extension is compiled on the first call of `relu_cpp` (or `load`), not on import: the
first build takes 20-50 s on 2 cores, later runs reuse torch's extension cache
(~/.cache/torch_extensions, or $TORCH_EXTENSIONS_DIR) in a fraction of a second. It needs a
C++ compiler and ninja (and Python's headers on torch < 2.7); `missing_toolchain` says which is
absent.

CPU only: a tensor on CUDA (or any other device) is refused with an error that says so; no
silent copy to the CPU and back.
"""

from __future__ import annotations

import inspect
import os
import shutil
import sys
import sysconfig
import threading

import torch
import torch.autograd.forward_ad as fwAD
from torch.utils import cpp_extension

OP = "relu_cpp"
EXTENSION = "lab_cpp_relu"

CPP_SOURCE = r"""
#include <ATen/Dispatch.h>
#include <ATen/Parallel.h>
#include <ATen/core/Tensor.h>
#include <ATen/ops/empty_like.h>
#include <torch/library.h>

namespace {

// Elements per task of at::parallel_for: torch's own grain size for elementwise kernels.
constexpr int64_t kGrain = 32768;

// torch.relu's values: -0.0 and NaN pass through (x < 0 is false for both).
at::Tensor relu_cpu(const at::Tensor& x) {
  TORCH_CHECK(x.is_floating_point(), "lab_cpp::relu: x must be floating point, got ",
              x.scalar_type());
  const at::Tensor xc = x.contiguous();
  at::Tensor out = at::empty_like(xc);
  AT_DISPATCH_FLOATING_TYPES_AND2(at::kHalf, at::kBFloat16, xc.scalar_type(), "relu", [&] {
    const scalar_t* in = xc.const_data_ptr<scalar_t>();
    scalar_t* o = out.mutable_data_ptr<scalar_t>();
    at::parallel_for(0, xc.numel(), kGrain, [&](int64_t lo, int64_t hi) {
      for (int64_t i = lo; i < hi; ++i) o[i] = in[i] < scalar_t(0) ? scalar_t(0) : in[i];
    });
  });
  return out;
}

// torch's threshold_backward(grad, out, 0): the gradient passes where out > 0 or is NaN.
at::Tensor relu_backward_cpu(const at::Tensor& grad, const at::Tensor& out) {
  TORCH_CHECK(grad.sizes() == out.sizes(), "lab_cpp::relu_backward: grad has shape ",
              grad.sizes(), " but out has ", out.sizes());
  TORCH_CHECK(grad.scalar_type() == out.scalar_type(), "lab_cpp::relu_backward: grad is ",
              grad.scalar_type(), " but out is ", out.scalar_type());
  const at::Tensor gc = grad.contiguous();
  const at::Tensor oc = out.contiguous();
  at::Tensor gx = at::empty_like(gc);
  AT_DISPATCH_FLOATING_TYPES_AND2(at::kHalf, at::kBFloat16, gc.scalar_type(), "relu_bwd", [&] {
    const scalar_t* g = gc.const_data_ptr<scalar_t>();
    const scalar_t* o = oc.const_data_ptr<scalar_t>();
    scalar_t* r = gx.mutable_data_ptr<scalar_t>();
    at::parallel_for(0, gc.numel(), kGrain, [&](int64_t lo, int64_t hi) {
      for (int64_t i = lo; i < hi; ++i) r[i] = o[i] <= scalar_t(0) ? scalar_t(0) : g[i];
    });
  });
  return gx;
}

}  // namespace

TORCH_LIBRARY(lab_cpp, m) {
  m.def("relu(Tensor x) -> Tensor");
  m.def("relu_backward(Tensor grad, Tensor out) -> Tensor");
}

TORCH_LIBRARY_IMPL(lab_cpp, CPU, m) {
  m.impl("relu", &relu_cpu);
  m.impl("relu_backward", &relu_backward_cpu);
}
"""

# Without torch/extension.h (pybind11, Python.h, all of ATen), which load_inline adds unless
# told not to (torch >= 2.7), the build takes about a third of the time and needs no Python.h.
_LEAN = "no_implicit_headers" in inspect.signature(cpp_extension.load_inline).parameters
_FLAGS = {"no_implicit_headers": True} if _LEAN else {}
_lock = threading.Lock()
_loaded = False


def _compiler() -> str:
    # torch's build runs $CXX (default c++); CXX may carry a wrapper, e.g. "ccache g++".
    return (os.environ.get("CXX") or "c++").split()[0]


def _put_venv_ninja_on_path() -> None:
    # `pip install ninja` puts the binary next to the venv's python, which is on PATH only
    # when the venv is activated; torch's build looks ninja up on PATH.
    scripts = os.path.dirname(sys.executable)
    if shutil.which("ninja") is None and shutil.which("ninja", path=scripts):
        os.environ["PATH"] = scripts + os.pathsep + os.environ.get("PATH", "")


def missing_toolchain() -> str | None:
    """What building the C++ kernels lacks, with how to get it; None when nothing is missing."""
    _put_venv_ninja_on_path()
    missing = []
    if shutil.which(_compiler()) is None:
        missing.append(
            f"a C++ compiler ({_compiler()!r} is not on PATH): install g++ or clang "
            "(Debian/Ubuntu: apt-get install g++) or set CXX to one"
        )
    if not cpp_extension.is_ninja_available():
        missing.append(
            "ninja (torch builds extensions with it): pip install ninja, or apt-get install "
            "ninja-build"
        )
    if not _LEAN and not os.path.isfile(os.path.join(sysconfig.get_paths()["include"], "Python.h")):
        missing.append("Python's headers (Python.h): apt-get install python3-dev")
    return "; ".join(missing) or None


def load() -> None:
    """Compile (or take from torch's cache) and register the lab_cpp ops; later calls are free."""
    global _loaded
    with _lock:
        if _loaded:
            return
        missing = missing_toolchain()
        if missing:
            raise RuntimeError(f"{OP}: building its C++ kernels needs {missing}")
        # is_python_module=False: the .so registers its ops when loaded; there is no module.
        cpp_extension.load_inline(
            EXTENSION, CPP_SOURCE, extra_cflags=["-O2"], is_python_module=False, **_FLAGS
        )
        _register()
        _loaded = True


def _relu_fake(x: torch.Tensor) -> torch.Tensor:
    return torch.empty_like(x, memory_format=torch.contiguous_format)


def _relu_backward_fake(grad: torch.Tensor, out: torch.Tensor) -> torch.Tensor:
    return torch.empty_like(grad, memory_format=torch.contiguous_format)


def _setup_context(ctx, inputs, output) -> None:
    # The output, not the input: out > 0 exactly where x > 0, and a later in-place op on x
    # cannot corrupt the mask.
    ctx.save_for_backward(output)


def _backward(ctx, grad: torch.Tensor) -> torch.Tensor:
    (out,) = ctx.saved_tensors
    return torch.ops.lab_cpp.relu_backward(grad, out)


def _setup_context_backward(ctx, inputs, output) -> None:
    ctx.save_for_backward(inputs[1])


def _backward_backward(ctx, grad: torch.Tensor) -> tuple[torch.Tensor, None]:
    # relu_backward is linear in grad with the same mask; in out it is a step, 0 almost
    # everywhere (torch's own threshold_backward formula): so a double backward is exact.
    (out,) = ctx.saved_tensors
    return torch.ops.lab_cpp.relu_backward(grad, out), None


def _batch_first(t: torch.Tensor, dim: int | None, size: int) -> torch.Tensor:
    return t.expand(size, *t.shape) if dim is None else t.movedim(dim, 0)


def _relu_vmap(info, in_dims, x: torch.Tensor) -> tuple[torch.Tensor, int | None]:
    # Elementwise: the batched kernel is the kernel; without a rule torch.func.vmap runs the
    # op once per batch element, with a warning.
    return torch.ops.lab_cpp.relu(x), in_dims[0]


def _relu_backward_vmap(info, in_dims, grad: torch.Tensor, out: torch.Tensor):
    grad_dim, out_dim = in_dims
    if grad_dim == out_dim:
        return torch.ops.lab_cpp.relu_backward(grad, out), grad_dim
    grad, out = (_batch_first(t, d, info.batch_size) for t, d in ((grad, grad_dim), (out, out_dim)))
    return torch.ops.lab_cpp.relu_backward(grad, out), 0


def _register() -> None:
    torch.library.register_fake("lab_cpp::relu", _relu_fake)
    torch.library.register_fake("lab_cpp::relu_backward", _relu_backward_fake)
    torch.library.register_autograd("lab_cpp::relu", _backward, setup_context=_setup_context)
    torch.library.register_autograd(
        "lab_cpp::relu_backward", _backward_backward, setup_context=_setup_context_backward
    )
    torch.library.register_vmap("lab_cpp::relu", _relu_vmap)
    torch.library.register_vmap("lab_cpp::relu_backward", _relu_backward_vmap)


def relu_cpp(x: torch.Tensor) -> torch.Tensor:
    """max(x, 0) elementwise through the C++ op torch.ops.lab_cpp.relu (CPU tensors only)."""
    if x.device.type != "cpu":
        raise ValueError(
            f"{OP}: its C++ kernels are CPU only, got a tensor on {x.device}; move it with "
            "x.cpu(), or use torch.relu (ops.activation=builtin)"
        )
    # A torch.library op has no forward-AD formula: torch would drop the tangent (a zero
    # jvp), so it is refused here with the fix.
    if not torch.compiler.is_compiling() and fwAD.unpack_dual(x).tangent is not None:
        raise TypeError(
            f"{OP}: forward-mode AD (torch.func.jvp, forward_ad) is not supported by this "
            "torch.library op; use torch.relu or the app's relu, which support it"
        )
    if not _loaded:
        load()
    return torch.ops.lab_cpp.relu(x)
