"""Which counterfactuals a what-if runs, and how: every move a configuration of its own (the
original's but one knob), all of them with the original in one sweep whose passes alternate the
original with each move (train/sweep, repeat-major), and the time budget that leaves out what
will not fit, saying so.
"""

from __future__ import annotations

import hashlib
import json
import time
from dataclasses import dataclass, field

from common.errors import BenchError, UsageError
from roofline.whatif import LOWER_PRECISIONS, Move, Original, moves_for
from train import device as dev
from train.config import TrainConfig
from train.sweep.spec import Plan, SweepSpec

ORIGINAL = "original"
"""the name of the original configuration's row in a what-if's records"""
DEFAULT_RUN_S = 60.0
"""what one run is guessed to take when the original run has no start and end time"""
COMPILE_PRIOR_S = 600.0
"""what torch.compile adds to one run before a compiled run was measured in this invocation: the
first compiled run of resnet18 and of mobilenet_v2 (batch 8, 64 px, one torch thread) took 514 s
and 705 s on the project's 2-core CPU at load average 12-14, the next ones 50-60 s (inductor's
cache on disk; docs/whatif.md). Replaced by the measured time of the last compiled run here once
one ran (an overestimate for the runs after the first)."""


def lower_precisions(device) -> list[str]:
    """The precisions below fp32 that `device` runs (train.device's own checks)."""
    out = []
    for p in LOWER_PRECISIONS:
        try:
            dev.check_precision(p, device)
        except BenchError:
            continue
        out.append(p)
    return out


def choose(orig: Original, device, wanted: list[str]) -> tuple[list[Move], list[str]]:
    """The moves to run (all of `orig`'s on this device, or those named in `wanted`) and one line
    per knob without a move. A name that is no move, or a move this device cannot run, is refused
    in one line."""
    here = lower_precisions(device)
    moves, none = moves_for(orig, here)
    if not wanted:
        return moves, none
    by_name = {m.name: m for m in moves}
    out = []
    for name in wanted:
        if name in by_name:
            out.append(by_name[name])
            continue
        if name in LOWER_PRECISIONS:
            try:
                dev.check_precision(name, device)
            except BenchError as exc:
                raise UsageError(f"--moves {name}: {exc}") from None
        known = ", ".join(by_name) or "none"
        raise UsageError(f"--moves {name}: not a move of this configuration here (moves: {known})")
    return list(dict.fromkeys(out)), none


def variant(move: Move) -> dict:
    """The fields a move's configuration changes over the original's."""
    return {move.knob: move.to}


def spec(cfg: TrainConfig, moves: list[Move], repeats: int, original_run: str) -> SweepSpec:
    """The sweep of the what-if: the original and every move, `repeats` passes (the original
    first in each), named after the original run and the moves (the same command resumes it)."""
    base = cfg.params()
    ident = json.dumps({"moves": [m.name for m in moves], "repeats": repeats}, sort_keys=True)
    digest = hashlib.sha256(ident.encode()).hexdigest()[:8]
    return SweepSpec(
        matrix={},
        base=base,
        repeats=repeats,
        variants=[{}] + [variant(m) for m in moves],
        name=f"whatif-{original_run[:12]}-{digest}",
        env_label=cfg.env_label,
    )


def rows(plan: Plan, moves: list[Move]) -> dict[str, str]:
    """sweep_key -> the name of its row (`original` or the move's), from the planned sweep (its
    configurations come in the order of the spec's variants: the original, then each move)."""
    names = [ORIGINAL] + [m.name for m in moves]
    return {key: name for (_, _, key), name in zip(plan.runs[: plan.n_configs], names)}


@dataclass
class Budget:
    """--budget-s: what is left out so that the what-if ends in time. Up front, whole moves whose
    runs the estimates do not fit (the largest first; never the original); then, right before each
    run, any run that would end past the budget. Estimates: the original run's own wall time (x2
    at twice the batch, plus COMPILE_PRIOR_S compiled), replaced by the measured time of a run of
    the same configuration once one ran here."""

    budget_s: float
    row_of: dict[str, str]
    """sweep_key -> row name"""
    run_s: float
    start: float = field(default_factory=time.perf_counter)
    measured_s: dict[str, float] = field(default_factory=dict)
    dropped: dict[str, str] = field(default_factory=dict)
    """row name -> why it is left out this time"""
    _opened: float = 0.0
    _key: str = ""

    def estimate(self, key: str, move: Move | None) -> float:
        if key in self.measured_s:
            return self.measured_s[key]
        est = self.run_s
        if move is not None and move.knob == "batch_size":
            est *= max(1.0, float(move.to) / float(move.frm))
        if move is not None and move.knob == "compile" and move.to:
            est += COMPILE_PRIOR_S
        return est

    def fit(self, todo: list[str], moves: dict[str, Move]) -> list[str]:
        """Leave out whole moves until the estimated runs `todo` (sweep keys, one per run) fit in
        what is left of the budget; one line per move left out."""
        if not self.budget_s:
            return []
        left = self.budget_s - (time.perf_counter() - self.start)
        need: dict[str, float] = {}
        for key in todo:
            name = self.row_of[key]
            need[name] = need.get(name, 0.0) + self.estimate(key, moves.get(name))
        lines = []
        while sum(need.values()) > left and len(need) > 1:
            name = max((n for n in need if n != ORIGINAL), key=lambda n: need[n])
            why = (
                f"left out by --budget-s {self.budget_s:g}: its runs need ~{need[name]:.0f} s "
                f"(estimated), more than fits in the {max(left, 0):.0f} s left with the rest"
            )
            self.dropped[name] = why
            lines.append(f"{name}: {why}")
            del need[name]
        return lines

    def skip(self, key: str, move: Move | None) -> str | None:
        """Why the run of `key` is not run now, or None (then its time is taken from here)."""
        name = self.row_of.get(key, "")
        if name in self.dropped:
            return self.dropped[name]
        spent = time.perf_counter() - self.start
        est = self.estimate(key, move)
        if self.budget_s and spent + est > self.budget_s:
            return (
                f"left out by --budget-s {self.budget_s:g}: {spent:.0f} s spent, this run needs "
                f"~{est:.0f} s"
            )
        self._opened, self._key = time.perf_counter(), key
        return None

    def ran(self) -> None:
        """The run opened by the last `skip` that returned None has ended: keep its time."""
        if self._key:
            self.measured_s[self._key] = time.perf_counter() - self._opened
            self._key = ""
