"""Find the Hydra job dirs under a sweep or runs dir and read their configs and TensorBoard scalars.

A run is a job dir (one holding `.hydra/config.yaml`) with the event files found anywhere under
it; event files outside any job dir make a run of their own directory, with an empty config.
"""

from __future__ import annotations

import json
import struct
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
from omegaconf import OmegaConf
from tensorboard.backend.event_processing.event_accumulator import SCALARS, EventAccumulator
from tensorboard.compat.tensorflow_stub.pywrap_tensorflow import masked_crc32c

EVENT_GLOB = "events.out.tfevents.*"
# Keys that differ between jobs of one sweep without making them different experiments.
VOLATILE_KEYS = frozenset(
    {"hydra", "output_dir", "out_dir", "log_dir", "logdir", "run_dir", "save_dir"}
)


class RunsError(Exception):
    """A runs dir or event file that can't be read; the message says which and what to do."""


@dataclass
class Series:
    """One scalar tag of a run, sorted by step."""

    steps: np.ndarray
    values: np.ndarray
    wall: np.ndarray


@dataclass
class Run:
    """One job: its name (path under the root), config, overrides and scalars by tag."""

    name: str
    path: Path
    config: dict[str, Any]
    overrides: list[str]
    scalars: dict[str, Series] = field(default_factory=dict)

    @property
    def task(self) -> str:
        """The task name: `task.name`, else the `task=` override, else '?'."""
        return _group_name(self.config, self.overrides, "task")

    @property
    def impl(self) -> str:
        """The implementation: `impl` (else the `impl=` override, else '?'), followed by each
        `ops.<op>=` chosen otherwise, e.g. 'custom, ops.conv_bn=builtin'."""
        base = _group_name(self.config, self.overrides, "impl")
        own = [f"ops.{op}={v}" for op, v in self.ops.items() if v != base]
        return ", ".join([base, *own]) if own else base

    @property
    def ops(self) -> dict[str, str]:
        """Each op's choice (`ops.<op>`), an op that follows `impl` given as impl's value."""
        base = _group_name(self.config, self.overrides, "impl")
        ops = self.config.get("ops")
        if not isinstance(ops, dict):
            return {}
        return {op: base if str(v).startswith("${") else str(v) for op, v in ops.items()}

    @property
    def builtin_ops(self) -> int:
        """How many of its ops are the built-in twins (impl itself when the run has no ops)."""
        if not self.ops:
            return int(self.impl == "builtin")
        return sum(v == "builtin" for v in self.ops.values())

    @property
    def optimizer(self) -> str:
        """The optimizer name: `optimizer.name`, else the `optimizer=` override, else '?'."""
        return _group_name(self.config, self.overrides, "optimizer")

    def comparison_key(self) -> str:
        """The config without `impl`, `ops` and volatile keys: equal keys mean comparable runs."""
        if not self.config:
            return f"<no config: {self.name}>"
        cfg = {k: v for k, v in self.config.items() if k not in ("impl", "ops")}
        return json.dumps(_strip_volatile(cfg, str(self.path.resolve())), sort_keys=True)


def _group_name(config: dict[str, Any], overrides: list[str], group: str) -> str:
    value = config.get(group)
    if isinstance(value, dict):
        value = value.get("name")
    if isinstance(value, str | int | float) and not str(value).startswith("${"):
        return str(value)
    for override in overrides:
        key, sep, val = override.lstrip("+~").partition("=")
        if sep and key == group:
            return val
    return "?"


def _strip_volatile(node: Any, job_path: str) -> Any:
    if isinstance(node, dict):
        return {k: _strip_volatile(v, job_path) for k, v in node.items() if k not in VOLATILE_KEYS}
    if isinstance(node, list):
        return [_strip_volatile(v, job_path) for v in node]
    if isinstance(node, str) and job_path in node:
        return "<job dir>"
    return node


def find_event_files(root: Path) -> list[Path]:
    """Every TensorBoard event file under `root`, sorted."""
    return sorted(p for p in root.rglob(EVENT_GLOB) if p.is_file())


def check_event_file(path: Path) -> None:
    """Raise RunsError unless `path` is a whole, uncorrupted TFRecord file of events."""
    # EventAccumulator silently drops a truncated or corrupt tail, so check the framing first.
    data = path.read_bytes()
    hint = "delete it or re-run that job"
    if not data:
        raise RunsError(f"event file {path} is empty; {hint}")
    pos = 0
    while pos < len(data):
        header = data[pos : pos + 12]
        if len(header) < 12:
            raise RunsError(f"event file {path} is truncated at byte {pos}; {hint}")
        (length,) = struct.unpack("<Q", header[:8])
        (header_crc,) = struct.unpack("<I", header[8:])
        if masked_crc32c(header[:8]) != header_crc:
            raise RunsError(f"event file {path} is corrupt (bad record at byte {pos}); {hint}")
        end = pos + 12 + length + 4
        if end > len(data):
            raise RunsError(f"event file {path} is truncated at byte {pos}; {hint}")
        payload = data[pos + 12 : end - 4]
        if masked_crc32c(payload) != struct.unpack("<I", data[end - 4 : end])[0]:
            raise RunsError(f"event file {path} is corrupt (bad record at byte {pos}); {hint}")
        pos = end


def read_scalars(files: list[Path]) -> dict[str, Series]:
    """All scalar tags of `files`, read per directory; a tag in several directories is taken
    from the one with most points."""
    best: dict[str, Series] = {}
    for directory in sorted({path.parent for path in files}):
        # One accumulator per directory reads a resumed run's event files in order and drops
        # the points its second writer's purge_step discarded (logged after the checkpoint).
        acc = EventAccumulator(str(directory), size_guidance={SCALARS: 0})
        acc.Reload()
        for tag in acc.Tags()["scalars"]:
            events = sorted(acc.Scalars(tag), key=lambda e: (e.step, e.wall_time))
            # A step logged twice (a resumed run) keeps its last value.
            by_step = {e.step: e for e in events}
            series = Series(
                steps=np.array(list(by_step), dtype=np.int64),
                values=np.array([e.value for e in by_step.values()], dtype=np.float64),
                wall=np.array([e.wall_time for e in by_step.values()], dtype=np.float64),
            )
            if tag not in best or len(series.steps) > len(best[tag].steps):
                best[tag] = series
    return best


def _job_dir(event_file: Path, root: Path) -> Path:
    for parent in event_file.parents:
        if (parent / ".hydra" / "config.yaml").is_file():
            return parent
        if parent == root:
            break
    return event_file.parent


def _load_yaml(path: Path) -> Any:
    if not path.is_file():
        return None
    try:
        return OmegaConf.to_container(OmegaConf.load(path), resolve=False)
    except Exception as exc:  # any YAML or OmegaConf parse error
        raise RunsError(f"cannot read {path} ({exc}); fix or delete that file") from exc


def read_run(job_dir: Path, event_files: list[Path], root: Path) -> Run:
    """Read one run: its config, overrides and the scalars of its (checked) event files."""
    config = _load_yaml(job_dir / ".hydra" / "config.yaml")
    overrides = _load_yaml(job_dir / ".hydra" / "overrides.yaml")
    for path in event_files:
        check_event_file(path)
    name = job_dir.name if job_dir == root else job_dir.relative_to(root).as_posix()
    return Run(
        name=name,
        path=job_dir,
        config=config if isinstance(config, dict) else {},
        overrides=[str(o) for o in overrides] if isinstance(overrides, list) else [],
        scalars=read_scalars(event_files),
    )


def read_runs(root: Path) -> list[Run]:
    """Read every run under `root` (a sweep dir, a single job dir or a tree of them), by name."""
    if not root.exists():
        raise RunsError(f"{root} does not exist; pass a sweep or run dir written by train.py")
    if not root.is_dir():
        raise RunsError(f"{root} is not a directory; pass a sweep or run dir written by train.py")
    root = root.resolve()
    event_files = find_event_files(root)
    if not event_files:
        raise RunsError(
            f"no TensorBoard event files ({EVENT_GLOB}) under {root}; "
            "pass a sweep or run dir written by train.py"
        )
    by_job: dict[Path, list[Path]] = {}
    for path in event_files:
        by_job.setdefault(_job_dir(path, root), []).append(path)
    runs = [read_run(job, files, root) for job, files in by_job.items()]
    return sorted(runs, key=lambda r: r.name)
