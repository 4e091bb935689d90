"""Reading numbers the findings rest on: every value from the tracking store is untrusted. A missing
value (NaN, absent) is simply missing; an infinite or negative one is left out with a line naming
the run and the key, so one bad record never sinks the analysis or a finding built on it."""

from __future__ import annotations

import math
from dataclasses import dataclass, field


@dataclass
class Clean:
    notes: list[str] = field(default_factory=list)
    _said: set = field(default_factory=set)

    def value(self, v, what: str, where: str = "", positive: bool = False) -> float | None:
        """`v` as a float, or None when missing (silently) or unusable (with a note): not a
        number, infinite, negative, or zero when `positive`."""
        if v is None or isinstance(v, bool):
            return None
        try:
            x = float(v)
        except (TypeError, ValueError):
            self.say(f"{where}: {what} = {str(v)[:40]!r} is not a number: left out of the findings")
            return None
        if math.isnan(x):
            return None
        if math.isinf(x) or x < 0 or (positive and x == 0):
            need = "positive" if positive else "finite and not negative"
            self.say(f"{where}: {what} = {x!r} is not {need}: left out of the findings")
            return None
        return x

    def say(self, note: str) -> None:
        if note not in self._said:
            self._said.add(note)
            self.notes.append(note)


def finite(x) -> bool:
    return x is not None and isinstance(x, (int, float)) and math.isfinite(x)


def ratio_interval(ratio: float, rel_a: float | None, rel_b: float | None) -> list[float] | None:
    """The 95 % interval of `ratio` = a / b (or b / a) of two independent means whose 95 % CIs
    have relative half-widths rel_a and rel_b: on the log scale (delta method: the half-width of
    log a is rel_a), log ratio ± sqrt(rel_a² + rel_b²). Never below 0; None when either is unknown."""
    if rel_a is None or rel_b is None:
        return None
    return log_interval(ratio, math.hypot(rel_a, rel_b))


def log_interval(x: float, rel: float) -> list[float]:
    """[x / e^rel, x x e^rel]: a relative 95 % half-width `rel` taken on the log scale."""
    return [x * math.exp(-rel), x * math.exp(rel)]


def excludes_one(interval: list[float] | None) -> bool:
    return interval is not None and (interval[0] > 1 or interval[1] < 1)
