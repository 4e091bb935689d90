"""Flags on numbers that are measured but implausible (docs/schema.md, Definitions): a train run's
description and the analysis report say the same words for the same value, and never hide it.

Pure: no mlflow, no files. Each flag is one line naming the value, the threshold and what to do.
"""

from __future__ import annotations

from common.stats import as_float

from common.fmt import ci95

CI_WIDE_REL = 0.5
"""a 95 % confidence half-width of the mean step time over ±50 % of the mean: the mean (and every
rate made from it) is not a number to compare"""
UNSTABLE_SPREAD = 1.5
"""a configuration is unstable when its fastest run is more than 1.5 x its slowest in samples/s
(or its mean step time's CI is wider than CI_WIDE_REL): the machine, not the configuration, set
its numbers (docs/schema.md, "Definitions"); the findings and the what-if verdicts use it"""
OVER_ONE = 1.0
"""scaling efficiency and fraction of roof cannot exceed 1 when the baseline and ceilings are right"""


def _figure(value) -> float | None:
    """The measured figure a flag is about (common.stats.as_float), never text: a flag names a
    number, and a param or a label is none."""
    return None if isinstance(value, str) else as_float(value)


def ci_flag(step_time_ci95_rel) -> str:
    """'' or why a run's confidence interval is too wide to trust its mean."""
    if (_figure(step_time_ci95_rel) or 0.0) <= CI_WIDE_REL:
        return ""
    return (
        f"the mean step time's {ci95(step_time_ci95_rel)} is wider than ±{CI_WIDE_REL:.0%}: the "
        "mean is not reliable (measure more steps: --iters auto, or a quieter machine)"
    )


def scaling_flag(scaling_efficiency) -> str:
    """'' or why a scaling efficiency over 100 % is not a real speed-up."""
    if (_figure(scaling_efficiency) or 0.0) <= OVER_ONE:
        return ""
    return (
        f"scaling efficiency {scaling_efficiency:.0%} is over 100%: the world-size-1 baseline ran "
        "slower per process than this job (other load at the time, or one process contending "
        "for the cores the job's processes share); measure both back to back"
    )


def roof_flag(fraction_of_roof) -> str:
    """'' or why a point above its roof means a ceiling or an intensity is off."""
    if (_figure(fraction_of_roof) or 0.0) <= OVER_ONE:
        return ""
    return (
        f"{fraction_of_roof:.0%} of roof is over 100%: the ceiling is too low (a vendor figure, "
        "a peaks run below the real peak, fp32 runs on TF32 tensor cores: runs without tag "
        "fp32_math predate fp32 = IEEE FP32) or the intensity is (the modeled one counts bytes "
        "without cache reuse, so it is too low); measure the device with `python -m "
        "profiling.peaks`, the intensity with `python -m profiling`"
    )
