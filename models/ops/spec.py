"""Turning a spec `<module>:<name>` or `<module>:<name>(kw=value, ...)` into a callable.

The module is imported from the current directory or PYTHONPATH; the name is a
`torch.autograd.Function` subclass (called through `.apply`) or any callable; the keyword
arguments, Python literals, are bound with functools.partial.
"""

from __future__ import annotations

import ast
import functools
import importlib
import os
import sys
from collections.abc import Callable
from typing import Any

import torch

SPEC_HELP = "custom, builtin or <module>:<name>"


class OpSpecError(ValueError):
    """A spec that cannot run as its op; the message is one line naming the key."""


def one_line(err: BaseException) -> str:
    """`Type: message` on one line."""
    text = " ".join(str(err).split())
    return f"{type(err).__name__}: {text}" if text else type(err).__name__


def split_spec(key: str, spec: str, example: str) -> tuple[str, str, dict[str, Any]]:
    """(module, name, keyword arguments) of `<module>:<name>[(kw=value, ...)]`."""
    head, paren, rest = str(spec).partition("(")
    module_name, sep, name = head.partition(":")
    if not (sep and module_name and name) or ":" in name:
        raise OpSpecError(f"{key}: expected {SPEC_HELP}, e.g. {example}")
    kwargs: dict[str, Any] = {}
    if paren:
        kwargs = _literal_kwargs(key, "(" + rest)
    return module_name.strip(), name.strip(), kwargs


def _literal_kwargs(key: str, text: str) -> dict[str, Any]:
    """The keyword arguments of `(kw=value, ...)`, each value a Python literal."""
    usage = "expected (name=value, ...) with Python literals as values, e.g. (negative_slope=0.1)"
    try:
        call = ast.parse("f" + text, mode="eval").body
    except SyntaxError:
        raise OpSpecError(f"{key}: malformed arguments {text!r}: {usage}") from None
    if not isinstance(call, ast.Call) or call.args or any(k.arg is None for k in call.keywords):
        raise OpSpecError(f"{key}: malformed arguments {text!r}: {usage}")
    kwargs = {}
    for kw in call.keywords:
        try:
            kwargs[kw.arg] = ast.literal_eval(kw.value)
        except ValueError:
            value = ast.get_source_segment("f" + text, kw.value)
            raise OpSpecError(
                f"{key}: argument {kw.arg}={value} is not a Python literal: {usage}"
            ) from None
    return kwargs


def load_callable(key: str, module_name: str, name: str, kwargs: dict[str, Any]):
    """(callable, the object named, its module) for `module_name:name`, kwargs bound."""
    module = import_user_module(key, module_name)
    obj = module
    for part in name.split("."):
        if not hasattr(obj, part):
            where = getattr(module, "__file__", module_name)
            raise OpSpecError(f"{key}: module {module_name!r} ({where}) has no {name!r}")
        obj = getattr(obj, part)
    if isinstance(obj, type) and issubclass(obj, torch.autograd.Function):
        fn: Callable[..., torch.Tensor] = obj.apply
    elif callable(obj):
        fn = obj
    else:
        raise OpSpecError(
            f"{key}: {name!r} is a {type(obj).__name__}, not callable; name a function or a "
            "torch.autograd.Function subclass"
        )
    if kwargs:
        fn = functools.partial(fn, **kwargs)
    return fn, obj, module


def _shadowed(module_name: str, cwd: str) -> str | None:
    """The user's file in `cwd` that `module_name`'s already imported package hides, if any."""
    top = module_name.split(".")[0]
    loaded = sys.modules.get(top)
    candidates = [os.path.join(cwd, f"{top}.py"), os.path.join(cwd, top, "__init__.py")]
    mine = next((p for p in candidates if os.path.isfile(p)), None)
    loaded_file = getattr(loaded, "__file__", None)
    if loaded is None or mine is None or loaded_file is None:
        return None
    return None if os.path.samefile(mine, loaded_file) else mine


def import_user_module(key: str, module_name: str):
    """Import `module_name` with the current directory on sys.path (train.py's sys.path[0] is
    the script's directory, not the directory the user runs from)."""
    cwd = os.getcwd()
    shadowed = _shadowed(module_name, cwd)
    if shadowed:
        top = module_name.split(".")[0]
        raise OpSpecError(
            f"{key}: your file {shadowed} has the name of the already imported package {top!r} "
            f"({sys.modules[top].__file__}), which is used instead; rename your file (e.g. "
            f"my_{top}.py) and name the op by the new module"
        )
    added = cwd not in sys.path
    if added:
        sys.path.insert(0, cwd)
    try:
        return importlib.import_module(module_name)
    except ModuleNotFoundError as err:
        missing = err.name or ""
        if missing and (module_name == missing or module_name.startswith(missing + ".")):
            raise OpSpecError(
                f"{key}: no module named {missing!r} in the current directory ({cwd}) or on "
                "PYTHONPATH"
            ) from None
        raise OpSpecError(f"{key}: importing {module_name!r} failed: {one_line(err)}") from None
    except Exception as err:  # a SyntaxError, or whatever the module raises at import
        raise OpSpecError(f"{key}: importing {module_name!r} failed: {one_line(err)}") from None
    except SystemExit as err:
        raise OpSpecError(
            f"{key}: importing {module_name!r} called sys.exit({err.code!r})"
        ) from None
    finally:
        if added:
            sys.path.remove(cwd)
