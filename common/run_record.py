"""What a run holds, as plain data, and the facts about a run that are not measurements.

`RunRecord` is what every command fills and common/tracking.py's RunSession writes (or
common/spool.py keeps); `dataset_input` a data source as plain data (and `dataset_entity` as MLflow
logs it); `context_tags` the provenance tags `mlflow.start_run` would add; `system_metrics_interval`
how often system metrics sample a phase of a given length.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any

from common import console, schema
from common.errors import one_line

# Metric histories keep at most this many points per series (every k-th step beyond it, with the
# stride in the tag `<name>_stride`). MLflow's SQL store inserts ~0.2 ms of CPU per metric row, so
# 10,000 rows cost ~2 s; callers keep the full series as an artifact (see train/run.py).
MAX_SERIES_POINTS = 1000
# System metrics aim at this many samples over the sampled phase (see system_metrics_interval).
SYSTEM_SAMPLES = 30


def param_str(value: Any) -> str:
    """The string MLflow stores for a param; booleans lower-case like MLproject's."""
    if isinstance(value, bool):
        return "true" if value else "false"
    return str(value)


@dataclass
class RunRecord:
    """Everything a run logs, as plain data. Values are raw SI numbers, never rounded."""

    run_kind: str
    run_name: str | None = None
    params: dict[str, Any] = field(default_factory=dict)
    tags: dict[str, str] = field(default_factory=dict)
    metrics: dict[str, float] = field(default_factory=dict)
    # per-step metrics: name -> values; the step index is the position in the list
    series: dict[str, list[float]] = field(default_factory=dict)
    # artifacts written from memory: artifact path ("dir/name.txt") -> text
    texts: dict[str, str] = field(default_factory=dict)
    # artifacts copied from disk: artifact path ("dir/name.csv") -> local file path
    files: dict[str, str] = field(default_factory=dict)
    # dataset inputs (the UI's Dataset column): dicts of `dataset_input`'s fields
    inputs: list[dict] = field(default_factory=list)

    def merge(self, other: "RunRecord") -> None:
        self.params.update(other.params)
        self.tags.update(other.tags)
        self.metrics.update(other.metrics)
        self.series.update(other.series)
        self.texts.update(other.texts)
        self.files.update(other.files)
        self.inputs.extend(i for i in other.inputs if i not in self.inputs)

    def is_empty(self) -> bool:
        return not (
            self.params
            or self.tags
            or self.metrics
            or self.series
            or self.texts
            or self.files
            or self.inputs
        )

    def validate(self) -> None:
        for key in [*self.params, *self.tags, *self.metrics, *self.series]:
            schema.check_key(key)


def dataset_input(name: str, digest: str, source_type: str, source: dict, context: str) -> dict:
    """A dataset input of a run, as plain data: `name` and `digest` (the UI's Dataset column),
    `source_type` ("local" for a folder, "code" for data a program makes), `source` (JSON-able: a
    folder's {"uri": ...}, generated data's description) and `context` (e.g. "train")."""
    return {
        "name": name,
        "digest": digest,
        "source_type": source_type,
        "source": source,
        "context": context,
    }


def context_tags(run_kind: str) -> dict[str, str]:
    """What `mlflow.start_run` adds and `MlflowClient.create_run` does not: `mlflow.user`,
    `mlflow.source.name|type`, `mlflow.source.git.commit|branch|repoURL` (MLflow's context
    providers), and `mlflow.project.entryPoint`, the MLproject entry point that runs `run_kind`."""
    tags = {schema.TAG_ENTRY_POINT: schema.ENTRY_POINTS[run_kind]}
    try:
        from mlflow.tracking.context.registry import resolve_tags

        tags.update(resolve_tags())
    except Exception as exc:  # noqa: BLE001 - provenance is a nice-to-have, never a failure
        console.note(f"source tags not resolved ({one_line(exc)[:200]})")
    return tags


def system_metrics_interval(expected_s: float | None) -> float | None:
    """Seconds between system-metric samples for a phase expected to last `expected_s`: about
    SYSTEM_SAMPLES samples, between 1 s and 60 s; 1 s when the length is unknown; None (do not
    sample) when the phase is shorter than two 1-second samples, which would hold only MLflow's
    first sample (CPU use since the previous psutil call) or none."""
    if expected_s is None:
        return 1.0
    if expected_s < 2.0:
        return None
    return min(60.0, max(1.0, expected_s / SYSTEM_SAMPLES))


def series_stride(n_points: int) -> int:
    """Every how many steps a series of `n_points` is logged as metric history."""
    return max(1, -(-n_points // MAX_SERIES_POINTS))


def dataset_entity(d: dict):
    """A `dataset_input` dict as the DatasetInput MlflowClient.log_inputs takes."""
    from mlflow.entities import Dataset, DatasetInput, InputTag

    dataset = Dataset(
        name=d["name"],
        digest=d["digest"],
        source_type=d["source_type"],
        source=json.dumps(d["source"]),
    )
    return DatasetInput(dataset, tags=[InputTag("mlflow.data.context", d["context"])])
