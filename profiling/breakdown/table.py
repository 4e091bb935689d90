"""The rows of `layers.csv`, the default view, the step's parts as metrics, the description.

One row per module x phase at every depth (the model itself at depth 0, its children at 1, ...),
plus the rows that are not modules (profiling.breakdown.names: loss, optimizer, zero_grad, data,
unattributed per phase, and on CUDA the device's idle time). A module's `time_s`, `flops` and
`bytes` include its children's; `self_time_s` is its own code's alone (a residual add in a
block, the model's flatten). The self times of all rows add up to the recorded steps' time;
so do the `time_s` of the model and the rows that are not modules.

Columns (docs/schema.md, `breakdown` runs):
module, phase, kind (model | module | step), depth, leaf, view, calls, time_s, self_time_s,
cpu_time_s (host with the CPU clock: time_s by the main thread's CPU clock), share (by the clock
Attribution.share_clock names), flops, bytes, intensity_flops_per_byte, achieved_flops_per_s, bound, roof_fraction,
bytes_source (modeled | measured), time_source (host | device | ncu).
"""

from __future__ import annotations

import math
from collections import defaultdict
from dataclasses import dataclass

from common import fmt
from common.stats import as_float
from profiling.breakdown import names
from profiling.breakdown.attribute import Attribution, Key
from profiling.breakdown.roof import Ceilings, bound, roof_fraction

COLUMNS = (
    "module",
    "phase",
    "kind",
    "depth",
    "leaf",
    "view",
    "calls",
    "time_s",
    "self_time_s",
    "cpu_time_s",
    "share",
    "flops",
    "bytes",
    "intensity_flops_per_byte",
    "achieved_flops_per_s",
    "bound",
    "roof_fraction",
    "bytes_source",
    "time_source",
)
VIEW_LEAVES = 10  # the default view's leaf modules that take the most time
CONTAINER_SHARE = 0.5  # a top-level child holding more of the leaf modules is shown by its children
_PHASE_ORDER = {p: i for i, p in enumerate(names.PHASES)}


@dataclass
class ModuleTree:
    """The model's modules: full paths (the model itself is `root`) and which are leaves."""

    root: str
    paths: list[str]
    leaves: set[str]

    def depth(self, path: str) -> int:
        return names.module_depth(path, self.root)

    def children(self, path: str) -> list[str]:
        d = self.depth(path) + 1
        return [p for p in self.paths if self.depth(p) == d and names.is_inside(p, path, self.root)]


@dataclass
class _Context:
    """What every row is computed from."""

    att: Attribution
    flops: dict[Key, float]
    bytes: dict[Key, float]
    step_s: float
    ceilings: Ceilings
    bytes_source: str

    def row(self, module: str, phase: str, kind: str, depth: int, leaf: bool, keys: list[Key]):
        """The row of `module` in `phase`, summing the own rows `keys` (its subtree's)."""
        cpu = self.att.cpu_self_s
        return _row(
            module,
            phase,
            kind=kind,
            depth=depth,
            leaf=leaf,
            calls=self.att.calls.get((module, phase), 0.0),
            time_s=sum(self.att.self_s.get(k, 0.0) for k in keys),
            self_time_s=self.att.self_s.get((module, phase), 0.0),
            cpu_time_s=sum(cpu.get(k, 0.0) for k in keys) if cpu else math.nan,
            flops=sum(self.flops.get(k, 0.0) for k in keys),
            bytes_=sum(self.bytes.get(k, 0.0) for k in keys),
            ctx=self,
        )


def rows(
    tree: ModuleTree,
    att: Attribution,
    flops: dict[Key, float],
    bytes_: dict[Key, float],
    step_s: float,
    ceilings: Ceilings,
    bytes_source: str = "modeled",
) -> list[dict]:
    """The rows of layers.csv: every module (model order) in forward and backward, then the rows
    that are not modules (see the module doc). `step_s` is breakdown_step_s (the recorded steps'
    mean wall time): `share` = time_s / step_s."""
    ctx = _Context(att, flops, bytes_, step_s, ceilings, bytes_source)
    own_keys = set(att.self_s) | set(flops) | set(bytes_)
    subtree: dict[str, list[str]] = {p: [] for p in tree.paths}
    for p in tree.paths:
        for a in _ancestors(p, tree):
            subtree[a].append(p)
    out = []
    for path in tree.paths:
        kind = "model" if path == tree.root else "module"
        for phase in ("forward", "backward"):
            members = [(m, phase) for m in subtree[path]]
            if any(k in own_keys for k in members):
                out.append(
                    ctx.row(path, phase, kind, tree.depth(path), path in tree.leaves, members)
                )
    special = sorted(
        (k for k in own_keys if k[0] in names.SPECIAL_ROWS or k[0] not in subtree),
        key=lambda k: (
            names.SPECIAL_ROWS.index(k[0]) if k[0] in names.SPECIAL_ROWS else 99,
            _PHASE_ORDER.get(k[1], 9),
        ),
    )
    out += [ctx.row(key[0], key[1], "step", -1, False, [key]) for key in special]
    mark_view(out, tree)
    return out


def _ancestors(path: str, tree: ModuleTree) -> list[str]:
    """`path` and every module holding it, the model last."""
    if path == tree.root:
        return [path]
    known = set(tree.paths)
    parts = path.split(".")
    holders = [".".join(parts[:n]) for n in range(len(parts) - 1, 0, -1)]
    return [path, *(h for h in holders if h in known), tree.root]


def _share(time_s: float, cpu_time_s: float, ctx: _Context) -> float:
    """The row's share of the step by the clock the attribution names (Attribution.share_clock):
    its CPU time over the steps' mean CPU time, or its wall time over breakdown_step_s."""
    att = ctx.att
    if att.share_clock == "thread_cpu":
        return cpu_time_s / (sum(att.step_cpu_s) / len(att.step_cpu_s))
    return time_s / ctx.step_s if ctx.step_s > 0 else math.nan


def _row(
    module, phase, *, kind, depth, leaf, calls, time_s, self_time_s, cpu_time_s, flops, bytes_, ctx
):
    intensity = flops / bytes_ if bytes_ > 0 else math.nan
    achieved = flops / time_s if time_s > 0 else math.nan
    ceilings = ctx.ceilings
    return {
        "module": module,
        "phase": phase,
        "kind": kind,
        "depth": depth,
        "leaf": leaf,
        "view": False,
        "calls": calls,
        "time_s": time_s,
        "self_time_s": self_time_s,
        "cpu_time_s": cpu_time_s,
        "share": _share(time_s, cpu_time_s, ctx),
        "flops": flops,
        "bytes": bytes_,
        "intensity_flops_per_byte": intensity,
        "achieved_flops_per_s": achieved,
        "bound": bound(intensity, ceilings) if bytes_ > 0 else "n/a",
        "roof_fraction": roof_fraction(achieved, intensity, ceilings)
        if flops > 0 and time_s > 0
        else math.nan,
        "bytes_source": ctx.bytes_source,
        "time_source": ctx.att.time_source,
    }


def _time_of(table: list[dict]) -> dict[str, float]:
    """module -> forward + backward time"""
    time_of: dict[str, float] = defaultdict(float)
    for r in table:
        if r["kind"] in ("model", "module"):
            time_of[r["module"]] += r["time_s"]
    return time_of


def view_top(table: list[dict], tree: ModuleTree) -> list[str]:
    """The default view's top level: the model's children, each child that holds more than half
    of the model's leaf modules replaced by its own children (MobileNetV2's and VGG's `features`;
    ResNet's layer1-4 hold a quarter each and stay whole). A structural rule: the same modules
    at every batch size and on every device."""
    time_of = _time_of(table)
    n_leaves = len(tree.leaves)
    top: list[str] = []
    for child in tree.children(tree.root):
        if child not in time_of:
            continue
        grand = [g for g in tree.children(child) if g in time_of]
        held = sum(1 for leaf in tree.leaves if names.is_inside(leaf, child, tree.root))
        if grand and held > CONTAINER_SHARE * n_leaves:
            top.extend(grand)
        else:
            top.append(child)
    return top


def view_modules(table: list[dict], tree: ModuleTree) -> list[str]:
    """The default view's modules: its top level (`view_top`), then the VIEW_LEAVES leaf modules
    that take the most time (forward and backward together)."""
    time_of = _time_of(table)
    top = view_top(table, tree)
    leaves = sorted(
        (p for p in tree.leaves if p in time_of and p not in top), key=lambda p: -time_of[p]
    )[:VIEW_LEAVES]
    return top + leaves


def mark_view(table: list[dict], tree: ModuleTree) -> None:
    """Set `view` on the default view's rows (its modules, and the rows that are not modules)."""
    chosen = set(view_modules(table, tree))
    for r in table:
        r["view"] = r["kind"] == "step" or r["module"] in chosen


def parts_metrics(att: Attribution, step_s: float) -> dict[str, float]:
    """breakdown_step_s, breakdown_<part>_s (wall seconds) and breakdown_<part>_fraction: each
    part's share of the step by the clock the rows' shares use (`share_clock`): of the recorded
    steps' mean CPU time (breakdown_step_cpu_s, logged then) on the CPU clock, else of
    breakdown_step_s. One clock for every share the breakdown shows."""
    out = {"breakdown_step_s": step_s}
    cpu = att.share_clock == "thread_cpu" and bool(att.parts_cpu_s)
    step_cpu = sum(att.step_cpu_s) / len(att.step_cpu_s) if cpu else math.nan
    if cpu:
        out["breakdown_step_cpu_s"] = step_cpu
    for part in names.PARTS:
        v = att.parts_s.get(part, 0.0)
        out[f"breakdown_{part}_s"] = v
        if cpu:
            frac = att.parts_cpu_s.get(part, 0.0) / step_cpu if step_cpu > 0 else math.nan
        else:
            frac = v / step_s if step_s > 0 else math.nan
        out[f"breakdown_{part}_fraction"] = frac
    return out


SHARE_CLOCKS = {
    "thread_cpu": "the main thread's CPU clock",
    "wall": "the wall clock",
}
"""Attribution.share_clock -> how the text names it"""


def share_clock_name(clock: str, time_source: str = "host") -> str:
    """The clock every share is by, as the run's description, figures and the report say it."""
    if time_source == "device":
        return "kernel time on the device"
    return SHARE_CLOCKS.get(clock, clock)


def coverage(table: list[dict], step_s: float) -> dict[str, float]:
    """Shares of breakdown_step_s: all rows, the named ones (not `unattributed`, not idle), the
    modules'; and the rows' FLOPs and bytes."""
    own = [r for r in table if r["kind"] != "module"]  # the model's rows hold every module's
    total = sum(r["self_time_s"] for r in table)
    named = sum(
        r["self_time_s"] for r in table if r["module"] not in (names.UNATTRIBUTED, names.IDLE)
    )
    modules = sum(r["time_s"] for r in own if r["kind"] == "model")
    return {
        "breakdown_rows_fraction": total / step_s if step_s > 0 else math.nan,
        "breakdown_attributed_fraction": named / step_s if step_s > 0 else math.nan,
        "breakdown_module_fraction": modules / step_s if step_s > 0 else math.nan,
        "breakdown_flops_per_step": sum(r["flops"] for r in own),
        "breakdown_bytes_per_step": sum(r["bytes"] for r in own),
    }


def top_rows(table: list[dict], tree: ModuleTree, n: int = 3) -> list[dict]:
    """The `n` rows of the default view's top level (its leaf additions left out) with the
    largest shares."""
    top = set(view_top(table, tree))
    return sorted(
        (r for r in table if r["module"] in top), key=lambda r: -(as_float(r["share"]) or 0.0)
    )[:n]


_NOT_ACTIONABLE = (names.UNATTRIBUTED, names.IDLE)
_STEP_MOVES = {
    names.OPTIMIZER: "a foreach or fused optimizer, or a larger batch: its cost does not grow "
    "with the batch",
    names.ZERO_GRAD: "set_to_none (torch's default) or fewer parameter tensors; on the CPU, an "
    "allocator that keeps freed gradients' pages (MALLOC_MMAP_THRESHOLD_=33554432, jemalloc)",
    names.LOSS: "a fused loss; small unless the classes are many",
    names.DATA: "more loader workers, pinned memory, data prepared ahead",
    names.COMM: "larger gradient buckets, overlap with backward, a faster interconnect",
}
LOW_ROOF = 0.3  # under this fraction of its roof, a compute-bound row's kernel is the lever


def answer_rows(table: list[dict], n: int = 3) -> list[dict]:
    """The `n` rows a user acts on that take the most of the step: leaf modules (the operations
    that run) and the step's own rows (optimizer, loss, data, communication), by share."""
    mine = [
        r
        for r in table
        if (r["kind"] == "module" and r["leaf"])
        or (r["kind"] == "step" and r["module"] not in _NOT_ACTIONABLE)
    ]
    return sorted(mine, key=lambda r: -(as_float(r["share"]) or 0.0))[:n]


def move_hint(r: dict) -> str:
    """A few words on what would move this row's time, from what it is, its bound and intensity."""
    if r["kind"] == "step":
        return _STEP_MOVES.get(r["module"], "")
    ai = r["intensity_flops_per_byte"]
    if not (isinstance(ai, float) and ai > 0):
        return "elementwise work (no counted FLOPs): fusing it with its neighbours"
    if r["bound"] == "unknown":
        return "`python -m profiling.peaks` measures the ceilings that say"
    frac = r.get("roof_fraction", math.nan)
    if isinstance(frac, float) and frac > 1:
        return f"above its roof ({frac:.1f}x): the description's 'Above the roof' says why"
    if r["bound"] == "memory-bound":
        return "more reuse per byte: a larger batch, channels_last, fusion"
    if isinstance(frac, float) and math.isfinite(frac) and frac < LOW_ROOF:
        return f"at {fmt.pct(frac)} of its roof: a faster kernel (channels_last, bf16, another algorithm)"
    return "near its compute roof: lower precision (bf16) or less work"


def row_phrase(r: dict) -> str:
    """`layer4 backward 21.0%, compute-bound at 52 FLOP/B` (`..., 52 FLOP/B, bound unknown`)."""
    ai = r["intensity_flops_per_byte"]
    where = f"{fmt.num(ai)} FLOP/B" if math.isfinite(ai) else "no bytes counted"
    phase = "" if r["phase"] == r["module"] else f" {r['phase']}"  # `optimizer`, not twice
    head = f"{r['module']}{phase} {fmt.pct(r['share'])}"
    if r["bound"] in ("unknown", "n/a"):
        return f"{head}, {where}, bound unknown"
    return f"{head}, {r['bound']} at {where}"
