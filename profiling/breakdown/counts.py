"""FLOPs and modeled bytes per (module, phase), from counted training steps (outside the timing).

A `RowCounter` dispatch mode sits under the train run's own counters (train.bench.count_steps
holds it open around each counted step) and charges every aten op to the owner the Tracker gives
(hooks.Tracker.current: the running autograd node's module in backward, the innermost module in
forward, else the loss, the optimizer or the step's glue). Per op:

* FLOPs: the formula FlopCounterMode would use (train.flops.flop_counter_mode's registry, with
  the project's grouped-convolution correction), so the rows add up to the run's
  `train_flops_per_step` exactly (checked: `RowCounts.check`);
* bytes: the project's byte model (train.flops.op_bytes: tensor inputs read + outputs written).

Why not FlopCounterMode.get_flop_counts() per module: its ModuleTracker charges backward work to
every module in `parents`, which during backward holds residual siblings; on resnet18 (32 px,
batch 2) its leaf modules add up to 519.5 MFLOP against a total of 434.6 MFLOP (each
downsample convolution is charged the backward of its block's conv1 and conv2 as well:
docs/breakdown.md; tests/test_breakdown.py checks it module by module).

Counts are taken at the train run's two small batch sizes and extrapolated linearly per row, as
the train run does (train/flops.py explains why that is exact).
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass, field

from profiling.breakdown.attribute import Key
from train.bench import COUNT_BATCHES, count_steps
from train.flops import flop_registry, op_bytes
from train.ledger import NO_FORMULA, op_kind, op_name


def _row_counter_class():
    from torch.utils._python_dispatch import TorchDispatchMode

    registry = flop_registry()

    class RowCounter(TorchDispatchMode):
        """FLOPs and modeled bytes of every aten op, summed per `tracker.current()`, and the ops
        with no FLOP formula (train/ledger.py) each row ran."""

        def __init__(self, tracker):
            super().__init__()
            self.tracker = tracker
            self.flops: dict[Key, float] = defaultdict(float)
            self.bytes: dict[Key, float] = defaultdict(float)
            self.uncounted: dict[Key, set[str]] = defaultdict(set)
            self._kinds: dict = {}

        def __torch_dispatch__(self, func, types, args=(), kwargs=None):
            kwargs = kwargs or {}
            out = func(*args, **kwargs)
            key = self.tracker.current()
            formula = registry.get(func.overloadpacket)
            if formula is not None:
                self.flops[key] += float(formula(*args, **kwargs, out_val=out))
            else:
                kind = self._kinds.get(func) or self._kinds.setdefault(
                    func, op_kind(func, registry)
                )
                if kind == NO_FORMULA:
                    self.uncounted[key].add(op_name(func))
            moved = op_bytes(func, args, kwargs, out)
            if moved is not None:
                self.bytes[key] += float(sum(moved))
            return out

    return RowCounter


@dataclass
class RowCounts:
    """FLOPs and modeled bytes per (row, phase) for one step of `batch_size`."""

    batch_size: int
    flops: dict[Key, float] = field(default_factory=dict)
    bytes: dict[Key, float] = field(default_factory=dict)
    train_flops: float = 0.0
    """the train run's count of the same step (FlopCounterMode's total)"""
    modeled_bytes: float = 0.0
    """the train run's byte-model total of the same step"""
    uncounted: dict[Key, set[str]] = field(default_factory=dict)
    """rows that ran ops with no FLOP formula (train/ledger.py), and those ops"""

    def uncounted_time_share(self, self_s: dict[Key, float], step_s: float) -> float:
        """The share of the step in the own time of the rows that ran ops with no FLOP formula:
        at most those ops' time share (their rows hold other ops too); 0 when there are none."""
        if step_s <= 0:
            return 0.0
        return sum(self_s.get(k, 0.0) for k in self.uncounted) / step_s

    def check(self) -> str:
        """'' when the rows add up to the train run's totals (within 1e-9), else why not."""
        problems = []
        for what, rows, total in (
            ("FLOPs", self.flops, self.train_flops),
            ("bytes", self.bytes, self.modeled_bytes),
        ):
            got = sum(rows.values())
            if abs(got - total) > 1e-9 * max(abs(total), 1.0):
                problems.append(f"rows hold {got:.6g} {what}, the step {total:.6g}")
        return "; ".join(problems)


def extrapolate(a: RowCounts, b: RowCounts, batch_size: int) -> RowCounts:
    """The line through two counts per row, at `batch_size` (as train.flops.extrapolate)."""
    if a.batch_size == b.batch_size:
        raise ValueError("need two different batch sizes to extrapolate")

    def line(va: float, vb: float) -> float:
        return va + (vb - va) * (batch_size - a.batch_size) / (b.batch_size - a.batch_size)

    def rows(da: dict, db: dict) -> dict:
        return {k: line(da.get(k, 0.0), db.get(k, 0.0)) for k in set(da) | set(db)}

    uncounted = {
        k: a.uncounted.get(k, set()) | b.uncounted.get(k, set())
        for k in set(a.uncounted) | set(b.uncounted)
    }
    return RowCounts(
        batch_size,
        rows(a.flops, b.flops),
        rows(a.bytes, b.bytes),
        line(a.train_flops, b.train_flops),
        line(a.modeled_bytes, b.modeled_bytes),
        uncounted,
    )


def count_rows(prep, tracker) -> RowCounts:
    """FLOPs and bytes per (row, phase) of one training step of `prep` (train.bench.Prepared) at
    its batch size, with `tracker` attached to its model: the train run's counting
    (train.bench.count_steps: one uncounted step, then counted steps at small batch sizes) with a
    RowCounter held open around each counted step."""
    batch = prep.cfg.batch_size
    sizes = (batch,) if batch in COUNT_BATCHES else COUNT_BATCHES
    cls = _row_counter_class()
    modes: dict[int, object] = {}

    def around(b: int):
        modes[b] = cls(tracker)
        return modes[b]

    saved = prep.parts.mark, tracker.ranges
    prep.parts.mark, tracker.ranges = tracker.mark, False
    try:
        counts, _ = count_steps(prep, sizes, around)
    finally:
        prep.parts.mark, tracker.ranges = saved
        tracker.clear()
    per_batch = {
        b: RowCounts(
            b,
            dict(modes[b].flops),
            dict(modes[b].bytes),
            counts[b].train_flops,
            counts[b].modeled_bytes,
            dict(modes[b].uncounted),
        )
        for b in sizes
    }
    if batch in per_batch:
        return per_batch[batch]
    return extrapolate(per_batch[sizes[0]], per_batch[sizes[1]], batch)
