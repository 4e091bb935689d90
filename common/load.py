"""The machine's load while something measures: the 1-minute load average (os.getloadavg) when
measuring starts and the highest seen while it runs, sampled every `interval_s` by a daemon thread,
and the logical CPUs it compares with. Logged as metrics `load_average_1m_start`,
`load_average_1m_max` and `cpu_count` by peaks runs (analysis trusts a peaks run measured under
low load over one measured on a busy machine: roofline/ceilings.py, docs/peaks.md) and by train runs
over their measured steps (a step-time change that coincides with a change of load is laid at the
load's door: analysis/history.py). Standard library only.

Whoever reads those figures back reads them by one value rule, `load_value` (LOAD_BOUNDS): a run's
own roofline (roofline/ceilings.py) and the analysis (analysis/screen.py) alike. A figure that is no
measurement (negative, not finite, 1e9 CPUs) reads as not recorded in both; a run page once took
a load average of -1 or 1e9 CPUs for a quiet run while the analysis blanked it, and the two named
different ceilings.
"""

from __future__ import annotations

import os
import threading

from common.stats import as_float

LOAD_METRICS = ("load_average_1m_start", "load_average_1m_max", "cpu_count")
"""what LoadSampler.metrics logs"""
MAX_LOAD_AVERAGE = 1e6
"""The highest load average a machine reports: a million runnable tasks (Linux's 1-minute load
average counts the tasks running or waiting to run)."""
MAX_CPU_COUNT = 65536
"""The most logical CPUs a machine has: 8x Linux's largest NR_CPUS configuration (8,192)."""
LOAD_BOUNDS: dict[str, tuple[float, bool, float]] = {
    "load_average_1m_start": (0.0, False, MAX_LOAD_AVERAGE),
    "load_average_1m_max": (0.0, False, MAX_LOAD_AVERAGE),
    "cpu_count": (1.0, False, MAX_CPU_COUNT),
}
"""What each of LOAD_METRICS may be (least, whether only above it, most): the value rule of every
reader (roofline/ceilings.py for a run's own roofline, analysis/screen.py for the analysis)."""


def load_value(key: str, value) -> float | None:
    """`value` of load metric `key` as a float, None when it is absent or no measurement
    (LOAD_BOUNDS, common.stats.as_float's convention): such a run's load is 'not recorded' in
    every reader."""
    v = as_float(value)
    low, strict, high = LOAD_BOUNDS[key]
    if v is None or v < low or (strict and v <= low) or v > high:
        return None
    return v


def load_1m() -> float | None:
    """The 1-minute load average, or None where the system has none (Windows)."""
    try:
        return float(os.getloadavg()[0])
    except (AttributeError, OSError):
        return None


class LoadSampler:
    """`with LoadSampler() as load: ...` then `load.metrics()`."""

    def __init__(self, interval_s: float = 1.0) -> None:
        self.interval_s = interval_s
        self.start: float | None = None
        self.max: float | None = None
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def _sample(self) -> None:
        v = load_1m()
        if v is not None:
            self.max = v if self.max is None else max(self.max, v)

    def _loop(self) -> None:
        while not self._stop.wait(self.interval_s):
            self._sample()

    def __enter__(self) -> "LoadSampler":
        self.start = load_1m()
        self._sample()
        self._thread = threading.Thread(target=self._loop, name="load-sampler", daemon=True)
        self._thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=2 * self.interval_s)
        self._sample()

    def metrics(self) -> dict[str, float]:
        """load_average_1m_start, load_average_1m_max and cpu_count, where known."""
        m: dict[str, float] = {}
        if self.start is not None:
            m["load_average_1m_start"] = self.start
        if self.max is not None:
            m["load_average_1m_max"] = self.max
        if os.cpu_count():
            m["cpu_count"] = float(os.cpu_count())
        return m
