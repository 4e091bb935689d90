"""Did the capture see the whole training step? Captured FLOPs against the config's counted ones.

ncu counts what the profiled kernels executed; train.phase_flops counts, from shapes alone, the
FLOPs one training step of the config must do per phase. A capture that missed a phase (the L4
fixture: autograd's backward kernels dropped by a per-thread NVTX filter, 1 kernel and 0 FLOPs in
its backward phase) shows as a phase far below its count. `check_against_count` compares the
captured FLOPs per step, in total and per phase, with that count and says what is missing.
Pure: no mlflow, no file writes; the count is made by the caller (profiling.cli).

Tolerances (docs/profiling.md, "Is the whole step captured?"):

* a phase (forward, backward) is missing when its captured FLOPs per step are below
  PHASE_MIN_RATIO of its count;
* without forward/backward phases in the input, the capture is incomplete when its FLOPs per
  step are below TOTAL_MIN_RATIO of the step's count; above TOTAL_MAX_RATIO is a warning (more
  work than one step: --profile-steps or the config does not match the file), not incomplete.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

from common import schema
from profiling.ncu.totals import NcuSummary
from train.phase_flops import PhaseFlops

PHASE_MIN_RATIO = 0.25
"""A phase below a quarter of its counted FLOPs is missing. A captured phase reads about 1x its
count (the L4 fixture's forward: 1.005x), more with elementwise work and padded tensor-core tiles,
less with FLOP-saving convolution algorithms (Winograd F(4x4,3x3) does a quarter of the
multiplies of a 3x3 convolution in its product stage, and adds the transforms back); a phase whose
kernels were not captured reads about 0 (the L4 fixture's backward: 0 of 9.3 GFLOP)."""
TOTAL_MIN_RATIO = 0.5
"""Without phases: a forward-only capture reads about a third of the step (backward is about twice
the forward), a whole one about 1x; half separates them with room for FLOP-saving algorithms."""
TOTAL_MAX_RATIO = 2.0
"""Above twice the count the file holds more than --profile-steps steps of this config."""
CHECKED_PHASES = ("forward", "backward")
"""The phases compared: the optimizer's count is 0 (no matmul), so its share says nothing."""


@dataclass
class CountCheck:
    """The comparison of a profile's FLOPs with the config's counted training FLOPs."""

    status: str
    """ok | incomplete | above count | not checked"""
    why: str = ""
    """not checked: the reason."""
    ratio: float = math.nan
    """captured FLOPs per step / counted FLOPs per step."""
    phase_ratios: dict[str, float] = field(default_factory=dict)
    """forward/backward: captured FLOPs per step of the phase / its count."""
    missing_phases: list[str] = field(default_factory=list)
    """phases below PHASE_MIN_RATIO ("unknown" when the input has no phases to tell)."""
    counted: PhaseFlops | None = None
    captured_flops_per_step: float = math.nan

    @property
    def incomplete(self) -> bool:
        return self.status == "incomplete"

    def metrics(self) -> dict[str, float]:
        """counted_* (the config's count per step) and the captured/counted ratios."""
        if self.counted is None:
            return {}
        out = {
            "counted_train_flops_per_step": self.counted.total,
            "counted_forward_flops_per_step": self.counted.forward,
            "counted_backward_flops_per_step": self.counted.backward,
            "ncu_flops_per_step": self.captured_flops_per_step,
            "ncu_flops_to_counted_ratio": self.ratio,
        }
        out.update(
            {f"ncu_phase_{p}_flops_to_counted_ratio": r for p, r in self.phase_ratios.items()}
        )
        return {k: v for k, v in out.items() if math.isfinite(v)}

    def tags(self) -> dict[str, str]:
        """ncu_count_check, and ncu_missing_phase for an incomplete profile."""
        tags = {"ncu_count_check": self.status + (f": {self.why}" if self.why else "")}
        if self.incomplete:
            tags[schema.TAG_NCU_MISSING_PHASE] = ",".join(self.missing_phases)
        return tags

    def warning(self, source: str) -> str | None:
        """The one line to print, None when the capture matches its count."""
        if self.status == "incomplete":
            shares = ", ".join(
                f"{p} {self.phase_ratios[p]:.2f}x" for p in CHECKED_PHASES if p in self.phase_ratios
            )
            what = (
                "part of the step is missing (the input has no forward/backward NVTX phases to "
                "say which)"
                if self.missing_phases == ["unknown"]
                else f"the {' and '.join(self.missing_phases)} phase"
                + ("s are" if len(self.missing_phases) > 1 else " is")
                + " missing"
            )
            return (
                f"{source} looks incomplete: {self.captured_flops_per_step:.4g} FLOP per step "
                f"captured against {self.counted.total:.4g} counted for this config "
                f"({self.ratio:.2f}x{'; ' + shares if shares else ''}), so {what} (tags "
                "ncu_roofline=incomplete, ncu_missing_phase); analysis keeps its intensity off the "
                "training point unless asked (python -m analysis --use-incomplete-profiles)"
            )
        if self.status == "above count":
            return (
                f"{source} holds {self.ratio:.2f}x the FLOPs counted for {self.counted.total:.4g} "
                "FLOP per step of this config: check --profile-steps (the steps the file covers) "
                "and the config flags"
            )
        return None


def check_against_count(
    summary: NcuSummary, counted: PhaseFlops | None, profile_steps: int, why_uncounted: str = ""
) -> CountCheck:
    """Compare `summary`'s FLOPs (totals over `profile_steps` steps) with `counted`, one step of the
    config per phase; `why_uncounted` says why there is no count."""
    if counted is None or not counted.total > 0:
        return CountCheck("not checked", why_uncounted or "no count of the config's FLOPs")
    if summary.truncated:  # its totals are part of a profile: incomplete already, and tagged so
        return CountCheck("not checked", "the input is truncated", counted=counted)
    captured = summary.totals.get("flops_total")
    if captured is None:
        return CountCheck("not checked", "no FLOP counters in the input", counted=counted)
    steps = max(int(profile_steps), 1)
    per_step = captured / steps
    check = CountCheck(
        "ok", ratio=per_step / counted.total, counted=counted, captured_flops_per_step=per_step
    )
    phases = summary.phases
    if phases is not None and any(p in phases.index for p in CHECKED_PHASES):
        for p in CHECKED_PHASES:
            flops = phases["flops_total"].get(p, 0.0) if p in phases.index else 0.0
            flops = 0.0 if flops is None or math.isnan(flops) else float(flops)
            if counted.phase(p) > 0:
                check.phase_ratios[p] = flops / steps / counted.phase(p)
        check.missing_phases = [p for p, r in check.phase_ratios.items() if r < PHASE_MIN_RATIO]
    elif check.ratio < TOTAL_MIN_RATIO:
        check.missing_phases = ["unknown"]  # no forward/backward NVTX phases to say which
    if check.missing_phases:
        check.status = "incomplete"
    elif check.ratio > TOTAL_MAX_RATIO:
        check.status = "above count"
    return check
