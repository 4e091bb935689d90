"""Change points in one series of runs: where its mean step time steps, and how sure that is.

Pure statistics on arrays (numpy). A series is the runs of one configuration on one environment
in run order; each run is one value, the log of its mean step time, with its own noise: the
variance of that log from the run's 95 % CI (`step_time_ci95_rel` / t), plus the run-to-run noise
the series shows between neighbouring runs (`run_noise`). The runs are weighted by the inverse of
that variance, so a run its own CI calls noisy counts less.

Search: binary segmentation, the split that explains the most weighted variance (with equal
weights, the split ruptures.Binseg finds with its l2 cost: tests/test_history.py checks they
agree), then the same within each side. Test: each split is tested within the segment it cuts by
a permutation test of that same statistic, the largest weighted gain over every admissible split
(each side at least `min_side` runs): the runs of the segment shuffled, the p-value the share of
shuffles that explain as much (E-divisive's approach, Matteson & James 2014, as Apache Otava uses
it). The choice of the split is inside the statistic, so scanning every split does not make a
false alarm likelier than `alpha`. A side whose test fails is not searched further. The shuffles
are fixed per series length (`shuffles`): the same series gives the same answer everywhere.

Why neither library runs here: apache-otava 0.8 (E-divisive itself) pins numpy 2.2.0 and scipy <
1.17 on Python 3.11 (this project has numpy 2.4 and scipy 1.17) and brings BigQuery, Slack and
PostgreSQL clients; ruptures 1.1.10 installs cleanly, but importing it imports scipy.stats,
scipy.spatial and scipy.signal (7-30 s measured at this machine's load of 5-13, against the 3 s
a whole repeat analysis may take), and its Binseg would only find the split this module's
statistic already computes for the test. So the search is that statistic's argmax, and ruptures
is the reference the tests hold it to (requirements-dev.txt).
"""

from __future__ import annotations

import functools
from dataclasses import dataclass

import numpy as np

MIN_SIDE = 4
"""runs on each side of a change at least: fewer cannot reach p < 0.05 with a permutation test
of the largest split (4 + 4 runs: 70 ways to cut them; 3 + 3: 20)"""
ALPHA = 0.05
"""a split is a change when its test's p-value is below this: the false-alarm rate per series
and per test (docs/analysis.md, "What changed over time", measured there)"""
N_PERM = 999
"""shuffles per test (p-values from 0.001)"""
MAD_TO_SD = 0.6745
"""the median of |N(0, 1)|: a median absolute value / this estimates an SD"""
VAR_FLOOR = 1e-12
"""the least variance a run's log step time is given (identical runs would otherwise weigh inf)"""


def needed(min_side: int = MIN_SIDE) -> int:
    """Runs a series needs before a change can be found in it."""
    return 2 * min_side


def own_variance(ci95_rel: np.ndarray, steps: np.ndarray) -> np.ndarray:
    """Each run's variance of its log mean step time from its own 95 % CI half-width (relative,
    Student t over its `steps`): (ci / t)². 0 where a run has no CI (the run-to-run noise alone)."""
    from common.stats import t_quantile_975

    dof = np.where(np.isfinite(steps) & (steps >= 2), steps - 1, 30).astype(int)
    t = np.array([t_quantile_975(int(d)) for d in dof]) if len(dof) else np.zeros(0)
    var = (np.asarray(ci95_rel, float) / t) ** 2
    return np.where(np.isfinite(var), var, 0.0)


def run_noise(y: np.ndarray, own: np.ndarray) -> np.ndarray:
    """The run-to-run variance of log step time beyond what the runs' own CIs say, per series
    (along the last axis): from the differences of neighbouring runs (each has twice a run's
    variance when nothing changed between them; their median absolute value is robust to the few
    that straddle a change), less the runs' median own variance; never below 0."""
    d = np.abs(np.diff(y, axis=-1))
    if d.shape[-1] == 0:
        return np.zeros(y.shape[:-1])
    total = (np.median(d, axis=-1) / MAD_TO_SD) ** 2 / 2
    return np.maximum(0.0, total - np.median(own, axis=-1))


def weights(y: np.ndarray, own: np.ndarray) -> np.ndarray:
    """Each run's weight, 1 / (its own variance + its series' run-to-run variance)."""
    return 1.0 / np.maximum(own + run_noise(y, own)[..., None], VAR_FLOOR)


def max_gain(y: np.ndarray, w: np.ndarray, min_side: int) -> np.ndarray:
    """The largest weighted between-sides sum of squares over every split leaving each side at
    least `min_side` runs, along the last axis (runs in order; leading axes: series, shuffles):
    W_L W_R / W (mean_L - mean_R)², the cost WeightedL2 saves by the split."""
    n = y.shape[-1]
    cw, cwy = np.cumsum(w, axis=-1), np.cumsum(w * y, axis=-1)
    k = np.arange(min_side, n - min_side + 1) - 1  # last index of the left side
    wl, sl = cw[..., k], cwy[..., k]
    wt, st = cw[..., -1:], cwy[..., -1:]
    wr, sr = wt - wl, st - sl
    gain = (sl / wl - sr / wr) ** 2 * wl * wr / wt
    return gain.max(axis=-1)


@functools.lru_cache(maxsize=64)
def shuffles(n: int, n_perm: int) -> np.ndarray:
    """`n_perm` fixed shuffles of n runs, seeded by n and n_perm: the same answer on every
    analysis and machine (drawn before any data is seen, so each test stays a permutation test)."""
    rng = np.random.default_rng([n, n_perm])
    return rng.permuted(np.tile(np.arange(n), (n_perm, 1)), axis=1)


CHUNK = 64
"""series tested at once (64 series x 999 shuffles x 20 runs: 10 MB a temporary)"""
FIRST_PERM = 99
"""shuffles of the first stage: a series whose p-value is above FIRST_STOP after them is not
tested further (a p-value from 99 shuffles above 0.25 is below 0.05 after 999 with a chance of
about 1e-9), so most series without a change cost a tenth of the test"""
FIRST_STOP = 0.25


def _p(y2: np.ndarray, w2: np.ndarray, min_side: int, n_perm: int) -> np.ndarray:
    observed = max_gain(y2, w2, min_side)
    order = shuffles(y2.shape[1], n_perm)
    out = np.empty(len(y2))
    for lo in range(0, len(y2), CHUNK):
        hi = lo + CHUNK
        shuffled = max_gain(y2[lo:hi, order], w2[lo:hi, order], min_side)
        beats = (shuffled >= observed[lo:hi, None] * (1 - 1e-9)).sum(axis=1)
        out[lo:hi] = (1 + beats) / (n_perm + 1)
    return out


def permutation_p(y: np.ndarray, w: np.ndarray, min_side: int, n_perm: int = N_PERM):
    """p-value of the largest split of each series (rows of y and w; or one series, 1-D) against
    shuffles of its runs, (1 + shuffles explaining as much) / (1 + shuffles): FIRST_PERM shuffles,
    then `n_perm` for the series whose p-value is FIRST_STOP or less after those."""
    y2, w2 = np.atleast_2d(y), np.atleast_2d(w)
    out = _p(y2, w2, min_side, min(FIRST_PERM, n_perm))
    more = np.flatnonzero(out <= FIRST_STOP)
    if n_perm > FIRST_PERM and len(more):
        out[more] = _p(y2[more], w2[more], min_side, n_perm)
    return out if np.ndim(y) > 1 else float(out[0])


def first_tests(
    ys: list[np.ndarray], owns: list[np.ndarray], min_side: int = MIN_SIDE, n_perm: int = N_PERM
) -> np.ndarray:
    """p-value of the test of each whole series (the first test `find` makes) for many series at
    once, the series of one length through one array. NaN for a series too short to test."""
    out = np.full(len(ys), np.nan)
    by_len: dict[int, list[int]] = {}
    for i, y in enumerate(ys):
        if len(y) >= needed(min_side):
            by_len.setdefault(len(y), []).append(i)
    for idx in by_len.values():
        y = np.stack([ys[i] for i in idx])
        out[idx] = permutation_p(y, weights(y, np.stack([owns[i] for i in idx])), min_side, n_perm)
    return out


@dataclass
class Split:
    """A change point: runs [lo, index) before it and [index, hi) after, in run order."""

    index: int
    p_value: float
    lo: int
    hi: int


def best_split(y: np.ndarray, w: np.ndarray, min_side: int) -> int:
    """Where the largest split of one series falls: the number of runs on its left (ties: the
    later split, as ruptures.Binseg breaks them)."""
    n = len(y)
    cw, cwy = np.cumsum(w), np.cumsum(w * y)
    k = np.arange(min_side, n - min_side + 1)
    wl, sl = cw[k - 1], cwy[k - 1]
    wr, sr = cw[-1] - wl, cwy[-1] - sl
    gain = (sl / wl - sr / wr) ** 2 * wl * wr / cw[-1]
    return int(k[len(gain) - 1 - np.argmax(gain[::-1])])


def find(
    y: np.ndarray,
    own: np.ndarray,
    min_side: int = MIN_SIDE,
    alpha: float = ALPHA,
    n_perm: int = N_PERM,
) -> list[Split]:
    """The change points of series `y` (log mean step times in run order) with the runs' own
    variances `own`, in run order; [] when none passes its test. Binary segmentation: the whole
    series is tested; where it passes, its largest split is a change and each side is searched
    the same way."""
    w = weights(y, own)
    found: list[Split] = []
    todo = [(0, len(y))]
    while todo:
        lo, hi = todo.pop()
        if hi - lo < needed(min_side):
            continue
        p = permutation_p(y[lo:hi], w[lo:hi], min_side, n_perm)
        if p >= alpha:
            continue
        k = lo + best_split(y[lo:hi], w[lo:hi], min_side)
        found.append(Split(k, p, lo, hi))
        todo += [(lo, k), (k, hi)]
    found.sort(key=lambda s: s.index)
    return _bounded(found, len(y))


def _bounded(found: list[Split], n: int) -> list[Split]:
    """The splits with lo/hi set to their neighbours' (the segments they finally separate)."""
    idx = [0] + [s.index for s in found] + [n]
    return [Split(s.index, s.p_value, idx[i], idx[i + 2]) for i, s in enumerate(found)]
