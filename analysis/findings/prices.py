"""USD per hour per environment or device: the default table of on-demand cloud GPU prices and the
`--prices FILE` CSV that overrides it. Pure: text in, rows out (analysis/app.py reads the file).

A price is per device (one GPU; one machine for a CPU environment) per hour, on demand. Every
default row names its provider, the page it was read from and when: a GPU without a sourced price
is not in the table (give it with --prices). Prices change: read the date, and pass your own.
"""

from __future__ import annotations

import csv
import io
import math
import re
from dataclasses import dataclass

from common.errors import UsageError

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
    p = re.escape(pattern.strip())
    return (
        bool(p) and re.search(rf"(?<![0-9A-Za-z]){p}(?![0-9A-Za-z])", device_name, re.I) is not None
    )


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
    cols = [c.strip() for c in (reader.fieldnames or [])]
    missing = [c for c in ("match", "usd_per_hour") if c not in cols]
    if missing:
        raise UsageError(
            f"--prices {path}: needs the columns match,usd_per_hour (missing {', '.join(missing)}; "
            f"found {', '.join(cols) or 'no header'})"
        )
    rows = []
    for line, raw in enumerate(reader, start=2):
        row = {str(k).strip(): (v or "").strip() for k, v in raw.items() if k is not None}
        if not any(row.values()):
            continue
        if not row.get("match"):
            raise UsageError(
                f"--prices {path}, line {line}: empty match (an env label or device name)"
            )
        try:
            usd = float(row["usd_per_hour"])
        except ValueError:
            usd = math.nan
        if not (math.isfinite(usd) and usd > 0):
            raise UsageError(
                f"--prices {path}, line {line}: usd_per_hour {row['usd_per_hour']!r} is not a "
                "positive number of US dollars per hour"
            )
        source = row.get("source") or f"--prices {path}, line {line}"
        rows.append(Price(row["match"], usd, source))
    if not rows:
        raise UsageError(f"--prices {path}: no price rows under the header")
    return tuple(rows)


def read_prices(path: str) -> PriceTable:
    """The PriceTable for --prices `path` ('' = the defaults alone); an unreadable file is a
    UsageError."""
    if not path:
        return PriceTable()
    try:
        with open(path, encoding="utf-8") as fh:
            text = fh.read()
    except OSError as exc:
        raise UsageError(f"--prices {path}: cannot read it ({exc.strerror or exc})") from None
    except UnicodeDecodeError:
        raise UsageError(f"--prices {path}: not a UTF-8 text file (expected a CSV)") from None
    return PriceTable(parse_prices(text, path))
