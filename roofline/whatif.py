"""What each move would do to a configuration's step, predicted before anything is run.

The model (docs/whatif.md): a breakdown cuts the step into rows, each a share of it: the leaf
modules in forward and in backward, and the step's own rows (loss, optimizer, zero_grad, data,
unattributed); what they leave is the containers' own code (a residual block's add). A move
multiplies each row's time by a factor set by what bounds the row:

* precision fp32 -> bf16/fp16/tf32: a row with counted FLOPs keeps the fraction of its roof it
  reached, so its time moves with its attainable FLOP/s, min(I x DRAM bandwidth, peak), from the
  fp32 ceiling at its intensity I to the other precision's ceiling at I' (I' = I when its bytes
  stay, 2I when half-precision tensors halve them: the factor is an interval between the two);
  elementwise rows and the residual code move with their bytes (x0.5 to x1); the optimizer,
  zero_grad, the loss and the data stay (fp32 master weights); autocast adds its weight casts,
  up to CAST_BYTES_PER_PARAM bytes per parameter at DRAM bandwidth;
* channels_last: the same FLOPs and the same compulsory bytes in either layout: no row moves;
* torch.compile: fusion removes at most the elementwise rows' and the residual code's memory
  traffic (their time x0 to x1); the rest runs the same kernels;
* batch x k: the model's rows, the loss and the data scale with the samples (x k); the optimizer
  and zero_grad are per-parameter work that does not (x1); what no row names is either (x1 to
  x k). Where the configuration's batch series has a fixed-time fit that holds, its fixed part
  (the intercept and its 95 % interval) replaces the rows;
* loader workers x2: the data row shrinks to nothing at most (x0 to x1).

The speed-up is the original's step over the predicted one (samples/s over samples/s: a batch
move counts the samples), an interval from the factors' ends. One wider than MAX_WIDTH counts as
not predicted (roofline/scoring.py): a prediction must not hold by being vague.

Pure: rows, ceilings and the fit arrive as plain data (common.schema.BREAKDOWN_ROW_FIELDS names
the layers.csv columns read); nothing here reads a store, writes a file or plots.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

from roofline.model import Roof, attainable_flops_per_s, is_finite_positive, ridge_intensity

MAX_WIDTH = 2.0
"""a predicted (or measured) interval whose high end is more than twice its low end says too
little to be held or missed: 'not predicted' (or 'not judged')."""
CAST_BYTES_PER_PARAM = 12.0
"""autocast's weight casts per step and parameter: forward reads the fp32 weight (4 bytes) and
writes its half copy (2); backward reads the half gradient (2) and writes it as fp32 (4)."""
HALF = ("bf16", "fp16")
LOWER_PRECISIONS = ("bf16", "fp16", "tf32")
STEP_FIXED = ("optimizer", "zero_grad")
"""rows whose work is per parameter, not per sample (the optimizer's update, clearing gradients)"""
STEP_SAMPLES = ("loss", "data")
"""step rows whose work grows with the samples"""

ASSUMES = {
    "precision": "each row with counted FLOPs keeps its fraction of the roof: its time moves with "
    "its attainable FLOP/s, from the fp32 ceiling to the {to} ceiling at its intensity (its bytes "
    "kept or halved); elementwise rows move with their bytes (x0.5-x1); optimizer, zero_grad, loss "
    "and data stay; autocast's weight casts add up to {cast} at DRAM bandwidth",
    "channels_last": "the same FLOPs and compulsory bytes in either layout: no row moves (layout "
    "conversions and kernel choice are not in the model)",
    "compile": "fusion removes at most the memory traffic of the elementwise rows and the "
    "residual code ({share} of the step: x0-x1 of it); every other row runs the same kernels",
    "batch_size": "the model's rows, the loss and the data scale with the samples; the optimizer "
    "and zero_grad ({fixed} of the step) do not; unnamed time ({other}) either way",
    "batch_fit": "the step is fixed + per-sample time: the fixed part is the intercept of the "
    "batch series' line, {fixed} ({share} of the step), the rest scales with the samples",
    "workers": "more workers remove at most the data row ({share} of the step)",
}


@dataclass(frozen=True)
class Row:
    """One layers.csv row as the model reads it (common.schema.BREAKDOWN_ROW_FIELDS)."""

    module: str
    phase: str
    kind: str
    """model | module | step"""
    leaf: bool
    share: float
    """of the step (the breakdown's share clock)"""
    flops: float = 0.0
    bytes: float = 0.0

    @property
    def intensity(self) -> float:
        return self.flops / self.bytes if self.bytes > 0 else math.nan


@dataclass(frozen=True)
class Original:
    """The configuration a whatif starts from (its knobs, and what the cast term needs)."""

    device_type: str
    precision: str = "fp32"
    channels_last: bool = False
    compile: bool = False
    batch_size: int = 1
    data_kind: str = "synthetic"
    workers: int = 2
    step_s: float | None = None
    """its train runs' mean step time"""
    params: float | None = None
    """its parameters (the train run's `params`)"""


@dataclass(frozen=True)
class BatchFit:
    """A fixed-time fit of the configuration's batch series that holds (step = fixed +
    per_sample x batch; train/batch_fit.py)."""

    fixed_s: float
    fixed_ci95_s: float
    step_s: float
    """the configuration's mean step time the fixed share is taken of"""
    batches: tuple[int, ...] = ()
    runs: int = 0


@dataclass(frozen=True)
class Move:
    """One knob of the configuration changed: `name` is how the table and the records call it."""

    name: str
    knob: str
    """the TrainConfig field it changes"""
    frm: object
    to: object

    @property
    def text(self) -> str:
        return f"{self.knob} {_show(self.frm)} -> {_show(self.to)}"


@dataclass(frozen=True)
class Prediction:
    """The predicted speed-up interval of a move (None, None: nothing predicted, `why_not` says
    why), what the model assumed, and the shares it rested on."""

    move: Move
    low: float | None
    high: float | None
    assumes: str = ""
    why_not: str = ""
    shares: dict = field(default_factory=dict)

    @property
    def made(self) -> bool:
        return self.low is not None and self.high is not None

    @property
    def width(self) -> float | None:
        return self.high / self.low if self.made and self.low > 0 else None

    @property
    def midpoint(self) -> float | None:
        """the interval's geometric midpoint (speed-ups are judged on the log scale)"""
        return math.sqrt(self.low * self.high) if self.made else None


def _show(v) -> str:
    if isinstance(v, bool):
        return "on" if v else "off"
    return str(v)


def moves_for(orig: Original, precisions: list[str]) -> tuple[list[Move], list[str]]:
    """The moves of `orig` (precisions: the lower precisions this device runs, from fp32), and
    one line per knob that has no move here (why: 'not applicable')."""
    out, none = [], []
    if orig.precision == "fp32":
        out += [Move(p, "precision", "fp32", p) for p in LOWER_PRECISIONS if p in precisions]
        if not precisions:
            none.append(f"precision: {orig.device_type} runs no lower precision than fp32 here")
    else:
        out.append(Move("fp32", "precision", orig.precision, "fp32"))
    cl = "channels_last" if not orig.channels_last else "no_channels_last"
    out.append(Move(cl, "channels_last", orig.channels_last, not orig.channels_last))
    out.append(
        Move(
            "compile" if not orig.compile else "no_compile",
            "compile",
            orig.compile,
            not orig.compile,
        )
    )
    out.append(Move("batch_x2", "batch_size", orig.batch_size, orig.batch_size * 2))
    if orig.batch_size >= 2:
        out.append(Move("batch_half", "batch_size", orig.batch_size, orig.batch_size // 2))
    if orig.data_kind == "synthetic":
        none.append(
            "workers: not applicable: synthetic data is one batch resident on the device, with "
            "no loader"
        )
    else:
        more = max(2, orig.workers * 2)
        out.append(Move("workers_x2", "workers", orig.workers, more))
    return out, none


def predict(
    move: Move,
    rows: list[Row],
    orig: Original,
    roof: Roof | None,
    fit: BatchFit | None = None,
    no_rows_why: str = "",
) -> Prediction:
    """The prediction of `move` from the breakdown's `rows`, the device's ceilings `roof` and the
    batch series' `fit` (module doc). No rows: nothing predicted, `no_rows_why` says why."""
    if move.knob == "batch_size" and fit is not None:
        return _batch_from_fit(move, fit)
    if not rows:
        return Prediction(move, None, None, why_not=no_rows_why or "no breakdown rows")
    parts = shares(rows)
    if move.knob == "precision":
        return _precision(move, parts, orig, roof)
    if move.knob == "channels_last":
        return _channels_last(move, orig)
    if move.knob == "compile":
        return _compile(move, parts, orig)
    if move.knob == "batch_size":
        return _batch(move, parts)
    if move.knob == "workers":
        share = _sum(parts["data"])
        return _interval(
            move, [(share, 0.0, 1.0)], ASSUMES["workers"].format(share=_pct(share)), parts
        )
    return Prediction(move, None, None, why_not=f"no model of {move.knob}")


def shares(rows: list[Row]) -> dict[str, list[Row]]:
    """The rows by what moves them: `flops` (leaf modules with counted FLOPs), `elementwise` (leaf
    modules without), `fixed` (optimizer, zero_grad), `samples` (loss, data), `data`, `other`
    (what the breakdown could not name: unattributed, device idle, communication) and `residual`
    (one row: the share no row holds, the containers' own code). Shares over 1 in all are scaled
    to 1."""
    mine = [r for r in rows if (r.kind == "module" and r.leaf) or r.kind == "step"]
    mine = [r for r in mine if math.isfinite(r.share) and r.share > 0]
    total = sum(r.share for r in mine)
    if total > 1:
        mine = [
            Row(r.module, r.phase, r.kind, r.leaf, r.share / total, r.flops, r.bytes) for r in mine
        ]
        total = 1.0
    out: dict[str, list[Row]] = {
        k: [] for k in ("flops", "elementwise", "fixed", "samples", "data", "other", "residual")
    }
    for r in mine:
        if r.kind == "module":
            out["flops" if r.flops > 0 and r.bytes > 0 else "elementwise"].append(r)
        elif r.module in STEP_FIXED:
            out["fixed"].append(r)
        elif r.module in STEP_SAMPLES:
            out["samples"].append(r)
            if r.module == "data":
                out["data"].append(r)
        else:
            out["other"].append(r)
    out["residual"].append(
        Row("(containers' own code)", "", "residual", False, max(0.0, 1 - total))
    )
    return out


def _sum(rows: list[Row]) -> float:
    return sum(r.share for r in rows)


def _pct(x: float) -> str:
    return f"{100 * x:.1f}%"


def _interval(move: Move, terms, assumes: str, parts: dict, scale: float = 1.0, add=(0.0, 0.0)):
    """The speed-up interval of relative step time sum(share x factor) + add over `terms` =
    [(share, factor at the slow end, factor at the fast end)] and every row they leave out (x1),
    times `scale` (the batch's samples ratio)."""
    covered = sum(s for s, _, _ in terms)
    slow = sum(s * a for s, a, _ in terms) + add[1] + max(0.0, 1 - covered)
    fast = sum(s * b for s, _, b in terms) + add[0] + max(0.0, 1 - covered)
    slow, fast = max(slow, fast), min(slow, fast)
    if not (fast > 0 and math.isfinite(slow)):
        return Prediction(
            move, None, None, assumes, "the model leaves no step time", _summary(parts)
        )
    return Prediction(move, scale / slow, scale / fast, assumes, "", _summary(parts))


def _summary(parts: dict) -> dict:
    """The share of the step each class of rows holds (what the record keeps of the rows)."""
    return {k: round(_sum(v), 6) for k, v in parts.items()}


def _precision(move: Move, parts: dict, orig: Original, roof: Roof | None) -> Prediction:
    frm, to = str(move.frm), str(move.to)
    if frm != "fp32":
        return Prediction(
            move,
            None,
            None,
            why_not=f"the model covers fp32 -> a lower precision, not {frm} -> {to}",
        )
    peak_from, peak_to = (roof.peak(frm), roof.peak(to)) if roof else (math.nan, math.nan)
    bw = roof.dram_bytes_per_s if roof else math.nan
    missing = [
        n
        for n, v in ((f"{frm} peak", peak_from), (f"{to} peak", peak_to), ("DRAM bandwidth", bw))
        if not is_finite_positive(v)
    ]
    if missing:
        return Prediction(
            move,
            None,
            None,
            why_not=f"no measured {', '.join(missing)} for this device (`python -m profiling.peaks "
            f"--dtypes fp32,{to}` measures them)",
        )
    halves = to in HALF
    terms = [_flops_factor(r, peak_from, peak_to, bw, halves) for r in parts["flops"]]
    byte_lo = 0.5 if halves else 1.0
    for name in ("elementwise", "residual"):
        terms += [(r.share, 1.0, byte_lo) for r in parts[name]]
    cast, cast_text = 0.0, "nothing counted (no parameter count or step time)"
    if halves and is_finite_positive(orig.params) and is_finite_positive(orig.step_s):
        cast_s = CAST_BYTES_PER_PARAM * orig.params / bw
        cast, cast_text = cast_s / orig.step_s, f"{cast_s * 1e3:.3g} ms a step"
    elif not halves:
        cast_text = "nothing (tf32 keeps fp32 tensors)"
    assumes = ASSUMES["precision"].format(to=to, cast=cast_text)
    ratio = peak_to / peak_from
    out = _interval(move, terms, assumes, parts, add=(0.0, cast))
    return Prediction(
        move,
        out.low,
        out.high,
        out.assumes,
        out.why_not,
        {
            **out.shares,
            "peak_ratio": round(ratio, 6),
            "cast_share": round(cast, 6),
            "ridge_from": round(ridge_intensity(peak_from, bw), 6),
        },
    )


def _flops_factor(r: Row, peak_from, peak_to, bw, halves: bool) -> tuple[float, float, float]:
    """(share, factor if its bytes stay, factor if they halve): time x attainable at the from
    ceiling / attainable at the to ceiling."""
    i = r.intensity
    base = attainable_flops_per_s(i, peak_from, bw)
    kept = base / attainable_flops_per_s(i, peak_to, bw)
    halved = base / attainable_flops_per_s(2 * i, peak_to, bw) if halves else kept
    return (r.share, max(kept, halved), min(kept, halved))


def _channels_last(move: Move, orig: Original) -> Prediction:
    if orig.device_type == "cuda" and orig.precision in HALF:
        return Prediction(
            move,
            None,
            None,
            why_not="on CUDA in half precision the layout decides which tensor-core kernels run, "
            "which the model does not know",
        )
    return Prediction(move, 1.0, 1.0, ASSUMES["channels_last"])


def _compile(move: Move, parts: dict, orig: Original) -> Prediction:
    if orig.compile:
        return Prediction(
            move, None, None, why_not="the model predicts fusion from an uncompiled breakdown"
        )
    fusable = parts["elementwise"] + parts["residual"]
    share = _sum(fusable)
    terms = [(r.share, 1.0, 0.0) for r in fusable]
    return _interval(move, terms, ASSUMES["compile"].format(share=_pct(share)), parts)


def _batch(move: Move, parts: dict) -> Prediction:
    k = float(move.to) / float(move.frm)
    terms = []
    for name in ("flops", "elementwise", "samples", "residual"):
        terms += [(r.share, k, k) for r in parts[name]]
    terms += [(r.share, 1.0, 1.0) for r in parts["fixed"]]
    terms += [(r.share, max(1.0, k), min(1.0, k)) for r in parts["other"]]
    fixed, other = _sum(parts["fixed"]), _sum(parts["other"])
    assumes = ASSUMES["batch_size"].format(fixed=_pct(fixed), other=_pct(other))
    return _interval(move, terms, assumes, parts, scale=k)


def _batch_from_fit(move: Move, fit: BatchFit) -> Prediction:
    k = float(move.to) / float(move.frm)
    lo = min(max(fit.fixed_s - fit.fixed_ci95_s, 0.0), fit.step_s) / fit.step_s
    hi = min(max(fit.fixed_s + fit.fixed_ci95_s, 0.0), fit.step_s) / fit.step_s
    ends = [k / (f + (1 - f) * k) for f in (lo, hi)]
    fixed = f"{fit.fixed_s * 1e3:.3g} ± {fit.fixed_ci95_s * 1e3:.3g} ms"
    assumes = ASSUMES["batch_fit"].format(fixed=fixed, share=f"{_pct(lo)}-{_pct(hi)}")
    shares_ = {
        "fixed_share_low": round(lo, 6),
        "fixed_share_high": round(hi, 6),
        "fit_runs": fit.runs,
    }
    return Prediction(move, min(ends), max(ends), assumes, "", shares_)
