"""Files written whole or not at all: a kill, a full disk or an error leaves the old file."""

from __future__ import annotations

import os
import tempfile
from collections.abc import Callable
from typing import BinaryIO


def write_atomic(path: str | os.PathLike, data: bytes | Callable[[BinaryIO], object]) -> None:
    """Write `data` (or what `data(file)` writes) to a temporary file beside `path`, then rename
    it over `path`; on any failure the temporary file is removed and the old `path` stays."""
    path = os.fspath(path)
    head, name = os.path.split(path)
    fd, tmp = tempfile.mkstemp(dir=head or ".", prefix=f".{name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "wb") as f:
            os.fchmod(f.fileno(), 0o644)  # mkstemp's 0600 would hide a results.json from others
            if callable(data):
                data(f)
            else:
                f.write(data)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException as err:
        os.unlink(tmp)
        if isinstance(err, OSError) and err.filename is None:  # a write to the open file
            raise OSError(err.errno, err.strerror, path) from None  # names the file it was for
        raise
