"""Resuming a run: which config it continues with, which overrides it takes, and which
checkpoints it refuses (another run's, a finished or diverged one)."""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

from omegaconf import DictConfig, OmegaConf

from fitting.config import typed_config
from fitting.train.checkpoint import load, plain_config
from fitting.train.checkpoint_errors import check_config
from fitting.train.validate import ConfigError, resume_problem

# Keys a resumed run may change: how long it runs, what it logs, how it saves, threads, what a
# non-finite loss does and whether it is profiled. Anything else (ops.* too) would make it a
# different run.
RESUMABLE_KEYS = ("steps", "log", "ckpt", "threads", "on_nonfinite", "profile", "resume")


def differences(now: dict[str, Any], saved: dict[str, Any]) -> list[str]:
    """'key: X in the checkpoint, Y here' for each run-defining key whose values differ (of a
    task or optimizer of another name, only the name)."""
    a, b = _flatten(saved), _flatten(now)
    keys = sorted(k for k in a.keys() | b.keys() if k.split(".")[0] not in RESUMABLE_KEYS)
    differ = [k for k in keys if not _same(a.get(k, "<absent>"), b.get(k, "<absent>"))]
    renamed = {k.split(".")[0] for k in differ if k.endswith(".name") and k.count(".") == 1}
    return [
        f"{k}: {a.get(k, '<absent>')!r} in the checkpoint, {b.get(k, '<absent>')!r} here"
        for k in differ
        if k.split(".")[0] not in renamed or (k.count(".") == 1 and k.endswith(".name"))
    ]


def check_resumable(payload: dict[str, Any], cfg: DictConfig, run_dir: Path) -> None:
    """Refuse (ConfigError) a checkpoint of another run, of a finished or diverged one, or one
    already at or past `cfg.steps`."""
    diff = differences(plain_config(cfg), payload["config"])
    if diff:
        raise ConfigError(
            f"resume={run_dir}: the checkpoint is of a different run ({'; '.join(diff)}); "
            f"resume it with its own config (python train.py resume={run_dir}, plus steps= "
            "to extend it) or start a new run without resume="
        )
    status, step = payload["status"], payload["step"]
    if status in ("diverged", "converged"):
        what = "its loss became non-finite" if status == "diverged" else "it converged"
        raise ConfigError(
            f"resume={run_dir}: nothing to resume, the run stopped because {what} after "
            f"{step} steps; start a new run instead"
        )
    if step >= cfg.steps:
        raise ConfigError(
            f"resume={run_dir}: the run already did {step} steps; give steps= more than {step} "
            f"to continue it (got steps={cfg.steps})"
        )


def resume_config(cfg: DictConfig, overrides: list[str], choices: dict[str, Any]) -> DictConfig:
    """The config to resume with: the checkpoint's, typed as a composed one, with `resume` set
    and the command line's `overrides` of RESUMABLE_KEYS applied (from `cfg`, Hydra's
    composition of them). Any other override must agree with the checkpoint: ConfigError names
    those that do not.

    `choices` is Hydra's runtime.choices: `task=mlp` compares the task's name, not its
    defaults, with the checkpoint's."""
    from hydra.core.override_parser.overrides_parser import OverridesParser

    problem = resume_problem(cfg.resume)
    if problem:
        raise ConfigError(problem)
    run_dir = Path(cfg.resume).expanduser().resolve()
    payload = load(run_dir)
    saved = payload["config"]
    check_config(saved, payload.path)
    out, given = typed_config(saved), plain_config(cfg)
    differ = []
    for override in OverridesParser.create().parse_overrides(overrides):
        key = override.key_or_group
        if key.split(".")[0] in RESUMABLE_KEYS:
            if key != "resume":
                OmegaConf.update(out, key, OmegaConf.select(cfg, key), merge=False)
            continue
        if key in choices and OmegaConf.select(cfg, f"{key}.name") is None:
            # A preset group (+experiment=): it may change keys this comparison does not see.
            differ.append(f"{override.input_line} (a preset)")
            continue
        # task=, optimizer=: the run's own, whatever its other settings.
        path = f"{key}.name" if key in choices else key
        now, was = _get(given, path), _get(saved, path)
        if not _same(now, was):
            differ.append(f"{key}={now!r} (the run has {was!r})")
    if differ:
        raise ConfigError(
            f"resume={run_dir} continues that run with its own config; these overrides change "
            f"it: {', '.join(differ)}. Only {', '.join(RESUMABLE_KEYS[:-1])} may be given"
        )
    out.resume = str(run_dir)
    return out


def _get(plain: dict[str, Any], key: str) -> Any:
    """The value at the dotted `key` of nested dicts, None where there is none."""
    node: Any = plain
    for part in key.split("."):
        node = node.get(part) if isinstance(node, dict) else None
    return node


def _flatten(node: Any, prefix: str = "") -> dict[str, Any]:
    """{'a.b': value} of the leaves of nested dicts (lists stay values)."""
    if not isinstance(node, dict):
        return {prefix: node}
    out: dict[str, Any] = {}
    for key, value in node.items():
        out.update(_flatten(value, f"{prefix}.{key}" if prefix else str(key)))
    return out


def _same(a: Any, b: Any) -> bool:
    """Equal config values (nan equals nan: it is the same setting)."""
    if isinstance(a, float) and isinstance(b, float) and math.isnan(a) and math.isnan(b):
        return True
    return a == b
