"""The folders the GPU check writes into, and only those (standard library only, as the parent).

The root (--root, or a new temporary folder) is the check's own: it is marked with MARKER, and a
folder is taken as a root only when it is new, empty, or marked by an earlier check. A folder
holding anything else is refused, so that the check never deletes or packs a user's files; so is a
root inside a git checkout (its store, logs and artifacts would land in the tree, and the tree in
the bundle). Inside its root the check deletes and packs only what it writes (ROOT_ENTRIES, and
in results/ and logs/ only the files named after its steps). --out must be a folder it can
write. Each folder is locked (flock on the folder itself, so nothing is added to it) for as long
as the check runs: a second check on the same --out or root is refused, not interleaved.
"""

from __future__ import annotations

import fcntl
import os
import tempfile
from pathlib import Path

from common.out_folder import git_checkout_of  # the rule every command's --out follows

MARKER = ".gpu-check-root"
"""The file that says a folder is a GPU check's root (written when the check takes the folder)."""
ROOT_ENTRIES = ("mlflow.db", "mlruns", "ncu", "logs", "results", "report", "cache", "spool")
ROOT_ENTRIES += ("versions.txt", MARKER)
"""What the check and its steps write at the top of the root and pack into the bundle (site/ and
mpl/, the installed wheels and matplotlib's cache, are written but not packed)."""


class Refused(Exception):
    """A folder the check must not write into: one line saying which and why."""


def root_path(given: str | None) -> Path | None:
    """`given` resolved, when the check may take it as its root (new, empty, or marked by an
    earlier check); None for the default (a new temporary folder). Refused otherwise; nothing is
    created here."""
    if not given:
        checkout = git_checkout_of(Path(tempfile.gettempdir()).resolve())
        if checkout is not None:
            raise Refused(
                f"the temporary folder is inside the git checkout {checkout}: give --root DIR "
                "outside it"
            )
        return None
    root = Path(given).expanduser().resolve()
    checkout = git_checkout_of(root)
    if checkout is not None:
        raise Refused(
            f"--root {root} is inside the git checkout {checkout}: the check writes a store, logs "
            "and artifacts under its root and packs them into bundle.tar.gz; give a folder outside it"
        )
    if root.exists() and not root.is_dir():
        raise Refused(f"--root {root} is a file, not a folder: give a new or empty folder")
    if root.is_dir() and not (root / MARKER).is_file():
        first = _first_entry(root)
        if first is not None:
            raise Refused(
                f"--root {root} holds files the GPU check did not make ({first}; no {MARKER}): "
                "give a new or empty folder"
            )
    return root


def make_root(root: Path | None) -> Path:
    """The root made (or a new temporary folder) and marked as the check's."""
    try:
        if root is None:
            root = Path(tempfile.mkdtemp(prefix="gpu-check-")).resolve()
        root.mkdir(parents=True, exist_ok=True)
        _mark(root)
    except OSError as exc:
        raise Refused(f"--root {root} cannot be written ({exc.strerror or exc})") from None
    return root


def _first_entry(folder: Path) -> str | None:
    try:
        return next((p.name for p in folder.iterdir()), None)
    except OSError as exc:
        raise Refused(f"{folder} cannot be read ({exc.strerror or exc})") from None


def _mark(root: Path) -> None:
    (root / MARKER).write_text(
        "This folder is a root of `python -m gpu_check` (docs/gpu.md): the check writes, deletes\n"
        "and packs only its own files here.\n"
    )


def open_out(given: str) -> Path:
    """--out as a folder the check can write (made if missing); Refused in one line otherwise."""
    out = Path(given).expanduser().resolve()
    if out.exists() and not out.is_dir():
        raise Refused(f"--out {out} is a file, not a folder: give a folder for the result files")
    try:
        out.mkdir(parents=True, exist_ok=True)
        fd, probe = tempfile.mkstemp(dir=out, prefix=".gpu-check-probe-")
        os.close(fd)
        os.unlink(probe)
    except OSError as exc:
        raise Refused(
            f"--out {out} cannot be written ({exc.strerror or exc}): give a folder you can write"
        ) from None
    return out


def lock(folder: Path, flag: str) -> int:
    """An exclusive lock on `folder` itself, held until the returned descriptor is closed (or the
    process ends); Refused when another check holds it."""
    fd = os.open(folder, os.O_RDONLY)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except OSError:
        os.close(fd)
        raise Refused(
            f"another GPU check is writing into {flag} {folder}: wait for it to end or give "
            f"another {flag}"
        ) from None
    return fd


def own_files(root: Path, step_names: tuple[str, ...]) -> list[Path]:
    """The files of `root` the check wrote, for the bundle: under ROOT_ENTRIES, and in results/
    and logs/ only those named after a step (a user's file dropped there stays out)."""
    mine = {f"{n}.json" for n in step_names} | {f"{n}.txt" for n in step_names}
    out = []
    for name in ROOT_ENTRIES:
        top = root / name
        found = [top] if top.is_file() else sorted(top.rglob("*")) if top.is_dir() else []
        for p in found:
            if not p.is_file() or p.is_symlink():
                continue
            if name in ("results", "logs") and (p.parent != top or p.name not in mine):
                continue
            out.append(p)
    return out


def stale_results(root: Path, step_names: tuple[str, ...]) -> list[Path]:
    """The step results an earlier check left in `root`/results (deleted before this one runs)."""
    found = (root / "results" / f"{n}.json" for n in step_names)
    return [p for p in found if p.is_file() and not p.is_symlink()]
