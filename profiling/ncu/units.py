"""Nsight Compute's units and number formats -> SI values.

Unit prefixes are scaled by 1000 as ncu prints them (``Kbyte`` = 1,000 byte; ``usecond`` = 1e-6
s); values may carry thousands separators (``"134,221,568"``) or be ``n/a``. Pure.
"""

from __future__ import annotations

import math
import re
from functools import lru_cache

NA = math.nan  # what an `n/a` metric value becomes; see NcuReport.na

# SI scale of unit prefixes (decimal, as ncu prints them: Kbyte = 1,000 byte).
PREFIXES = {"": 1.0, "K": 1e3, "k": 1e3, "M": 1e6, "G": 1e9, "T": 1e12, "P": 1e15}
TIME_UNITS = {
    "ns": 1e-9,
    "nsec": 1e-9,
    "nsecond": 1e-9,
    "us": 1e-6,
    "usec": 1e-6,
    "usecond": 1e-6,
    "ms": 1e-3,
    "msec": 1e-3,
    "msecond": 1e-3,
    "s": 1.0,
    "sec": 1.0,
    "second": 1.0,
}
_PREFIXED = re.compile(
    r"^(?P<p>[KkMGTP])(?P<base>byte|inst|sector|cycle|warp|thread|request|transaction|block|flop|op|ops|hz)$",
    re.IGNORECASE,
)
_THOUSANDS = re.compile(r"^[+-]?\d{1,3}(,\d{3})+(\.\d*)?([eE][+-]?\d+)?$")


@lru_cache(maxsize=512)
def unit_scale(unit: str) -> tuple[float, str]:
    """(factor to SI, base unit) for an ncu unit: "Kbyte" -> (1e3, "byte"), "usecond" -> (1e-6,
    "second"), "Gbyte/second" -> (1e9, "byte/second"), "inst" -> (1, "inst")."""
    u = (unit or "").strip()
    if not u:
        return 1.0, ""
    num, sep, den = u.partition("/")
    s_num, b_num = _scale_one(num)
    if not sep:
        return s_num, b_num
    s_den, b_den = _scale_one(den)
    return s_num / s_den, f"{b_num}/{b_den}"


def _scale_one(u: str) -> tuple[float, str]:
    u = u.strip()
    if u in TIME_UNITS:
        return TIME_UNITS[u], "second"
    m = _PREFIXED.match(u)
    if m:
        return PREFIXES[m["p"]], m["base"].lower()
    return 1.0, u


def parse_number(text: str) -> float | None:
    """A metric value as float: thousands separators removed, ``n/a`` -> NaN, empty -> None.

    Raises ValueError when the text is not a number (a string-valued metric)."""
    t = (text or "").strip()
    if not t:
        return None
    if t.lower() == "n/a":
        return NA
    if "," in t:
        if not _THOUSANDS.match(t):
            raise ValueError(f"not a number: {t!r}")
        t = t.replace(",", "")
    return float(t)
