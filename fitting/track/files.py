"""Files and dirs written whole or not at all: a kill, a full disk or an error leaves the old."""

import os
import shutil
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
            os.fchmod(f.fileno(), 0o644)  # not mkstemp's 0600: others may read a results.json
            data(f) if callable(data) else f.write(data)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException as err:
        os.unlink(tmp)
        if isinstance(err, OSError) and err.filename is None:  # a write to the open file
            raise OSError(err.errno, err.strerror, path) from None  # names the file it was for
        raise


def replace_dir(path: str, src: str) -> None:
    """Put a copy of the dir `src` at `path` by renames: a failure or kill midway leaves the old
    `path` whole, and at worst a hidden `.<name>.new` beside it, which the next call removes."""
    head, name = os.path.split(path)
    new, old = (os.path.join(head, f".{name}.{part}") for part in ("new", "old"))
    try:
        for stale in (new, old):  # a killed call's: TensorBoard would show its runs
            shutil.rmtree(stale, ignore_errors=True)
        shutil.copytree(src, new)
        if os.path.lexists(path):
            os.rename(path, old)
        os.rename(new, path)  # only between these two renames is `path` missing
    finally:
        shutil.rmtree(new, ignore_errors=True)
    shutil.rmtree(old, ignore_errors=True)
