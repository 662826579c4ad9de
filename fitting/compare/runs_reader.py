"""Find the Hydra job dirs under a sweep or runs dir and read their configs and TensorBoard scalars.

A run is a job dir (one holding `.hydra/config.yaml`) with the event files found anywhere under
it; event files outside any job dir make a run of their own directory, with an empty config.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from fitting.compare.events import EventFileError, Series, read_event_dir
from fitting.compare.events import check_event_file as _check_framing

EVENT_GLOB = "events.out.tfevents.*"
# Keys that differ between jobs of one sweep without making them different experiments.
VOLATILE_KEYS = frozenset(
    {"hydra", "output_dir", "out_dir", "log_dir", "logdir", "run_dir", "save_dir"}
)
# Keys that make runs of one experiment repeated, drawn as one group in the figure.
REPEAT_KEYS = frozenset({"seed"})
JOB_NUMBER = re.compile(r"^(\d+)_")


class RunsError(Exception):
    """A runs dir or event file that can't be read; the message says which and what to do."""


@dataclass
class Run:
    """One job: its name (path under the root), config, overrides and scalars by tag."""

    name: str
    path: Path
    config: dict[str, Any]
    overrides: list[str]
    scalars: dict[str, Series] = field(default_factory=dict)
    finished: bool = False  # the run wrote its HParams session end: completed or converged

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
        return {op: base if str(v).startswith("${") else op_label(v) for op, v in ops.items()}

    @property
    def choices(self) -> dict[str, str]:
        """`impl` and each op's choice: what may differ between the runs of a pair."""
        return {"impl": _group_name(self.config, self.overrides, "impl"), **self.ops}

    @property
    def torch_choices(self) -> set[str]:
        """The op slots whose choice is a torch function (`torch.…:name` or a `_target_`)."""
        ops = self.config.get("ops")
        if not isinstance(ops, dict):
            return set()
        targets = {op: v.get("_target_", "") if isinstance(v, dict) else v for op, v in ops.items()}
        return {op for op, t in targets.items() if str(t).startswith("torch.")}

    @property
    def job_number(self) -> int | None:
        """The sweep's job number (the `<n>_` its dir name starts with), if any."""
        match = JOB_NUMBER.match(self.path.name)
        return int(match.group(1)) if match else None

    @property
    def optimizer(self) -> str:
        """The optimizer name: `optimizer.name`, else the `optimizer=` override, else '?'."""
        return _group_name(self.config, self.overrides, "optimizer")

    def comparison_key(self, ignore: frozenset[str] = frozenset()) -> str:
        """The config without `impl`, `ops`, volatile keys and `ignore`: equal keys mean runs
        that differ only in their op choices (and `ignore`)."""
        if not self.config:
            return f"<no config: {self.name}>"
        cfg = {k: v for k, v in self.config.items() if k not in {"impl", "ops", *ignore}}
        return json.dumps(_strip_volatile(cfg, str(self.path.resolve())), sort_keys=True)


def op_label(value: Any) -> str:
    """An op choice as text: a string as is, a Hydra instantiate dict as `name(key=value, ...)`,
    e.g. `leaky_relu(negative_slope=0.1)`."""
    if not isinstance(value, dict) or "_target_" not in value:
        return str(value)
    name = str(value["_target_"]).rsplit(".", 1)[-1]
    args = ", ".join(f"{k}={v}" for k, v in value.items() if not str(k).startswith("_"))
    return f"{name}({args})"


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


# Where fitting.compare.differences writes its runs of mine − reference: not runs of the app.
DIFFERENCES = "differences"


def find_event_files(root: Path) -> list[Path]:
    """Every TensorBoard event file of the app's runs under `root`, sorted."""
    return sorted(p for p in root.rglob(EVENT_GLOB)
                  if p.is_file() and DIFFERENCES not in p.relative_to(root).parts)


def check_event_file(path: Path) -> None:
    """Raise RunsError unless `path` is a whole, uncorrupted TFRecord file of events."""
    try:
        _check_framing(path)
    except EventFileError as exc:
        raise RunsError(str(exc)) from None


def read_scalars(files: list[Path]) -> tuple[dict[str, Series], bool]:
    """The wanted scalar tags of `files`, read per directory (a tag in several directories is
    taken from the one with most points), and whether the run wrote its session end."""
    best: dict[str, Series] = {}
    finished = False
    by_dir: dict[Path, list[Path]] = {}
    for path in files:
        by_dir.setdefault(path.parent, []).append(path)
    for directory in sorted(by_dir):
        try:
            scalars, ended = read_event_dir(by_dir[directory])
        except EventFileError as exc:
            raise RunsError(str(exc)) from None
        finished = finished or ended
        for tag, series in scalars.items():
            if tag not in best or len(series.steps) > len(best[tag].steps):
                best[tag] = series
    return best, finished


def _job_dir(event_file: Path, root: Path) -> Path:
    for parent in event_file.parents:
        if (parent / ".hydra" / "config.yaml").is_file():
            return parent
        if parent == root:
            break
    return event_file.parent


class _ConfigLoader(getattr(yaml, "CSafeLoader", yaml.SafeLoader)):
    """YAML as OmegaConf reads it (1e-5 is a float, a date stays a string), through libyaml
    when present: OmegaConf.load took 13x as long, most of the time of a 300-run sweep."""


_ConfigLoader.yaml_implicit_resolvers = {
    first: [(tag, rx) for tag, rx in resolvers if tag != "tag:yaml.org,2002:timestamp"]
    for first, resolvers in yaml.SafeLoader.yaml_implicit_resolvers.items()
}
_ConfigLoader.add_implicit_resolver(
    "tag:yaml.org,2002:float",
    re.compile(
        r"""^(?:[-+]?[0-9][0-9_]*\.[0-9_]*(?:[eE][-+]?[0-9]+)?
        |[-+]?[0-9][0-9_]*(?:[eE][-+]?[0-9]+)
        |\.[0-9_]+(?:[eE][-+][0-9]+)?
        |[-+]?\.(?:inf|Inf|INF)
        |\.(?:nan|NaN|NAN))$""",
        re.X,
    ),
    list("-+0123456789."),
)


def _load_yaml(path: Path) -> Any:
    if not path.is_file():
        return None
    try:
        return yaml.load(path.read_text(encoding="utf-8"), Loader=_ConfigLoader)
    except Exception as exc:  # any YAML parse or decoding error
        raise RunsError(f"cannot read {path} ({exc}); fix or delete that file") from exc


def read_run(job_dir: Path, event_files: list[Path], root: Path) -> Run:
    """Read one run: its config, overrides and the scalars of its (checked) event files."""
    config = _load_yaml(job_dir / ".hydra" / "config.yaml")
    overrides = _load_yaml(job_dir / ".hydra" / "overrides.yaml")
    scalars, finished = read_scalars(event_files)
    name = job_dir.name if job_dir == root else job_dir.relative_to(root).as_posix()
    return Run(
        name=name,
        path=job_dir,
        config=config if isinstance(config, dict) else {},
        overrides=[str(o) for o in overrides] if isinstance(overrides, list) else [],
        scalars=scalars,
        finished=finished,
    )


def read_runs(root: Path) -> list[Run]:
    """Every run under `root` (a sweep dir, a single job dir or a tree of them), in job order."""
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
    return sorted(runs, key=job_order)


def job_order(run: Run) -> tuple:
    """Sort key: by parent dir, then the sweep's job number, then name (a plain name sorts
    after the numbered jobs of its dir)."""
    number = run.job_number
    return (run.path.parent.as_posix(), number is None, number or 0, run.name)
