"""Runs read with TensorBoard's EventAccumulator and results.json, paired, tabled, differenced."""

import contextlib
import json
import os
import re
import tempfile
from dataclasses import dataclass
from typing import Any

import numpy as np
import yaml

from fitting.slots import describe
from fitting.track.files import replace_dir
from fitting.track.tensorboard import DIFF_LAYOUT, DIFF_TAG

DONE = ("completed", "converged")  # results.json's statuses of a job that ran to its end
# Every scalar; one image and histogram per tag (reading them is the cost, keeping them memory).
SIZE_GUIDANCE = {"scalars": 0, "images": 1, "histograms": 1, "compressedHistograms": 1}
# A run's numbers (RunRecord.number): results.json's key, else the tag's logged values.
FINAL_LOSS, STEP_MS = ("final_loss", "loss/train"), ("step_ms_median", "time/step_ms_median")
SAVED_BYTES = ("saved_bytes", "memory/saved_bytes", np.median)
PEAK = ("peak_bytes", "memory/peak_bytes", max)
PEAK_RSS = ("peak_rss_bytes", "memory/peak_rss_bytes")
_Loader = getattr(yaml, "CSafeLoader", yaml.SafeLoader)  # libyaml: 10x faster at 300 runs


@dataclass
class RunRecord:
    """One run dir: config, results.json ({} if none), scalars, HParams, its reference."""

    name: str  # the path under the root, os.fsdecode'd: surrogates stand for non-UTF-8 bytes
    path: str
    config: dict[str, Any]
    result: dict[str, Any]
    scalars: dict[str, tuple[np.ndarray, np.ndarray]]
    ops: dict[str, str]  # each slot's op choice as text (a user's op: `text @<its file's hash>`)
    status: str  # results.json's (completed, diverged, ...), else running or killed
    overrides: list[str]  # the job's command-line overrides (.hydra/overrides.yaml)
    reference: "RunRecord | None" = None

    def number(self, key: str, tag: str, pick=lambda values: values[-1]) -> float | None:
        """results.json's `key`, else `pick` of the tag's logged values; None without both."""
        if self.result.get(key) is not None:
            return float(self.result[key])
        series = self.scalars.get(tag)
        return float(pick(series[1])) if series is not None and len(series[1]) else None


def _op_text(choice: Any, config: dict[str, Any]) -> str:
    """The choice as fitting.slots.describe writes it, an interpolation (`${impl}`) resolved."""
    if isinstance(choice, str) and re.fullmatch(r"\$\{\w+\}", choice):
        choice = config.get(choice[2:-1], choice)
    return describe(choice)


def shown(text: str) -> str:
    """Text as it can be printed: a non-UTF-8 byte of a file name becomes '?'."""
    return text.encode("utf-8", "replace").decode("utf-8")


def _load(path: str, load) -> dict[str, Any] | None:
    with contextlib.suppress(OSError, ValueError, TypeError, yaml.YAMLError), open(path, "rb") as f:
        return dict(load(f))  # None where absent, half-written or not ours


def _scalars(path: str) -> dict[str, tuple[np.ndarray, np.ndarray]]:
    """The scalars logged in the event files of `path`, as (steps, values) by tag."""
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    try:
        path.encode("utf-8")
    except UnicodeEncodeError:  # TensorBoard opens only UTF-8 paths: reach it by a link
        with tempfile.TemporaryDirectory() as tmp:
            os.symlink(path, os.path.join(tmp, "run"))
            return _scalars(os.path.join(tmp, "run"))
    acc = EventAccumulator(path, size_guidance=SIZE_GUIDANCE)
    acc.Reload()
    return {tag: (np.array([e.step for e in events]), np.array([e.value for e in events]))
            for tag in acc.Tags()["scalars"] for events in [acc.Scalars(tag)]}


def read_runs(root: str | os.PathLike) -> list[RunRecord]:
    """The run dirs (with .hydra/config.yaml or results.json) under `root`, in job order."""
    root = os.path.abspath(os.fsdecode(root))
    runs = []
    for path, dirs, files in os.walk(root):
        config = os.path.join(path, ".hydra", "config.yaml")
        if "results.json" not in files and not os.path.isfile(config):
            dirs.sort(key=lambda d: re.sub(r"^\d+", lambda n: n[0].zfill(9), d))  # 2_ before 10_
            continue
        dirs.clear()  # a run dir holds no other runs
        name = os.path.relpath(path, os.path.dirname(root) if path == root else root)
        config = _load(config, lambda f: yaml.load(f, _Loader)) or {}
        result = _load(os.path.join(path, "results.json"), json.load) or {}
        ops, done = config.get("ops", {}), result.get("ops") or {}  # the task's slots, once run
        # results.json's text, once run: it names the version of a user's op (its file's hash).
        ops = {s: str(done[s]) if s in done else _op_text(ops[s], config) for s in done or ops}
        overrides = _load(os.path.join(path, ".hydra", "overrides.yaml"),  # a list: as dict keys
                          lambda f: dict.fromkeys(yaml.load(f, _Loader) or ())) or \
            result.get("overrides", [])  # a refused job's: in its results.json
        runs.append(RunRecord(name, path, config, result, _scalars(path), ops,
                        str(result.get("status", "running or killed")), list(overrides)))
    return runs


def group_key(run: RunRecord, *ignore: str) -> str:
    """The config but ops (and `ignore`): equal for runs that differ only in their ops."""
    cfg = {k: v for k, v in run.config.items() if k not in ("ops", "impl", *ignore)}
    return json.dumps(cfg, sort_keys=True, default=str) if run.config else run.path


def differing(runs: list[RunRecord]) -> list[str]:
    """The op slots whose choice differs across `runs` (a run without the slot: no choice)."""
    slots = dict.fromkeys(slot for run in runs for slot in run.ops)
    return [s for s in slots if len({r.ops[s] for r in runs if s in r.ops}) > 1]


def reference(runs: list[RunRecord]) -> RunRecord:
    """Of runs differing only in ops (and seed): the builtin run, else torch.'s, else the first."""
    slots = differing(runs)
    return max(runs, key=lambda r: (sum(r.ops.get(s) == "builtin" for s in slots),
                                    sum(r.ops.get(s, "").startswith("torch.") for s in slots)))


def pair(runs: list[RunRecord]) -> None:
    """Set each run's `reference`: of runs differing only in ops, builtin, torch. or the first."""
    groups: dict[str, list[RunRecord]] = {}
    for run in runs:
        groups.setdefault(group_key(run), []).append(run)
    for group in groups.values():
        ref = reference(group)
        for run in group:
            run.reference = ref if run.ops != ref.ops else None


def loss_gap(mine: RunRecord, ref: RunRecord) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(steps, mine − reference, reference) of loss/train at the steps both logged."""
    (sa, va), (sb, vb) = (r.scalars.get("loss/train", ([], [])) for r in (mine, ref))
    steps, ia, ib = np.intersect1d(sa, sb, return_indices=True)
    ref_loss = np.asarray(vb, np.float64)[ib]
    return steps, np.asarray(va, np.float64)[ia] - ref_loss, ref_loss


def ratio(a: float | None, b: float | None) -> float | None:
    """a / b; None where either is missing or b is 0."""
    return None if a is None or not b else a / b


def fmt(value: float | None, spec: str) -> str:
    return "n/a" if value is None else format(value, spec)


def markdown(header: list[str], rows: list[list[str]]) -> str:
    """A markdown table."""
    return "\n".join("| " + " | ".join(cells) + " |"
                     for cells in [header, ["---"] * len(header), *rows])


def _numbers(run: RunRecord, refs: set[int]) -> list[str]:
    """A run's cells after its name and ops: final loss, Δ, step ms, × ref, saved bytes, status."""
    ref, loss, ms = run.reference, run.number(*FINAL_LOSS), run.number(*STEP_MS)
    delta = times = "ref" if id(run) in refs else ""
    if ref is not None:
        ref_loss = ref.number(*FINAL_LOSS)
        delta = fmt(None if None in (loss, ref_loss) else loss - ref_loss, ".3g")
        times = fmt(ratio(ms, ref.number(*STEP_MS)), ".3f")
    return [fmt(loss, ".6g"), delta, fmt(ms, ".4g"), times, fmt(run.number(*SAVED_BYTES), ",.0f"),
            run.status + (f" (exit {run.result['exit']})" if "exit" in run.result else "")]


def runs_table(runs: list[RunRecord]) -> str:
    """The per-run markdown table (after `pair`); ops: the choices that differ across runs."""
    slots, refs = differing(runs), {id(r.reference) for r in runs}
    rows = [[f"`{shown(run.name)}`",
             shown(", ".join(f"{s}={c}" for s, c in run.ops.items() if s in slots or not slots)),
             *_numbers(run, refs)] for run in runs]
    return markdown(["job", "ops", "final loss", "Δ loss vs ref", "step ms (median)", "× ref",
                     "saved bytes", "status"], rows)


def pairs_table(runs: list) -> str:
    """The per-pair markdown table (after `pair`): loss gap and mine / reference ratios."""
    rows = []
    for mine in (r for r in runs if r.reference is not None):
        ref = mine.reference
        steps, gap, ref_loss = loss_gap(mine, ref)
        rel = np.max(np.abs(gap) / np.maximum(np.abs(ref_loss), 1e-300)) if len(steps) else None
        rows.append([f"`{shown(mine.name)}`", f"`{shown(ref.name)}`", str(len(steps)),
                     fmt(rel, ".3e")] + [fmt(ratio(mine.number(*k), ref.number(*k)), ".4f")
                                         for k in (STEP_MS, SAVED_BYTES, PEAK, PEAK_RSS)])
    header = ["mine", "reference", "common steps", "max rel. Δloss", "step time ×",
              "saved bytes ×", "peak ×", "peak RSS ×"]
    return markdown(header, rows) if rows else "No pairs: no two runs differ only in their ops."


def job(run: RunRecord) -> str:
    """The run's name, a sweep job's dir (`3_seed=1,...`) cut to its number: `#3`."""
    return shown(re.sub(r"(^|/)(\d+)_[^/]*$", r"\1#\2", run.name))


def terminal_table(runs: list[RunRecord], width: int = 100) -> str:
    """The per-run table (after `pair`) aligned in `width` columns: the job's number and the
    overrides that differ but ops, a column per op slot that differs, ops by their short name."""
    from tabulate import tabulate

    slots, refs = differing(runs), {id(r.reference) for r in runs}
    if slots and all(r.ops.get(s, "impl") in ("impl", r.config.get("impl")) for r in runs
                     for s in slots):
        slots = ["impl"]  # every slot that differs follows impl=: one column says it
    same = set.intersection(*(set(r.overrides) for r in runs))
    rows = [[" ".join([job(run), *(shown(o) for o in run.overrides if o not in same and not
                                   re.match(r"[+~]?(ops\.|impl=)", o))]),
             *(shown(re.sub(r"^(\w+\.)+(?=\w+\()", "", run.config.get("impl", "") if s == "impl"
                            else run.ops.get(s, ""))) for s in slots),
             *_numbers(run, refs)] for run in runs]
    header = ["job", *slots, "final\nloss", "Δ vs\nref", "step\nms", "×\nref", "saved\nbytes",
              "status"]  # two lines: tabulate pads a header by two
    texts = len(slots) + 1
    caps = [max(map(len, column)) for column in list(zip(header, *rows, strict=True))[:texts]]
    while True:  # the widest text column wraps until the table fits; numbers never do
        cut = [[re.sub(r"(?<=[(:])(?=.)", "\n", c) if 0 < k < texts and len(c) > caps[k] else c
                for k, c in enumerate(row)] for row in rows]  # an op: after its module, "(" first
        table = tabulate(cut, header, disable_numparse=True, maxcolwidths=caps + [None] * 6,
                         maxheadercolwidths=caps + [None] * 6,
                         colalign=["left"] * texts + ["right"] * 5 + ["left"])
        over = max(map(len, table.splitlines())) - width
        if over <= 0 or max(caps) <= 6:
            return table
        for _ in range(over):
            caps[caps.index(max(caps))] -= 1


def write_differences(runs: list[RunRecord], out: str, png: str) -> list[str]:
    """Write `out`/differences: a DIFF_TAG run per pair, and `png` (compare.png) as the image
    compare/runs; say what each line shows, in words."""
    from matplotlib.image import imread
    from tensorboard.summary import Writer  # TensorBoard's own writer of event files
    from torch.utils.tensorboard import SummaryWriter

    lines = []
    with tempfile.TemporaryDirectory() as tmp:  # TensorBoard writes only to UTF-8 paths
        staged = os.path.join(tmp, "differences")
        for run in (r for r in runs if r.reference is not None):
            steps, gap, _ = loss_gap(run, run.reference)
            said = ("missing (no step logged by both)" if not len(steps)
                    else f"identical at all {len(steps)} common steps (a flat line at 0)"
                    if not gap.any() else f"max |Δ| {np.abs(gap).max():.3g}")
            lines.append(f"{shown(run.name)} − {shown(run.reference.name)}: {said}")
            if len(steps):
                name = re.sub(r"[^\w.,=+-]+", "_", f"{run.name} minus {run.reference.name}")
                writer = Writer(os.path.join(staged, name))
                for step, value in zip(steps.tolist(), gap.tolist(), strict=True):
                    writer.add_scalar(DIFF_TAG, value, step, description=said)
                writer.close()
        # Each experiment on its own axes (a 17-step newton run readable beside 2000-step ones),
        # first on Time Series' page: its group, compare/, sorts before loss/.
        with SummaryWriter(os.path.join(staged, "compare")) as writer:
            writer.add_image("compare/runs", imread(png)[..., :3], 0, dataformats="HWC")
            if len(os.listdir(staged)) > 1:  # a pair's line beside compare/
                writer.add_custom_scalars(DIFF_LAYOUT)
        replace_dir(os.path.join(out, "differences"), staged)
    return lines
