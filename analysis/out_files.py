"""What an analysis leaves in its `--out` folder: the files it wrote this time, and none of an
earlier analysis there.

Each analysis lists the files it wrote in `--out/.analysis-files` (paths relative to the folder).
The next analysis into the same folder removes the files of that list it did not write again: a
reused `--out` kept the figures of an earlier selection (another env label, a run since deleted),
unreferenced by the report beside them. Only listed files are removed, each a regular file inside
the folder (never a link, never through one); a user's own files there are not on the list.
"""

from __future__ import annotations

import os
from pathlib import Path

from common import console

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
