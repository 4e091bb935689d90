"""The folder a command writes its files into (`--out`), and only that: claimed, then locked.

A command writes into a folder only when the folder is new, empty, or marked as the command's own
by an earlier run of it (its marker file, written when it takes the folder); a folder holding
anything else is refused in one line before anything is written, so that a report, a log or a
table never lands among (or replaces) a user's files. A folder inside a git checkout is refused
too, unless git ignores it (the project's default folders, `analysis_report/` and `out/`, are in
its .gitignore): the files would otherwise land in the tree. While the command writes, it holds
an exclusive lock on the folder itself (flock on the folder's descriptor, so nothing is added to
it): a second command on the same folder is refused, not interleaved.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import subprocess
import tempfile
from collections.abc import Iterator
from pathlib import Path

from common.errors import UsageError


def git_checkout_of(path: Path) -> Path | None:
    """The git checkout `path` is in (the nearest folder at or above it holding `.git`), or None."""
    for folder in (path, *path.parents):
        if (folder / ".git").exists():
            return folder
    return None


def _ignored_by_git(checkout: Path, path: Path) -> bool:
    """True when git says the folder `path` is ignored in `checkout` (False when git cannot say;
    asked with a trailing slash, so that a folder pattern such as `analysis_report/` matches a
    folder not made yet)."""
    try:
        done = subprocess.run(
            ["git", "-C", str(checkout), "check-ignore", "-q", f"{path}{os.sep}"],
            capture_output=True,
            timeout=30,
        )
    except (OSError, subprocess.SubprocessError):
        return False
    return done.returncode == 0


def _first_entry(folder: Path) -> str | None:
    try:
        return next((p.name for p in sorted(folder.iterdir())), None)
    except OSError:
        return None  # unreadable: the write probe that follows says so


def claim(given: str | os.PathLike, flag: str, marker: str, what: str) -> Path:
    """`given` (resolved) as the folder `what` writes into, made when missing and marked with
    `marker`; UsageError in one line when it is a file, holds files `what` did not make (no
    `marker`), or lies inside a git checkout that does not ignore it."""
    folder = Path(given).expanduser().resolve()
    if folder.exists() and not folder.is_dir():
        raise UsageError(f"{flag} {given} is a file: pass a folder (it is created when missing)")
    checkout = git_checkout_of(folder)
    if checkout is not None and not _ignored_by_git(checkout, folder):
        raise UsageError(
            f"{flag} {given} is inside the git checkout {checkout}, which does not ignore it: "
            f"{what} would write into the tree; pass a folder outside it (or one git ignores)"
        )
    if folder.is_dir() and not (folder / marker).exists():
        first = _first_entry(folder)
        if first is not None:
            raise UsageError(
                f"{flag} {given} holds files {what} did not make ({first}; no {marker}): pass a "
                "new or empty folder, so that none of them is overwritten"
            )
    try:
        folder.mkdir(parents=True, exist_ok=True)
        if not (folder / marker).exists():
            (folder / marker).write_text("", encoding="utf-8")
        with tempfile.TemporaryFile(dir=folder):  # writable now, not only when it was made
            pass
    except OSError as exc:
        raise UsageError(
            f"{flag} {given}: cannot write there ({exc.strerror or type(exc).__name__}): pass a "
            "folder you can write to"
        ) from None
    return folder


@contextlib.contextmanager
def locked(folder: Path, flag: str, what: str) -> Iterator[None]:
    """Hold an exclusive lock on `folder` itself while the body runs; UsageError when another
    process holds it (another `what` writing there). Not common.locks.locked: that one locks a
    lock file it writes its holder's pid into, and --out gets no file but the command's own."""
    fd = os.open(folder, os.O_RDONLY)
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError:
            raise UsageError(
                f"another {what} is writing into {flag} {folder}: wait for it to end or pass "
                f"another {flag}"
            ) from None
        yield
    finally:
        os.close(fd)
