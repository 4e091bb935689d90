"""common/stats.py, the one statistics room: one reading of a value as a number (None when
missing), the interval of a mean, the interval of a ratio on the log scale."""

from __future__ import annotations

import math

import numpy as np
import pytest

from common.stats import as_float, excludes_one, mean_ci95_rel, ratio_interval, t_quantile_975


def test_a_missing_value_is_none_whatever_it_looked_like():
    for missing in (None, True, False, "", "abc", float("nan"), math.inf, -math.inf, "inf", [1]):
        assert as_float(missing) is None, missing
    assert as_float("2.5") == 2.5 and as_float(np.float64(3.0)) == 3.0 and as_float(4) == 4.0
    assert as_float(-1.0) == -1.0 and as_float(-1.0, nonnegative=True) is None
    assert as_float(0.0, nonnegative=True) == 0.0 and as_float(0.0, positive=True) is None
    assert as_float(1e-9, positive=True) == 1e-9


def test_the_interval_of_a_mean_by_hand():
    # 20 values with SD 0.01 around 1.0: t(19) = 2.093, so 2.093 x 0.01 / sqrt(20)
    assert mean_ci95_rel(20, 0.01, 1.0) == pytest.approx(2.093 * 0.01 / math.sqrt(20), rel=1e-12)
    assert mean_ci95_rel(2, 1.0, 2.0) == pytest.approx(12.706 / math.sqrt(2) / 2)
    assert mean_ci95_rel(1, 0.0, 1.0) == math.inf
    assert t_quantile_975(30) == 2.042 and t_quantile_975(120) == pytest.approx(1.98)


def test_a_ratio_interval_stays_above_zero():
    lo, hi = ratio_interval(2.0, 0.3, 0.4)  # log 2 ± 0.5
    assert (lo, hi) == (pytest.approx(2 * math.exp(-0.5)), pytest.approx(2 * math.exp(0.5)))
    assert ratio_interval(0.01, 5.0, 5.0)[0] > 0
    assert ratio_interval(2.0, None, 0.1) is None
    assert excludes_one([1.1, 2.0]) and not excludes_one([0.9, 2.0]) and not excludes_one(None)
