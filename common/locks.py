"""File locks between processes of this machine (two uploads, two sweeps of the same name).

`fcntl.flock` on a lock file: the kernel releases the lock when its holder exits, however it exits
(`kill -9` too), so a crash never leaves a stale lock behind. *Why not the `filelock` package:* it is
installed (torch needs it), but its 4.x releases changed what release does (the lock file is unlinked,
a soft-lock fallback replaces flock on some file systems), which is what these locks must not do
silently; the standard library's flock is all they need on the Linux and macOS machines this
benchmark runs on. On a system without fcntl (Windows) the locks are not taken, and a note says so.
"""

from __future__ import annotations

import contextlib
import os
from pathlib import Path
from typing import Iterator

from common import console

try:
    import fcntl
except ImportError:  # Windows
    fcntl = None


@contextlib.contextmanager
def locked(path: str | os.PathLike, *, wait: bool = False) -> Iterator[bool]:
    """Hold an exclusive lock on the file `path` (created if missing) for the block.

    Yields True when this process holds the lock; False, holding nothing, when another process
    holds it and `wait` is false. Raises OSError when the lock file cannot be created (a folder that
    does not exist or cannot be written). The holder's pid is written into the file (`holder`).
    """
    if fcntl is None:
        console.note(f"no file locks on this system: {path} is not protected from a second process")
        yield True
        return
    fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | (0 if wait else fcntl.LOCK_NB))
        except BlockingIOError:
            yield False
            return
        os.ftruncate(fd, 0)
        os.write(fd, f"{os.getpid()}\n".encode())
        yield True
    finally:
        os.close(fd)  # releases the lock


def holder(path: str | os.PathLike) -> str:
    """The pid written into lock file `path` by its last holder, or '?'."""
    try:
        return Path(path).read_text().strip() or "?"
    except OSError:
        return "?"
