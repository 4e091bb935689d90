"""The thresholds the findings rules use: one place, each with why (docs/analysis.md, "Findings",
writes the rules out with these numbers)."""

from __future__ import annotations

from common.plausible import CI_WIDE_REL
from common.plausible import UNSTABLE_SPREAD as _SPREAD
from train.batch_fit import MIN_RUNS as MIN_FIT_RUNS

DATA_BOUND_SHARE = 0.25
"""data-bound: a breakdown run of the config spends at least this share of its step waiting for
data (data_wait + h2d_copy): a quarter of the step idle on input is the first thing to fix."""
HOST_BOUND_SHARE = 0.25
"""host-bound: a breakdown run spends at least this share of its step in host overhead (Python,
dispatch, launches the device waits on)."""
LATENCY_BOUND_SHARE = 0.5
"""latency/launch-bound: at least half of the step is fixed per-step time, the intercept of a
straight line through step time against batch size over the config's batch series (what does
not grow with the work: launches, dispatch, synchronisation). Only from a fit the model holds
for: a positive slope, an intercept inside [0, the step time] and its 95 % CI above zero
(bound.fixed_time_fits)."""
FIT_MIN_RUNS = MIN_FIT_RUNS
"""a fixed-time fit needs at least this many runs (train/batch_fit.py, the fit's one home)."""
UNSTABLE_SPREAD = _SPREAD
"""a configuration is unstable when its fastest run is more than 1.5 x its slowest in samples/s:
the machine, not the configuration, set its numbers; no bound, move or anomaly finding is drawn
from it."""
UNSTABLE_CI = CI_WIDE_REL
"""... or when the 95 % CI of its mean step time is wider than ±50 % (common.plausible)."""
FAR_BELOW_ROOF = 0.10
"""a config under 10 % of its roof is not limited by that roof: a finding says so."""
PEER_GAP = 0.5
"""a device far below its peers: its fraction of the roof under half the best fraction another
device reaches on the same config."""
BATCH_DROP = 0.03
"""throughput falling as batch grows: at least 3 % lower at the larger batch, and the 95 % intervals
of the two means apart where both are known (noise is not a drop)."""
STEP_CV = 0.05
"""step-time variability: coefficient of variation (SD / mean) of a run's step times over 5 %."""
BIMODAL_DIP = 0.5
"""bimodal steps: the kernel density of a run's step times has a second peak, and the valley
between the two is at most half the smaller peak ..."""
BIMODAL_MIN_SHARE = 0.10
"""... with at least 10 % of the steps (and 3 steps) on each side: one slow step is an outlier,
not a mode."""
THROTTLE_CLOCK = 0.98
"""clock throttling: the median SM clock under 98 % of the base (default application) clock ..."""
THROTTLE_POWER = 0.98
"""... or the power draw at 98 % of the enforced power limit or more ..."""
THROTTLE_TEMP_MARGIN_C = 2.0
"""... or the temperature within 2 °C of the slowdown threshold, or NVML reporting a
thermal/power clock-event reason in any sample."""
MEMORY_NEAR_CAPACITY = 0.90
"""device memory near capacity: the peak allocated at least 90 % of the device's total."""
PROFILE_TRAIN_AGREE = (0.75, 1.33)
"""profile and train runs agree when the profile's FLOPs per step (ncu_flops_total / profile_steps)
are within this ratio of the train run's counted training FLOPs per step."""
UNCOUNTED_SHARE = 0.01
"""counted FLOPs incomplete: ops that ran with no FLOP formula (train/ledger.py) hold at least
1 % of the step: of its time where a breakdown of the config measured the rows that ran them,
else of its modeled bytes. An attention kernel moves little and computes much (vit_b_16 at
batch 2, 224 px, on a CPU with torch 2.14.1's formulas alone: its two attention kernels carry
2.6 % of the modeled bytes and 4.1 % of the FLOPs), so a share this small can hide FLOPs that
matter; below it, the run's own page names them."""
