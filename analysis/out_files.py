"""What an analysis leaves in its `--out` folder: the files it wrote this time, and none of an
earlier analysis there.

Each analysis lists the files it wrote in `--out/.analysis-files` (paths relative to the folder).
The next analysis into the same folder removes the files of that list it did not write again: a
reused `--out` kept the figures of an earlier selection (another env label, a run since deleted),
unreferenced by the report beside them. Only listed files are removed, each a regular file inside
the folder (never a link, never through one); a user's own files there are not on the list.
"""

from __future__ import annotations

import contextlib
import os
from pathlib import Path

from common import console, out_folder
from common.errors import BenchError, UsageError

MANIFEST = ".analysis-files"


def _listed(out_dir: Path) -> list[str]:
    try:
        text = (out_dir / MANIFEST).read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError):
        return []
    return [line for line in text.splitlines() if line.strip()]


def _inside(out_dir: Path, rel: str) -> Path | None:
    """`out_dir / rel` when it is a regular file inside `out_dir` reached through no link."""
    path = out_dir / rel
    if Path(rel).is_absolute() or ".." in Path(rel).parts:
        return None
    parts = Path(rel).parts
    for i in range(1, len(parts) + 1):
        if os.path.islink(out_dir.joinpath(*parts[:i])):
            return None
    return path if path.is_file() else None


def tidy(out_dir: Path, written: list[Path]) -> list[str]:
    """Remove what the previous analysis into `out_dir` wrote and this one (`written`) did not;
    list `written` as this analysis' files. Returns the relative paths removed (and says how
    many)."""
    now = sorted({str(Path(p).relative_to(out_dir)) for p in written})
    removed = []
    for rel in sorted(set(_listed(out_dir)) - set(now)):
        path = _inside(out_dir, rel)
        if path is not None:
            path.unlink()
            removed.append(rel)
    (out_dir / MANIFEST).write_text("".join(f"{rel}\n" for rel in now), encoding="utf-8")
    if removed:
        console.info(f"removed {len(removed)} file(s) an earlier analysis wrote into {out_dir}")
    return removed


@contextlib.contextmanager
def writing(out_dir: Path):
    """An OSError while writing figures, tables or the report (a full disk, a quota, a folder
    made read-only after the start) becomes one line naming the folder and the reason; the
    analysis run then ends FAILED with it. Raised in a figure process too (the pool re-raises it)."""
    try:
        yield
    except OSError as exc:
        where = exc.filename or out_dir
        raise BenchError(
            f"cannot write the report into --out {out_dir}: {where}: "
            f"{exc.strerror or type(exc).__name__}; free space there (or a quota) or pass another --out"
        ) from None


def check_out_dir(out: str) -> Path:
    """--out as the analysis' folder (common.out_folder.claim: new, empty or an earlier analysis'
    folder, never in a git checkout that does not ignore it), before any run is fetched or
    created; UsageError in one line otherwise (a file, a folder it cannot write, a planted link)."""
    path = Path(out)
    if path.exists() and not path.is_dir():
        raise UsageError(
            f"--out {out} is a file: pass a folder for the report (it is created when missing)"
        )
    link = planted_link(path) if path.is_dir() else None
    if link is not None:
        raise UsageError(
            f"--out {out} holds a link {link} -> {os.readlink(link)}: analysis writes only its own "
            "files there and never through a link (it would overwrite the link's target); remove "
            "the link or pass another --out"
        )
    return out_folder.claim(out, "--out", MANIFEST, "analysis")


def planted_link(out: Path, limit: int = 100_000) -> Path | None:
    """The first symbolic link inside `out` (not following links; at most `limit` entries looked
    at). Analysis makes none: one there was put by someone else, and writing report files through
    would overwrite the file it points to."""
    seen = 0
    for folder, dirs, files in os.walk(out):
        for name in sorted(dirs + files):
            if os.path.islink(os.path.join(folder, name)):
                return Path(folder) / name
        seen += len(dirs) + len(files)
        if seen > limit:
            break
    return None
