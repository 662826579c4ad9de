"""Input checks shared by the ops: clear errors that name the op and the problem."""

from __future__ import annotations

import torch

IMPLS = ("custom", "builtin")
# float8 types also report is_floating_point(), but aten has no arithmetic kernels for them.
FLOAT_DTYPES = (torch.float16, torch.bfloat16, torch.float32, torch.float64)
_STRIDED = torch.strided


def check_impl(op: str, impl: object, function_ok: bool = False) -> None:
    """Raise ValueError unless `impl` is 'custom' or 'builtin' (or, `function_ok`, a callable
    taking the op's arguments: a layer then runs its op through it)."""
    if function_ok and callable(impl):
        return
    if impl not in IMPLS:
        also = " or a function of the op's arguments" if function_ok else ""
        raise ValueError(f"{op}: impl must be one of {IMPLS}{also}, got {impl!r}")


def impl_name(impl: object) -> str:
    """How a layer's repr names its impl: 'custom', 'builtin' or the function's name."""
    if isinstance(impl, str):
        return repr(impl)
    return getattr(impl, "__qualname__", None) or getattr(impl, "__name__", None) or repr(impl)


def check_float_tensor(op: str, name: str, t: object) -> None:
    """Raise TypeError unless `t` is a dense (strided) floating-point tensor."""
    if not isinstance(t, torch.Tensor):
        raise TypeError(f"{op}: {name} must be a torch.Tensor, got {type(t).__name__}")
    if t.dtype not in FLOAT_DTYPES:
        raise TypeError(
            f"{op}: {name} must have a floating-point dtype (float16, bfloat16, float32, "
            f"float64), got {t.dtype}; convert it first, e.g. {name}.float()"
        )
    # The custom kernels index strided memory; sparse/mkldnn layouts would fail inside aten.
    if t.layout is not _STRIDED:
        raise TypeError(
            f"{op}: {name} must be a dense (strided) tensor, got {t.layout}; "
            f"call {name}.to_dense() first"
        )


def check_same_dtype_device(op: str, ref_name: str, ref: torch.Tensor, **others) -> None:
    """Raise TypeError/ValueError when tensors in `others` differ from `ref` in dtype or device."""
    for name, t in others.items():
        if t is None:
            continue
        if t.dtype != ref.dtype:
            raise TypeError(
                f"{op}: {name} has dtype {t.dtype} but {ref_name} has {ref.dtype}; "
                "cast them to one dtype"
            )
        if t.device != ref.device:
            raise ValueError(
                f"{op}: {name} is on {t.device} but {ref_name} is on {ref.device}; "
                "move them to one device"
            )
