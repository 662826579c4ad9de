"""A real TensorBoard server on loopback for tests: start it on a logdir, poll its JSON API."""

from __future__ import annotations

import json
import queue
import re
import subprocess
import sys
import threading
import time
import urllib.request
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

# Deadlines, not bounds on speed: wide enough for a loaded box (load 14 on 2 cores), where
# TensorBoard takes several times its quiet 2-5 s to start and to load the event files.
WAIT_S = 300.0
REQUEST_S = 60.0
URL_LINE = re.compile(r"TensorBoard \S+ at (http://127\.0\.0\.1:(\d+)/)")
PARAM_TAGS = {"params/a", "params/b", "params/c", "params/d"}


def tensorboard_command(logdir: Path) -> list[str]:
    """`tensorboard --logdir DIR --host 127.0.0.1 --port 0`, from this interpreter's env."""
    script = Path(sys.executable).parent / "tensorboard"
    prefix = [str(script)] if script.is_file() else [sys.executable, "-m", "tensorboard.main"]
    return [*prefix, "--logdir", str(logdir), "--host", "127.0.0.1", "--port", "0"]


def wait_for_url(proc: subprocess.Popen, deadline: float) -> str:
    """The URL TensorBoard prints on stderr once it has bound its (port-0-chosen) port."""
    lines: queue.Queue[str] = queue.Queue()
    # stderr is read on a thread so the wait stays bounded even if TensorBoard prints nothing.
    threading.Thread(target=lambda: [lines.put(x) for x in proc.stderr], daemon=True).start()
    seen = []
    while time.monotonic() < deadline:
        try:
            line = lines.get(timeout=0.5)
        except queue.Empty:
            if proc.poll() is not None:
                break
            continue
        seen.append(line)
        if match := URL_LINE.search(line):
            assert int(match.group(2)) > 0
            return match.group(1)
    raise AssertionError(f"TensorBoard printed no URL (exit {proc.poll()}): {''.join(seen)}")


def get_json(url: str) -> object:
    with urllib.request.urlopen(url, timeout=REQUEST_S) as response:
        return json.load(response)


def post_json(url: str, body: dict) -> object:
    """POST `body` as JSON (how the HParams dashboard asks its plugin); the JSON answer."""
    request = urllib.request.Request(url, data=json.dumps(body).encode(),
                                     headers={"Content-Type": "application/json"})
    with urllib.request.urlopen(request, timeout=REQUEST_S) as response:
        return json.load(response)


def hparams_table(base: str) -> tuple[list[str], dict[str, dict[str, str]]]:
    """What the HParams dashboard shows: its columns, and each Trial ID's row (hparam values)."""
    experiment = post_json(base + "data/plugin/hparams/experiment", {"experimentName": ""})
    groups = post_json(base + "data/plugin/hparams/session_groups", {
        "experimentName": "", "startIndex": 0, "sliceSize": 1000, "colParams": [],
        "allowedStatuses": ["STATUS_UNKNOWN", "STATUS_SUCCESS", "STATUS_FAILURE",
                            "STATUS_RUNNING"]})
    return ([h["name"] for h in experiment["hparamInfos"]],
            {g["name"]: g["hparams"] for g in groups["sessionGroups"]})


def wait_for_runs(base: str, runs: dict[str, set[str]], deadline: float) -> dict:
    """Poll /data/runs and the scalars tags until every run shows its expected tags."""
    last: object = None
    while time.monotonic() < deadline:
        listed = get_json(base + "data/runs")
        tags = get_json(base + "data/plugin/scalars/tags")
        last = (listed, tags)
        if all(run in listed and want <= set(tags.get(run, {})) for run, want in runs.items()):
            return tags
        time.sleep(0.5)
    raise AssertionError(f"runs/tags not served within {WAIT_S} s; last answer: {last}")


@contextmanager
def tensorboard(logdir: Path) -> Iterator[str]:
    """A TensorBoard server on loopback (port 0) for `logdir`: its base URL; always stopped."""
    proc = subprocess.Popen(
        tensorboard_command(logdir), stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE, text=True,
    )
    try:
        yield wait_for_url(proc, time.monotonic() + WAIT_S)
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(timeout=10)


def serve_and_check(logdir: Path, runs: dict[str, set[str]]) -> dict:
    """Start TensorBoard on `logdir`, wait for `runs` with their tags, always stop it; the
    tags, and under "custom scalars" each Custom Scalars chart's title -> its tag patterns."""
    with tensorboard(logdir) as base:
        tags = wait_for_runs(base, runs, time.monotonic() + WAIT_S)
        layout = get_json(base + "data/plugin/custom_scalars/layout")
        return {**tags, "custom scalars": {chart["title"]: chart["multiline"]["tag"]
                                           for category in layout.get("category", [])
                                           for chart in category["chart"]}}
