"""The result as rows, CSV tables and the run's metrics (pure: rows and strings)."""

from __future__ import annotations

import csv
import io

from common import fmt, schema
from train.complexity.measure import ComplexityResult

MODEL_ATTRS = (
    "model",
    "image_size",
    "precision",
    "optimizer",
    "num_classes",
    "params",
    "param_bytes",
    "buffer_bytes",
    "weight_bytes",
    "grad_bytes",
    "optimizer_state_bytes",
    "fwd_flops_per_sample",
    "fwd_macs_per_sample",
    "train_flops_per_sample",
    "activation_bytes_per_sample",
    "activation_fixed_bytes",
    "fixed_bytes",
    "modeled_bytes_per_sample",
    "modeled_fixed_bytes",
    "modeled_intensity_limit_flops_per_byte",
)
"""models.csv columns read from the ModelComplexity itself"""
MODEL_COLUMNS = (*MODEL_ATTRS, "device_memory_bytes", "max_batch_fit", "measured_batches")
BATCH_COLUMNS = (
    "model",
    "batch_size",
    "activation_bytes",
    "predicted_train_mem_bytes",
    "fits",
    "train_flops_per_step",
    "modeled_bytes_per_step",
    "modeled_intensity_flops_per_byte",
)
LAYER_COLUMNS = (
    "name",
    "type",
    "output_shape",
    "params",
    "fwd_flops_per_sample",
    "fwd_macs_per_sample",
    "saved_bytes_per_sample",
    "saved_fixed_bytes",
)
RSS_COLUMNS = (
    "model",
    "batch_size",
    "rss_before_bytes",
    "peak_rss_bytes",
    "measured_growth_bytes",
    "predicted_growth_bytes",
    "rel_error",
    "peak_source",
)


MODEL_METRICS = (
    "params",
    "param_bytes",
    "buffer_bytes",
    "grad_bytes",
    "optimizer_state_bytes",
    "fwd_flops_per_sample",
    "fwd_macs_per_sample",
    "train_flops_per_sample",
    "activation_bytes_per_sample",
    "activation_fixed_bytes",
    "fixed_bytes",
    "modeled_intensity_limit_flops_per_byte",
    "max_batch_fit",
)
"""models.csv columns that are also logged as metrics `<model>/<column>`"""


def model_rows(result: ComplexityResult) -> list[dict]:
    return [
        {
            **{k: getattr(c, k) for k in MODEL_ATTRS},
            "device_memory_bytes": result.device_memory_bytes,
            "max_batch_fit": c.max_batch_fit(result.device_memory_bytes),
            "measured_batches": " ".join(map(str, c.measured_batches)),
        }
        for c in result.models
    ]


def batch_rows(result: ComplexityResult) -> list[dict]:
    rows = []
    for c in result.models:
        for b in result.cfg.batch_sizes:
            counts = c.step_counts(b)
            mem = c.predicted_train_mem_bytes(b)
            rows.append(
                {
                    "model": c.model,
                    "batch_size": b,
                    "activation_bytes": c.activation_bytes(b),
                    "predicted_train_mem_bytes": mem,
                    "fits": mem <= result.device_memory_bytes,
                    "train_flops_per_step": counts.train_flops,
                    "modeled_bytes_per_step": counts.modeled_bytes,
                    "modeled_intensity_flops_per_byte": counts.modeled_intensity_flops_per_byte,
                }
            )
    return rows


def layer_rows(c) -> list[dict]:
    return [{k: getattr(row, k) for k in LAYER_COLUMNS} for row in c.layers]


def rss_rows(result: ComplexityResult) -> list[dict]:
    from train.complexity.footprint import (
        predicted_step_growth_bytes,
    )  # imports numpy: not on --help

    by_name = {c.model: c for c in result.models}
    rows = []
    for name, measurements in result.rss.items():
        for r in measurements:
            pred = predicted_step_growth_bytes(by_name[name], r.batch_size)
            rows.append(
                {
                    "model": name,
                    "batch_size": r.batch_size,
                    "rss_before_bytes": r.rss_before_bytes,
                    "peak_rss_bytes": r.peak_rss_bytes,
                    "measured_growth_bytes": r.growth_bytes,
                    "predicted_growth_bytes": pred,
                    "rel_error": (pred - r.growth_bytes) / r.growth_bytes,
                    "peak_source": r.peak_source,
                }
            )
    return rows


def to_csv(rows: list[dict], columns) -> str:
    buf = io.StringIO()
    w = csv.DictWriter(buf, fieldnames=list(columns), lineterminator="\n")
    w.writeheader()
    for row in rows:
        w.writerow({k: _csv_value(row[k]) for k in columns})
    return buf.getvalue()


def _csv_value(v):
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, float) and v.is_integer():
        return int(v)
    return fmt.csv_cell(v)


def metrics(result: ComplexityResult) -> dict[str, float]:
    """The run's metrics: `<model>/<name>` per model, `<model>/b<batch>/<name>` per batch."""
    out: dict[str, float] = {
        "device_memory_bytes": float(result.device_memory_bytes),
        "wall_s": result.wall_s,
    }
    for row in model_rows(result):
        m = schema.sanitize_key(row["model"])
        out.update({f"{m}/{k}": float(row[k]) for k in MODEL_METRICS})
    for row in batch_rows(result):
        m, b = schema.sanitize_key(row["model"]), row["batch_size"]
        for k in (
            "predicted_train_mem_bytes",
            "activation_bytes",
            "train_flops_per_step",
            "modeled_intensity_flops_per_byte",
        ):
            out[f"{m}/b{b}/{k}"] = float(row[k])
    for row in rss_rows(result):
        m, b = schema.sanitize_key(row["model"]), row["batch_size"]
        for k in ("measured_growth_bytes", "predicted_growth_bytes", "rel_error"):
            out[f"{m}/rss_b{b}/{k}"] = float(row[k])
    return {k: v for k, v in out.items() if v == v}  # MLflow rejects nothing, but NaN helps nobody
