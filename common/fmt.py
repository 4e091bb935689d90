"""Display formatting for every command (rounding happens only here, at the edge)."""

from __future__ import annotations

import hashlib
import math

_PREFIXES = [(1e15, "P"), (1e12, "T"), (1e9, "G"), (1e6, "M"), (1e3, "k")]


def si(value: float | None, unit: str = "", digits: int = 3) -> str:
    """30.3e12, 'FLOP/s' -> '30.3 TFLOP/s' (decimal prefixes: k = 1000). '' for missing values."""
    if value is None or not isinstance(value, (int, float)) or not math.isfinite(value):
        return ""
    for scale, prefix in _PREFIXES:
        if abs(value) >= scale:
            return f"{value / scale:.{digits}g} {prefix}{unit}"
    return f"{value:.{digits}g} {unit}".rstrip()


def num(value: float | None, digits: int = 3) -> str:
    """`digits` significant figures, never in exponent notation, no trailing zeros:
    11034 -> '11000', 0.01234 -> '0.0123', 410.02 -> '410'."""
    if value is None or not isinstance(value, (int, float)) or not math.isfinite(value):
        return ""
    if value == 0:
        return "0"
    decimals = digits - 1 - math.floor(math.log10(abs(value)))
    rounded = round(value, decimals)
    if rounded != 0 and math.floor(math.log10(abs(rounded))) > math.floor(math.log10(abs(value))):
        decimals -= 1  # 99.96 -> 100, not 100.0
        rounded = round(value, decimals)
    text = f"{rounded:.{max(decimals, 0)}f}"
    return text.rstrip("0").rstrip(".") if "." in text else text


def duration(seconds: float | None) -> str:
    """A time in s or ms chosen by its magnitude, never in exponent notation: 2.37 -> '2.37 s',
    0.412 -> '412 ms', 0.00005 -> '0.05 ms'."""
    if seconds is None or not isinstance(seconds, (int, float)) or not math.isfinite(seconds):
        return ""
    if abs(seconds) >= 1:
        return f"{num(seconds)} s"
    return f"{num(seconds * 1e3)} ms"


def ci95(rel: float | None) -> str:
    """The one way a page names an uncertainty: the 95 % confidence interval of the mean step time
    as a share of it, `95% CI ±79.4%` ('' when missing). Every rate made from that mean (samples/s,
    FLOP/s) carries the same relative interval."""
    if rel is None or not isinstance(rel, (int, float)) or not math.isfinite(rel):
        return ""
    return f"95% CI ±{num(100 * rel)}%"


def pct(value: float | None) -> str:
    if value is None or not isinstance(value, (int, float)) or not math.isfinite(value):
        return ""
    return f"{100 * value:.1f}%"


SLUG_MAX_CHARS = 60


def short_id(run_id) -> str:
    """A run id as text names it: its first 8 characters (unique among a store's runs in practice;
    the whole id is in every file and link)."""
    return str(run_id)[:8]


def slug(text: str) -> str:
    """A file-name-safe version of an environment label (or any user text): at most SLUG_MAX_CHARS
    characters; a longer one is cut and ends with a hash of the whole text, so that two long labels
    with the same beginning still get different names (runs recorded before labels were bounded may
    have labels of any length)."""
    out = "".join(c if c.isalnum() or c in "-_." else "_" for c in str(text))
    out = out.strip("_.") or "env"
    if len(out) > SLUG_MAX_CHARS:
        digest = hashlib.sha256(str(text).encode()).hexdigest()[:8]
        out = f"{out[: SLUG_MAX_CHARS - 9]}-{digest}"
    return out


FORMULA_PREFIXES = ("=", "+", "-", "@", "\t", "\r")
"""What makes a spreadsheet read a CSV cell as a formula (OWASP, "CSV injection")."""


def csv_cell(value):
    """`value` as a spreadsheet takes it literally: text that starts with a formula prefix and is
    not a number gets a leading `'` (an env label or module name `=HYPERLINK(...)` stays text).
    Numbers, and text that is a number (`-1.5`), are unchanged."""
    if not isinstance(value, str) or not value.startswith(FORMULA_PREFIXES):
        return value
    try:
        float(value)
    except ValueError:
        return "'" + value
    return value


def csv_frame(frame):
    """A copy of DataFrame `frame` whose text cells are `csv_cell`'s (write it with to_csv)."""
    out = frame.copy()
    for col in out.columns:
        if out[col].dtype.kind not in "biufcmM":  # text (object or string dtype)
            out[col] = out[col].map(csv_cell)
    return out
