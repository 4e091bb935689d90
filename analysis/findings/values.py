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
