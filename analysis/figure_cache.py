"""Figures kept between analyses by a digest of what they draw: a repeat draws only the figures
whose inputs changed and copies the others.

    $ROOFLINE_CACHE_DIR (default ~/.cache/roofline-bench)/figures/<digest>.png

A figure's digest covers its function's name, every argument but the output path (DataFrames by
their columns, dtypes and the hash of each row in order; Roofs field by field), the source of the
modules that draw (DRAWING_CODE) and matplotlib's version: a change to any of them draws the figure
anew. An argument of a type digest() does not know makes the figure uncacheable (it is drawn every
time) rather than cached under a digest that could miss a change. The folder keeps the KEEP most
recently used figures. Nothing here imports matplotlib.
"""

from __future__ import annotations

import dataclasses
import hashlib
import os
import shutil
import struct
import zlib
from pathlib import Path

import numpy as np
import pandas as pd

from analysis.fetch import segments

KEEP = 400
"""figures kept in the folder, the most recently used first (about 100 kB each)."""
FORMAT = 1
DRAWING_CODE = [
    "analysis/figures.py",
    "analysis/plots.py",
    "analysis/scaling_plot.py",
    "roofline/plot.py",
    "roofline/style.py",
    "roofline/labels.py",
    "roofline/model.py",
    "common/fmt.py",
]
"""the modules whose source decides how a figure looks (relative to the repository root)."""
ROOT = Path(__file__).resolve().parents[1]


class Uncacheable(TypeError):
    """An argument digest() cannot describe by value."""


def _pandas_bytes(obj) -> bytes:
    """The row hashes of a DataFrame or Series. Object columns holding unhashable values (a
    point's `run_ids` list) are hashed by each value's repr."""
    try:
        return pd.util.hash_pandas_object(obj, index=False).to_numpy().tobytes()
    except TypeError:
        if isinstance(obj, pd.Series):
            obj = obj.map(repr) if obj.dtype == object else obj
        else:
            obj = obj.apply(lambda c: c.map(repr) if c.dtype == object else c)
        return pd.util.hash_pandas_object(obj, index=False).to_numpy().tobytes()


def _feed(h, obj) -> None:
    """Feed `obj` to hash `h` by value, its type included."""
    if isinstance(obj, pd.DataFrame):
        h.update(repr(("df", list(map(str, obj.columns)), list(map(str, obj.dtypes)))).encode())
        h.update(_pandas_bytes(obj))
    elif isinstance(obj, pd.Series):
        h.update(repr(("series", str(obj.name), str(obj.dtype))).encode())
        h.update(_pandas_bytes(obj))
    elif isinstance(obj, np.ndarray):
        h.update(repr(("array", str(obj.dtype), obj.shape)).encode())
        h.update(np.ascontiguousarray(obj).tobytes())
    elif isinstance(obj, dict):
        h.update(f"dict{len(obj)}".encode())
        for k in sorted(obj, key=repr):
            _feed(h, k)
            _feed(h, obj[k])
    elif isinstance(obj, (list, tuple, set, frozenset)):
        items = sorted(obj, key=repr) if isinstance(obj, (set, frozenset)) else obj
        h.update(f"{type(obj).__name__}{len(obj)}".encode())
        for v in items:
            _feed(h, v)
    elif dataclasses.is_dataclass(obj) and not isinstance(obj, type):
        h.update(type(obj).__qualname__.encode())
        for f in dataclasses.fields(obj):
            _feed(h, f.name)
            _feed(h, getattr(obj, f.name))
    elif obj is None or isinstance(obj, (str, int, float, bool, np.generic, Path)):
        h.update(f"{type(obj).__name__}:{obj!r};".encode())
    else:
        raise Uncacheable(f"no digest for a {type(obj).__name__}")


def _code_digest() -> str:
    h = hashlib.sha1(f"format {FORMAT}".encode())
    try:
        from importlib.metadata import version

        h.update(version("matplotlib").encode())
    except Exception:  # noqa: BLE001 - no metadata: the sources still count
        pass
    for rel in DRAWING_CODE:
        try:
            h.update((ROOT / rel).read_bytes())
        except OSError:
            h.update(f"missing {rel}".encode())
    return h.hexdigest()


def digest(function: str, args: tuple, code: str = "") -> str | None:
    """The digest of figure `function` drawn from `args` (the output path left out), or None when
    an argument cannot be described by value."""
    h = hashlib.sha1(f"{code}|{function}|".encode())
    try:
        _feed(h, args)
    except Uncacheable:
        return None
    return h.hexdigest()


_PNG_SIGNATURE = b"\x89PNG\r\n\x1a\n"


def whole_png(data: bytes) -> bool:
    """Whether `data` is a whole PNG file: the signature, then chunks whose CRCs match, ending with
    IEND at the end of the data. A figure cut to 100 bytes was copied into reports as "unchanged"
    until `--cache refresh`."""
    if not data.startswith(_PNG_SIGNATURE):
        return False
    pos = len(_PNG_SIGNATURE)
    while pos + 12 <= len(data):
        (length,) = struct.unpack(">I", data[pos : pos + 4])
        end = pos + 12 + length
        kind_and_body = data[pos + 4 : end - 4]
        if (
            end > len(data)
            or zlib.crc32(kind_and_body) != struct.unpack(">I", data[end - 4 : end])[0]
        ):
            return False
        if kind_and_body[:4] == b"IEND":
            return end == len(data)
        pos = end
    return False


class FigureCache:
    """The folder of kept figures, and what one analysis took from it and put in it."""

    def __init__(self, folder: Path) -> None:
        self.folder = folder
        self.code = _code_digest()
        self.reused: list[Path] = []
        self.drawn: list[Path] = []

    @classmethod
    def for_mode(cls, mode: str) -> FigureCache | None:
        """The cache for --cache `mode`: none for "off"; emptied first for "refresh"."""
        if mode == "off":
            return None
        folder = segments.root() / "figures"
        if mode == "refresh":
            shutil.rmtree(folder, ignore_errors=True)
        return cls(folder)

    def key(self, function: str, args: tuple) -> str | None:
        return digest(function, args, self.code)

    def restore(self, key: str | None, path: Path) -> bool:
        """Copy the kept figure of `key` to `path`; False when there is none."""
        if key is None:
            return False
        kept = self.folder / f"{key}.png"
        try:
            data = kept.read_bytes() if kept.is_file() else b""
            if not whole_png(data):  # cut, emptied or overwritten: drawn again
                kept.unlink(missing_ok=True)
                return False
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_bytes(data)
            os.utime(kept)  # recently used: kept longest
        except OSError:
            return False
        self.reused.append(path)
        return True

    def keep(self, key: str | None, path: Path) -> None:
        """Keep the figure just drawn at `path` under `key` (nothing when the disk refuses)."""
        self.drawn.append(path)
        if key is None:
            return
        try:
            self.folder.mkdir(parents=True, exist_ok=True)
            tmp = self.folder / f"{key}.{os.getpid()}.tmp"
            shutil.copyfile(path, tmp)
            os.replace(tmp, self.folder / f"{key}.png")
        except OSError:
            pass

    def prune(self, keep: int = KEEP) -> None:
        """Remove all but the `keep` most recently used figures."""
        try:
            kept = sorted(self.folder.glob("*.png"), key=lambda p: p.stat().st_mtime, reverse=True)
        except OSError:
            return
        for p in kept[keep:]:
            p.unlink(missing_ok=True)
