"""Read the scalars fitting.compare needs straight from TensorBoard event files.

The files are TFRecord files of `Event` protos: each record is an 8-byte length, its masked
CRC-32C, the payload and the payload's masked CRC-32C. Only the scalar tags of WANTED_TAGS and
WANTED_PREFIXES are kept, and whether the run wrote its HParams session-end summary, which
train.py writes only once a run has finished.
"""

from __future__ import annotations

import re
import struct
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
from tensorboard.compat.proto.event_pb2 import Event, SessionLog
from tensorboard.compat.proto.summary_pb2 import Summary
from tensorboard.compat.tensorflow_stub.pywrap_tensorflow import masked_crc32c

WANTED_TAGS = frozenset(
    {
        "loss/train",
        "loss/val",
        "time/step_ms",
        "time/train_s",
        "memory/saved_bytes",
        "memory/peak_bytes",
        "memory/peak_rss_bytes",
    }
)
WANTED_PREFIXES = ("params/", "weight_norm/", "norms/weight/")
SESSION_END = "_hparams_/session_end_info"
HINT = "delete it or re-run that job"
# Larger payloads are images or histograms, never checksummed unless they hold a wanted scalar:
# the checksum, computed in pure Python, would cost more than everything else together.
ALWAYS_CHECKED_BYTES = 8 * 1024


class EventFileError(Exception):
    """An event file that is empty, truncated or corrupt; the message names it."""


@dataclass
class Series:
    """One scalar tag of a run, sorted by step."""

    steps: np.ndarray
    values: np.ndarray


@dataclass
class _Points:
    """step -> value of each tag, in reading order (a later value of a step wins)."""

    by_tag: dict[str, dict[int, float]] = field(default_factory=dict)

    def purge(self, from_step: int) -> None:
        """Drop every point at `from_step` or later (a resumed writer's purge_step)."""
        for points in self.by_tag.values():
            for step in [s for s in points if s >= from_step]:
                del points[step]


def _corrupt(path: Path, pos: int) -> EventFileError:
    return EventFileError(f"event file {path} is corrupt (bad record at byte {pos}); {HINT}")


def records(path: Path) -> Iterator[tuple[int, bytes, int]]:
    """(offset, payload, payload's masked CRC) of each record of the file; EventFileError if the
    file is empty or its framing is broken."""
    data = path.read_bytes()
    if not data:
        raise EventFileError(f"event file {path} is empty; {HINT}")
    pos = 0
    while pos < len(data):
        header = data[pos : pos + 12]
        if len(header) < 12:
            raise EventFileError(f"event file {path} is truncated at byte {pos}; {HINT}")
        length, header_crc = struct.unpack("<QI", header)
        if masked_crc32c(header[:8]) != header_crc:
            raise _corrupt(path, pos)
        end = pos + 12 + length + 4
        if end > len(data):
            raise EventFileError(f"event file {path} is truncated at byte {pos}; {HINT}")
        yield pos, data[pos + 12 : end - 4], struct.unpack("<I", data[end - 4 : end])[0]
        pos = end


def check_event_file(path: Path) -> None:
    """Raise EventFileError unless `path` is a whole, uncorrupted TFRecord file."""
    for pos, payload, crc in records(path):
        if masked_crc32c(payload) != crc:
            raise _corrupt(path, pos)


def wanted(tag: str) -> bool:
    """Whether fitting.compare reads this scalar tag."""
    return tag in WANTED_TAGS or tag.startswith(WANTED_PREFIXES)


def _read_file(path: Path, points: _Points) -> bool:
    """Add the wanted scalars of one file to `points`; whether it holds the session end."""
    finished = False
    for pos, payload, crc in records(path):
        checked = len(payload) <= ALWAYS_CHECKED_BYTES
        if checked and masked_crc32c(payload) != crc:
            raise _corrupt(path, pos)
        try:
            event = Event.FromString(payload)
        except Exception as exc:  # protobuf's DecodeError, or worse for garbage
            raise _corrupt(path, pos) from exc
        scalars = [(v.tag, _scalar(v)) for v in event.summary.value if wanted(v.tag)]
        scalars = [(tag, value) for tag, value in scalars if value is not None]
        if scalars and not checked and masked_crc32c(payload) != crc:
            raise _corrupt(path, pos)
        if event.session_log.status == SessionLog.START:
            points.purge(event.step)
        for tag, value in scalars:
            points.by_tag.setdefault(tag, {})[event.step] = value
        finished = finished or any(
            v.tag == SESSION_END and v.metadata.plugin_data.plugin_name == "hparams"
            for v in event.summary.value
        )
    return finished


def _scalar(value: Summary.Value) -> float | None:
    """The number of a scalar summary value (old simple_value or new-style tensor), else None."""
    if value.HasField("simple_value"):
        return value.simple_value
    if value.HasField("tensor") and len(value.tensor.float_val) == 1:
        return value.tensor.float_val[0]
    if value.HasField("tensor") and len(value.tensor.double_val) == 1:
        return value.tensor.double_val[0]
    return None


def writing_order(path: Path) -> tuple:
    """Sort key of event files in the order they were created: by the name's creation second,
    host, pid and writer number (`events.out.tfevents.<s>.<host>.<pid>.<n>[suffix]`), the
    numbers compared as numbers ("10" after "9")."""
    numbers = re.match(r"events\.out\.tfevents\.(\d+)\.(.+)\.(\d+)\.(\d+)(.*)$", path.name)
    if not numbers:
        return (1, path.name)
    second, host, pid, writer, suffix = numbers.groups()
    return (0, int(second), host, int(pid), int(writer), suffix)


def read_event_dir(files: list[Path]) -> tuple[dict[str, Series], bool]:
    """The wanted scalars of one directory's event files, read in the order they were written,
    and whether any of them holds the HParams session end."""
    points = _Points()
    finished = False
    for path in sorted(files, key=writing_order):
        finished = _read_file(path, points) or finished
    series = {}
    for tag, by_step in points.by_tag.items():
        if by_step:
            steps = np.array(sorted(by_step), dtype=np.int64)
            values = np.array([by_step[s] for s in steps.tolist()], dtype=np.float64)
            series[tag] = Series(steps, values)
    return series, finished
