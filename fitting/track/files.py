"""Files and dirs written whole or not at all: a kill, a full disk or an error leaves the old."""

import errno
import os
import shutil
import stat
import tempfile
from collections.abc import Callable
from typing import BinaryIO

UMASK = os.umask(0o22)  # the user's, read once (at import, before any thread writes a file)
os.umask(UMASK)


class NotAFile(OSError):
    """A link, a dir or a special file where the app keeps a file: never followed nor replaced."""


def open_file(path: str | os.PathLike, flags: int = os.O_RDONLY) -> int:
    """A descriptor of the regular file `path` (O_NOFOLLOW: a planted link is not followed;
    O_CREAT in `flags` makes it with the user's umask); NotAFile if something else is there."""
    try:
        fd = os.open(path, flags | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC, 0o666)
    except OSError as err:
        raise not_a_file(path) if err.errno in (errno.ELOOP, errno.EISDIR) else err from None
    if not stat.S_ISREG(os.fstat(fd).st_mode):
        os.close(fd)
        raise not_a_file(path)
    return fd


def not_a_file(path: str | os.PathLike) -> NotAFile:
    """The one line for a link, dir or special file found where the app keeps a file or dir."""
    what = "a link" if os.path.islink(path) else "a directory" if os.path.isdir(path) \
        else "not a regular file"
    return NotAFile(f"{os.fspath(path)} is {what}, where the app keeps its own; it is never "
                    "followed nor replaced: remove it, or run in another dir")


def read_file(path: str | os.PathLike, limit: int = -1) -> bytes:
    """The bytes of the regular file `path` (open_file), at most `limit` + 1 of them."""
    with os.fdopen(open_file(path), "rb") as f:
        return f.read(limit + 1 if limit >= 0 else -1)


def write_atomic(path: str | os.PathLike, data: bytes | Callable[[BinaryIO], object]) -> None:
    """Write `data` (or what `data(file)` writes) to a temporary file beside `path`, then rename
    it over `path`; on any failure the temporary file is removed and the old `path` stays."""
    path = os.fspath(path)
    head, name = os.path.split(path)
    fd, tmp = tempfile.mkstemp(dir=head or ".", prefix=f".{name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "wb") as f:
            os.fchmod(f.fileno(), 0o666 & ~UMASK)  # as open() makes a file, not mkstemp's 0600
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
