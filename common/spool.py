"""The spool: runs kept on disk while the tracking server could not be reached.

One folder per run, `<spool_dir>/<local_id>/`, holding `run.json` and `files/` (copies of the run's
artifact files, so that nothing the run logged depends on files that may be gone by upload time).
`run.json` holds (see `write_entry`):

* `local_id`, `parent_local_id`: the run's and its parent's spool folder names;
* `run_id`, `parent_run_id`, `experiment_id`: ids on the server, once it has the run (a run cut off
  mid-way, or one a resumed upload already created);
* `experiment`, `status`, `tracking_uri` (the server the run was meant for, without user name and
  password), `created_s`;
* `record`: the whole run as a RunRecord dict (what a resumed sweep reads: tags, params, status);
* `unsent`: for a run the server already has, the part of `record` it does not have yet; None when
  the server has nothing of it (upload then sends `record`).

An entry that cannot be read (a corrupt or hand-edited run.json) is skipped with a warning naming
it; the others are still read. `entry_lock` keeps two uploads from sending one entry twice.

Reading and writing only: sending spooled runs is common/upload.py's job. No mlflow here.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import time
from pathlib import Path
from typing import Iterator

from common import console
from common.locks import locked

SPOOL_ENV = "ROOFLINE_SPOOL_DIR"


def spool_dir() -> Path:
    """Where runs that could not reach the tracking server are kept."""
    return Path(os.environ.get(SPOOL_ENV) or Path.home() / ".cache" / "roofline-bench" / "spool")


def folders_file() -> Path:
    """The list of spool folders used on this machine besides the default (one path a line), in
    the cache folder ($ROOFLINE_CACHE_DIR, default ~/.cache/roofline-bench): it does not move with
    $ROOFLINE_SPOOL_DIR."""
    cache = os.environ.get("ROOFLINE_CACHE_DIR") or Path.home() / ".cache" / "roofline-bench"
    return Path(cache) / "spool-folders.txt"


MAX_FOLDERS = 100
"""spool folders remembered (the latest used)."""


def remember_folder(folder: Path) -> None:
    """Note `folder` (a spool folder other than the default) in `folders_file`, so that every later
    command knows the runs spooled there will be completed: an upload from the default folder
    marked such a run FAILED ("process is gone") while its entry was safe there. Never
    raises: a home that cannot be written only loses the note."""
    folder = folder.resolve()
    if folder == spool_dir().resolve():
        return
    try:
        known = [f for f in _listed_folders() if f != folder] + [folder]
        path = folders_file()
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_suffix(f".{os.getpid()}.tmp")
        tmp.write_text("".join(f"{f}\n" for f in known[-MAX_FOLDERS:]))
        tmp.replace(path)
    except OSError:
        pass


def _listed_folders() -> list[Path]:
    try:
        text = folders_file().read_text()
    except (OSError, UnicodeDecodeError):
        return []
    return [Path(line) for line in text.splitlines()[-MAX_FOLDERS:] if line.strip()]


def known_folders() -> list[Path]:
    """The default spool folder and every other one this machine spooled into that still exists."""
    default = spool_dir()
    return [default] + [f for f in _listed_folders() if f != default.resolve() and f.is_dir()]


def spooled_runs(folder: Path | None = None, warn: bool = True) -> list[dict]:
    """Spooled runs, parents before their children, oldest first. Each entry's `_path` is its
    run.json (not stored in the file). Unreadable entries are left out, each with a warning naming
    it (unless `warn` is false)."""
    folder = folder or spool_dir()
    entries = []
    for path in sorted(folder.glob("*/run.json")):
        entry = read_entry(path, warn)
        if entry is not None:
            entries.append(entry)
    entries.sort(key=lambda e: (e["parent_local_id"] is not None, e["created_s"]))
    return entries


def unreadable_entries(folder: Path | None = None) -> list[Path]:
    """The run.json files in `folder` that cannot be read as spool entries (spooled_runs leaves
    them out): what an upload must not count as sent."""
    folder = folder or spool_dir()
    return [
        p
        for p in sorted(folder.glob("*/run.json"))
        if read_entry(p, warn=False) is None and p.exists()
    ]


_REQUIRED = {
    "local_id": str,
    "record": dict,
    "created_s": (int, float),
    "status": (str, type(None)),
}


def read_entry(path: str | Path, warn: bool = True) -> dict | None:
    """The spool entry at `path` (its run.json) with `_path` set; None when it is gone, or cannot be
    read (then a warning names it, unless `warn` is false)."""
    path = Path(path)
    try:
        entry = json.loads(path.read_text())
        if not isinstance(entry, dict):
            raise ValueError("not a JSON object")
        for key, kind in _REQUIRED.items():
            if not isinstance(entry.get(key), kind):
                raise ValueError(f"no valid {key!r}")
        if not isinstance(entry["record"].get("run_kind"), str):
            raise ValueError("no valid 'record.run_kind'")
    except FileNotFoundError:
        return None
    except (OSError, ValueError) as exc:  # JSONDecodeError and UnicodeDecodeError are ValueErrors
        if warn:
            console.warn(
                f"skipped spool entry {path}: it cannot be read ({str(exc)[:120]}); the other "
                "entries are used. Look at it, then move it out of the spool folder"
            )
        return None
    entry.setdefault("parent_local_id", None)
    entry["_path"] = str(path)
    return entry


@contextlib.contextmanager
def entry_lock(entry: dict) -> Iterator[dict | None]:
    """Lock a spool entry against other processes and read it again: yields its current content,
    or None when another process holds it or it is gone (sent by another upload)."""
    path = Path(entry["_path"])
    with contextlib.ExitStack() as stack:
        try:
            held = stack.enter_context(locked(path.parent / ".lock"))
        except FileNotFoundError:  # its folder was removed: another upload sent it
            held = False
        yield read_entry(path) if held else None


def save_entry(entry: dict, path: str | Path | None = None) -> None:
    """Write a spool entry atomically (a crash leaves the old or the new entry, never half of one)."""
    path = Path(path or entry["_path"])
    tmp = path.with_suffix(".json.tmp")
    tmp.write_text(json.dumps({k: v for k, v in entry.items() if k != "_path"}, indent=1))
    tmp.replace(path)


def write_entry(
    local_id: str,
    *,
    record: dict,
    unsent: dict | None,
    run_id: str | None,
    experiment_id: str | None,
    experiment: str | None,
    parent_local_id: str | None,
    parent_run_id: str | None,
    status: str | None,
    tracking_uri: str,
    folder: Path | None = None,
) -> Path:
    """Spool one run (see the module docstring for the fields); returns its run.json.

    `record["files"]` and `unsent["files"]` map artifact paths to local files: those are copied into
    the spool folder and the entry points at the copies. Writing the entry of a run already spooled
    (a resumed sweep's parent) keeps its `created_s`, its place in the upload order. `folder`: the
    spool folder to write into (default `spool_dir()`).
    """
    root = folder or spool_dir()
    folder = root / local_id
    (folder / "files").mkdir(parents=True, exist_ok=True)
    remember_folder(root)
    files = {}
    for i, (art, local) in enumerate(record["files"].items()):
        dest = folder / "files" / f"{i}_{os.path.basename(local)}"
        if os.path.exists(local) and os.path.abspath(local) != os.path.abspath(dest):
            shutil.copyfile(local, dest)
        if dest.exists():
            files[art] = str(dest)
    if unsent is not None:
        unsent = {**unsent, "files": {a: files[a] for a in unsent["files"] if a in files}}
    entry = {
        "local_id": local_id,
        "run_id": run_id,
        "experiment_id": experiment_id,
        "experiment": experiment,
        "parent_local_id": parent_local_id,
        "parent_run_id": parent_run_id,
        "status": status,
        "tracking_uri": tracking_uri,
        "created_s": time.time(),
        "record": {**record, "files": files},
        "unsent": unsent,
    }
    path = folder / "run.json"
    if path.exists():  # continuing a spooled run (a resumed sweep's parent): keep its place
        try:
            entry["created_s"] = json.loads(path.read_text()).get("created_s", entry["created_s"])
        except (OSError, ValueError):
            pass
    save_entry(entry, path)
    return path
