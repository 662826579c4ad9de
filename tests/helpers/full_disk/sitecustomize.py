"""A disk that fills up, for a subprocess started with this dir on PYTHONPATH: writes to files
under $FULL_DISK_DIR raise OSError(ENOSPC) once they add up to more than $FULL_DISK_BYTES (as
a write to a full disk does: no file name). For machines where a test cannot mount a small
tmpfs (not root); only Python-level writes are counted (open, io.open, pathlib)."""

import builtins
import errno
import io
import os

DIR = os.environ.get("FULL_DISK_DIR")
LIMIT = int(os.environ.get("FULL_DISK_BYTES", "0"))
_real_open = io.open
_written = [0]


class _FillingFile(io.FileIO):
    """A file whose writes count against LIMIT."""

    def write(self, data):
        size = memoryview(data).nbytes
        if _written[0] + size > LIMIT:
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
        _written[0] += size
        return super().write(data)


def _open(file, mode="r", buffering=-1, encoding=None, errors=None, newline=None,
          closefd=True, opener=None):
    """io.open, with files under DIR opened for writing (not '+') as _FillingFile."""
    path = os.fsdecode(file) if isinstance(file, (str, bytes, os.PathLike)) else None
    writing = any(c in mode for c in "wax") and "+" not in mode
    if path is None or not writing or not os.path.abspath(path).startswith(DIR + os.sep):
        return _real_open(file, mode, buffering, encoding, errors, newline, closefd, opener)
    raw = _FillingFile(path, mode.replace("b", "").replace("t", ""), closefd, opener)
    buffered = io.BufferedWriter(raw)
    if "b" in mode:
        return buffered
    return io.TextIOWrapper(buffered, encoding, errors, newline, line_buffering=buffering == 1)


if DIR:
    DIR = os.path.abspath(DIR)
    builtins.open = io.open = _open
