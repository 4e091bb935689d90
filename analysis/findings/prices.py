"""USD per hour per environment or device: the default table of on-demand cloud GPU prices and the
`--prices FILE` CSV that overrides it. Pure: text in, rows out (analysis/app.py reads the file).

A price is per device (one GPU; one machine for a CPU environment) per hour, on demand. Every
default row names its provider, the page it was read from and when: a GPU without a sourced price
is not in the table (give it with --prices). Prices change: read the date, and pass your own.
"""

from __future__ import annotations

import csv
import functools
import io
import math
import os
import re
import stat
from dataclasses import dataclass

from analysis.screen import price_problem
from common.errors import UsageError

MAX_PRICES_BYTES = 16 * 2**20
"""The largest --prices file read (16 MiB, ~1 M rows): /dev/zero grew to 3.5 GB in 2.7 s."""
MAX_FIELD_CHARS = 1000
"""The longest cell of a --prices file (a match, a price, a source)."""
_NUMBER = re.compile(r"[+]?(\d+\.?\d*|\.\d+)([eE][+-]?\d+)?")
"""A price as written: digits, a point, an exponent (not `1_000`, which float() reads as 1000)."""

IMAGENET_1K_TRAIN_IMAGES = 1_281_167
"""images in the ImageNet-1k (ILSVRC 2012) training set: one epoch."""


@dataclass(frozen=True)
class Price:
    match: str
    """an env label (whole, case-insensitive) or a device-name pattern (see `matches_device`)."""
    usd_per_hour: float
    source: str
    """where the price comes from: a provider, page and date, or the --prices file and line."""


# Lambda on-demand prices per GPU (1x instances where Lambda offers one, else the per-GPU price of
# its smallest multi-GPU instance), transcribed from https://lambda.ai/instances on 2026-09-20 by
# api-evangelist/lambda-labs (plans/lambda-labs-plans-pricing.yml, commit 1929382, "every price_text
# was found verbatim in the fetched page text"), read for this table on 2026-11-25.
_LAMBDA = "Lambda on-demand, https://lambda.ai/instances (page of 2026-09-20, read 2026-11-25)"
# Modal's per-second GPU prices (https://modal.com/pricing), T4 $0.000164/s and L4 $0.000222/s,
# as quoted on 2026-05-07 by https://techbytes.app/posts/serverless-gpu-pricing-matrix-modal-replicate-lambda-2026/
# ($0.5904/h, $0.7992/h) and listed alike in api-evangelist/modal plans/modal-plans-pricing.yml;
# read for this table on 2026-11-25. Lambda offers neither GPU.
_MODAL = (
    "Modal per-second GPU price, https://modal.com/pricing (as quoted 2026-05-07, read 2026-11-25)"
)
DEFAULT_PRICES: tuple[Price, ...] = (
    Price("H100 80GB HBM3", 4.29, f"{_LAMBDA}: 1x NVIDIA H100 SXM"),
    Price("H100 PCIe", 3.29, f"{_LAMBDA}: 1x NVIDIA H100 PCIe"),
    Price("GH200", 2.29, f"{_LAMBDA}: 1x NVIDIA GH200"),
    Price("B200", 6.99, f"{_LAMBDA}: 1x NVIDIA B200 SXM6"),
    Price("A100-SXM4-80GB", 2.79, f"{_LAMBDA}: 8x NVIDIA A100 SXM 80 GB, per GPU"),
    Price("A100-SXM4-40GB", 1.99, f"{_LAMBDA}: 8x NVIDIA A100 SXM 40 GB, per GPU"),
    Price("V100-SXM2-16GB", 0.79, f"{_LAMBDA}: 8x NVIDIA Tesla V100, per GPU"),
    Price("A10", 1.29, f"{_LAMBDA}: 1x NVIDIA A10"),
    Price("RTX A6000", 1.09, f"{_LAMBDA}: 4x NVIDIA A6000, per GPU"),
    Price("Quadro RTX 6000", 0.69, f"{_LAMBDA}: 1x NVIDIA Quadro RTX 6000"),
    Price("T4", 0.5904, f"{_MODAL}: NVIDIA T4"),
    Price("L4", 0.7992, f"{_MODAL}: NVIDIA L4"),
)


def matches_device(pattern: str, device_name: str) -> bool:
    """Whether `pattern` occurs in `device_name` as whole words, case-insensitively: "A10" matches
    "NVIDIA A10" but not "NVIDIA A100-SXM4-40GB" or "NVIDIA A10G"; "L4" not "NVIDIA L40S"."""
    compiled = _device_pattern(pattern.strip())
    return compiled is not None and compiled.search(device_name) is not None


@functools.lru_cache(maxsize=None)
def _device_pattern(pattern: str) -> re.Pattern | None:
    """`pattern` compiled once (compiled per row per lookup, a 62,499-row file took 15.5 s for one
    point's lookup)."""
    p = re.escape(pattern)
    return re.compile(rf"(?<![0-9A-Za-z]){p}(?![0-9A-Za-z])", re.I) if p else None


@dataclass
class PriceTable:
    """The user's rows (from --prices) first, then the defaults (device names only)."""

    user: tuple[Price, ...] = ()
    defaults: tuple[Price, ...] = DEFAULT_PRICES

    def lookup(self, env_label: str, device_name: str) -> Price | None:
        """The price of an environment: a user row naming its env label, else the longest user
        pattern matching its device name, else the longest default pattern."""
        for row in self.user:
            if row.match.strip().lower() == str(env_label).strip().lower():
                return row
        for rows in (self.user, self.defaults):
            hits = [r for r in rows if matches_device(r.match, str(device_name))]
            if hits:
                return max(hits, key=lambda r: len(r.match))
        return None


def parse_prices(text: str, path: str) -> tuple[Price, ...]:
    """The rows of a --prices CSV (columns `match`, `usd_per_hour`; an optional `source`). A
    missing column, an empty match or a price that is not a positive finite number is a
    UsageError naming the file and line."""
    reader = csv.DictReader(io.StringIO(text.lstrip("\ufeff")))
    try:
        cols = [c.strip() for c in (reader.fieldnames or [])]
    except csv.Error as exc:
        raise UsageError(f"--prices {path}, line 1: not a CSV header ({exc})") from None
    missing = [c for c in ("match", "usd_per_hour") if c not in cols]
    if missing:
        raise UsageError(
            f"--prices {path}: needs the columns match,usd_per_hour (missing {', '.join(missing)}; "
            f"found {', '.join(cols) or 'no header'})"
        )
    rows, seen = [], {}
    for line, raw in _rows(reader, path):
        row = {str(k).strip(): (v or "").strip() for k, v in raw.items() if k is not None}
        if not any(row.values()):
            continue
        if not row.get("match"):
            raise UsageError(
                f"--prices {path}, line {line}: empty match (an env label or device name)"
            )
        where = f"--prices {path}, line {line}"
        key = row["match"].lower()
        if key in seen:
            raise UsageError(
                f"{where}: {row['match'][:60]!r} is priced on line {seen[key]} already: keep one row"
            )
        seen[key] = line
        rows.append(
            Price(row["match"], _usd(row["usd_per_hour"], where), row.get("source") or where)
        )
    if not rows:
        raise UsageError(f"--prices {path}: no price rows under the header")
    return tuple(rows)


def _rows(reader: csv.DictReader, path: str):
    """(line, row) of `reader`; a cell longer than MAX_FIELD_CHARS is a UsageError, not csv's
    `field larger than field limit` traceback."""
    line = 1
    try:
        for line, raw in enumerate(reader, start=2):
            if any(len(v or "") > MAX_FIELD_CHARS for v in raw.values() if isinstance(v, str)):
                raise csv.Error(f"a cell longer than {MAX_FIELD_CHARS} characters")
            yield line, raw
    except csv.Error as exc:
        raise UsageError(f"--prices {path}, line {line + 1}: not a price row ({exc})") from None


def _usd(text: str, where: str) -> float:
    """A usd_per_hour cell as a number, or a UsageError naming `where`."""
    usd = float(text) if _NUMBER.fullmatch(text) else math.nan
    why = price_problem(usd)
    if why:
        raise UsageError(f"{where}: usd_per_hour {text[:40]!r} {why}")
    return usd


def read_prices(path: str) -> PriceTable:
    """The PriceTable for --prices `path` ('' = the defaults alone); an unreadable file is a
    UsageError."""
    if not path:
        return PriceTable()
    try:
        _check_regular(path, os.stat(path))  # before open: opening a FIFO waits for a writer
        with open(path, encoding="utf-8") as fh:
            text = fh.read(MAX_PRICES_BYTES + 1)
    except OSError as exc:
        raise UsageError(f"--prices {path}: cannot read it ({exc.strerror or exc})") from None
    except UnicodeDecodeError:
        raise UsageError(f"--prices {path}: not a UTF-8 text file (expected a CSV)") from None
    if len(text) > MAX_PRICES_BYTES:
        raise UsageError(
            f"--prices {path}: larger than {MAX_PRICES_BYTES >> 20} MiB (a price CSV?)"
        )
    return PriceTable(parse_prices(text, path))


def _check_regular(path: str, st: os.stat_result) -> None:
    """A --prices path is a file: a device (/dev/zero), a FIFO or a folder is a UsageError."""
    if not stat.S_ISREG(st.st_mode):
        what = "a folder" if stat.S_ISDIR(st.st_mode) else "a device, pipe or socket"
        raise UsageError(f"--prices {path}: is {what}, not a file (give a CSV file)")
