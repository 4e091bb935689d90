"""The MLflow run schema: the contract between train/, profiling/ and analysis/.

See docs/schema.md for the meaning of every name. Values are raw SI units; names carry the unit.
"""

from __future__ import annotations

import hashlib
import json
import re
import socket
from typing import Any, Mapping

from common.errors import UsageError

# --- tags --------------------------------------------------------------------------------------
TAG_RUN_KIND = "run_kind"
TAG_ENV_LABEL = "env_label"
TAG_DEVICE_NAME = "device_name"
TAG_DEVICE_TYPE = "device_type"
TAG_HOST = "host"
TAG_CONFIG_KEY = "config_key"
TAG_ERROR = "error"  # one-line reason on every FAILED run
TAG_INTENSITY_SOURCE = "intensity_source"  # "measured" (ncu counters) or "modeled" (byte model)
# `<host>:<pid>:<start s>` of the process that drives the run (common.runs.process_tag): how a
# later command tells a run left RUNNING by a dead process from a live one
TAG_PROCESS = "process"
# on a run `python -m common.upload` created: the spool entry it came from (a second upload finds it)
TAG_SPOOL_ID = "spool_local_id"
TAG_CONFIG_LABEL = (
    "config_label"  # readable configuration for the UI's Group by: resnet18/b8/fp32/64px
)
TAG_NOTE = "mlflow.note.content"  # the run's description in the MLflow UI (plain text)
TAG_ENTRY_POINT = "mlflow.project.entryPoint"

# The MLproject entry point that runs each run kind (the UI's Entry Point column).
ENTRY_POINTS = {
    "train": "main",
    "profile": "profile",
    "peaks": "peaks",
    "analysis": "analyze",
    "sweep": "sweep",
    "complexity": "complexity",
    "breakdown": "breakdown",
    "whatif": "whatif",
}
# why a profile's ncu input looks cut short (an import with --allow-truncated): no intensity from it
TAG_NCU_TRUNCATED = "ncu_truncated"
# the training phase(s) a profile missed against the config's counted FLOPs (profiling.ncu.completeness):
# its intensity stays off the training point unless analysis is asked (--use-incomplete-profiles)
TAG_NCU_MISSING_PHASE = "ncu_missing_phase"

# distributed train runs (docs/schema.md)
STEP_SERIES = "steps/step_time_s"
"""a train run's per-step times (metric history, step = measured iteration): named apart from
the summaries so that no page shows the last step's time as "the" step time (step_time_mean_s is);
MLflow's charts put it in a section `steps`"""
COMPUTE_ONLY_SERIES = "steps/compute_only_step_time_s"
"""a data-parallel run's per-step times without gradient synchronisation"""
OLD_STEP_SERIES = "step_time_s"
"""what runs logged before STEP_SERIES call their per-step times (analysis reads both)"""
TAG_BASE_CONFIG_KEY = "base_config_key"  # config_key of the same work per process in one process
TAG_BATCH_SCOPE = "batch_size_scope"  # "per_process": batch_size is each process's batch

RUN_KINDS = ("train", "profile", "peaks", "analysis", "sweep", "complexity", "breakdown", "whatif")

# --- what other commands read of a breakdown run (docs/schema.md, `breakdown` runs) -------------
# profiling/breakdown writes them (its layers.csv has these columns and more); train.whatif reads
# them as plain data (it may not import profiling): one list both hold to.
BREAKDOWN_LAYERS_ARTIFACT = "layers.csv"
BREAKDOWN_ROW_FIELDS = ("module", "phase", "kind", "leaf", "share", "flops", "bytes")
"""the layers.csv columns the what-if model reads: the row, its share of the step (by the
breakdown's share clock), its counted FLOPs and modeled bytes per step"""
BREAKDOWN_STEP_METRIC = "breakdown_step_s"

# --- the measured configuration ----------------------------------------------------------------
# Fields that change what the device computes. Two runs with equal values do the same work per
# step, so their counters and timings can be joined: a `profile` run of a config (on a GPU, under
# ncu) and the `train` runs of the same config (unperturbed timing) share `config_key`.
# num_classes is in the key because the classifier head is part of the work (CIFAR-10 has 10).
# Not in the key: device (joined separately via device_name/env_label), iteration counts, seed,
# data source, loader workers, learning rate, env label. The order is the report's column order
# (the hash sorts the names: reordering them changes no key).
CONFIG_KEY_FIELDS = (
    "model",
    "precision",
    "batch_size",
    "image_size",
    "num_classes",
    "channels_last",
    "compile",
    "optimizer",
)

# Fields that a data-parallel run (`python -m train --distributed ...` under torchrun) adds to the
# key: its world size, engine, ZeRO stage and collective backend change what each step does
# (gradient synchronisation, partitioned optimizer state). They enter the key only when an engine
# is given (`distributed` is not "none"), so a single-process run's key is the same whether or not
# its run logged them (runs without these params join). docs/schema.md states the rule.
DISTRIBUTED_KEY_FIELDS = ("distributed", "zero_stage", "world_size", "backend")
NOT_DISTRIBUTED = "none"
CONFIG_FIELDS = CONFIG_KEY_FIELDS + DISTRIBUTED_KEY_FIELDS
"""Every field of a configuration's identity (a single-process run's distributed fields are
"none", 0, 1 and "none": analysis/join.py fills them)."""

# A roofline point: the runs of one configuration (config_key) in one environment on one device.
WHERE_KEYS = (TAG_ENV_LABEL, TAG_DEVICE_NAME)
POINT_KEYS = (*WHERE_KEYS, TAG_CONFIG_KEY)


def comparison_keys(*but: str) -> list[str]:
    """Where a point ran and every CONFIG_FIELDS field except `but`: two points equal in these
    differ only in `but` (a speed-up compares precisions, a scaling series world sizes)."""
    unknown = set(but) - set(CONFIG_FIELDS)
    if unknown:
        raise ValueError(f"not configuration fields: {', '.join(sorted(unknown))}")
    return [*WHERE_KEYS, *(f for f in CONFIG_FIELDS if f not in but)]


PRECISIONS = ("fp32", "fp16", "bf16", "tf32")
"""fp32 = IEEE FP32 (TF32 off on CUDA), fp16/bf16 = autocast, tf32 = fp32 tensors with TF32
tensor-core math (CUDA sm_80+). New values only ever append: fp32 keeps its config_key."""
# CUDA runs: the fp32 math in force, read back from torch (ieee | tf32 | cudnn=…,matmul=…)
TAG_FP32_MATH = "fp32_math"
# train runs: whether every aten op of the counted step had a FLOP formula or needs none
# (complete | incomplete; train/ledger.py), the ops without one, and their share of the bytes
TAG_FLOPS_COVERAGE = "flops_coverage"
TAG_FLOPS_UNCOUNTED = "flops_uncounted_ops"
METRIC_UNCOUNTED_BYTES_SHARE = "flops_uncounted_bytes_share"
# breakdown runs: the step's share in the own time of the rows that ran ops with no FLOP formula
METRIC_UNCOUNTED_TIME_SHARE = "breakdown_flops_uncounted_time_share"
# train runs: where the model came from (torchvision | timm | user) and what exactly
TAG_MODEL_SOURCE = "model_source"
# train runs of a model with auxiliary heads: each head's loss weight (aux_logits1=0.3,...)
TAG_AUX_LOSS = "aux_loss_weights"

_KEY_RE = re.compile(r"^[/\w.\- ]*$")


# --- definitions (docs/schema.md, "Definitions") ---------------------------------------------------
def rate_per_s(per_step, step_time_mean_s):
    """Every rate of a train run: an amount counted per step (samples, training FLOPs) over the
    MEAN step time (total measured time / measured steps: what the user pays for, stalls and pauses
    included; the median and p95 describe variability only). `throughput_samples_per_s` =
    rate_per_s(batch, mean), `achieved_flops_per_s` = rate_per_s(train_flops_per_step, mean).
    Floats or pandas Series alike."""
    return per_step / step_time_mean_s


def config_key(config: Mapping[str, Any]) -> str:
    """Stable 16-hex-digit hash of the CONFIG_KEY_FIELDS of `config` (a dict of params), plus the
    DISTRIBUTED_KEY_FIELDS when `config` is a distributed run's (`is_distributed`).

    Values are normalized (ints stay ints, booleans are booleans, strings lower-case) so that the
    same config hashes equally whether it comes from argparse, a sweep file or MLflow params
    (which MLflow stores as strings).
    """
    names = CONFIG_KEY_FIELDS + (DISTRIBUTED_KEY_FIELDS if is_distributed(config) else ())
    missing = [f for f in names if f not in config]
    if missing:
        raise KeyError(f"config_key needs {', '.join(missing)}")
    return stable_hash({f: config[f] for f in names})


def is_distributed(config: Mapping[str, Any]) -> bool:
    """Whether `config` (a TrainConfig dict or a run's params) is a data-parallel run's: one with an
    engine (`distributed` = ddp | deepspeed). A run without the param is not."""
    value = config.get("distributed")
    return value is not None and str(value).strip().lower() not in ("", NOT_DISTRIBUTED)


def stable_hash(values: Mapping[str, Any], lower_strings: bool = True) -> str:
    """16-hex-digit hash of `values`, normalized so that "16" == 16 and "true" == True whatever the
    source; strings are compared lower-case unless `lower_strings` is false (data paths)."""
    norm = {k: _normalize(v, lower_strings) for k, v in values.items()}
    blob = json.dumps(norm, sort_keys=True, separators=(",", ":"))
    return hashlib.sha256(blob.encode()).hexdigest()[:16]


def _normalize(value: Any, lower_strings: bool = True) -> Any:
    if isinstance(value, bool):
        return value
    if isinstance(value, (int, float)):
        return int(value) if float(value).is_integer() else float(value)
    text = str(value).strip()
    if text.lower() in ("true", "false"):
        return text.lower() == "true"
    try:
        return _normalize(float(text))
    except ValueError:
        return text.lower() if lower_strings else text


def check_key(name: str) -> str:
    """Return `name` if MLflow accepts it as a metric/param/tag key, else raise ValueError."""
    if not name or not _KEY_RE.match(name):
        raise ValueError(f"invalid MLflow key {name!r}: use letters, digits, _ - . / and spaces")
    return name


def sanitize_key(name: str) -> str:
    """Replace characters MLflow rejects in keys by '_' (for keys built from kernel or layer names)."""
    return re.sub(r"[^/\w.\- ]", "_", name) or "_"


def host_name() -> str:
    """The value of the `host` tag: this machine's host name."""
    return socket.gethostname()


def default_env_label() -> str:
    """The environment label used when the user gives none: the host name."""
    return host_name()


# Longest env label (and sweep name): a name to read in a legend, not a description. MLflow cuts
# tag values at 8,000 characters without a word (a cut label never matches again: the next sweep
# resumed nothing), and figure file names are built from labels.
MAX_LABEL_CHARS = 100


def env_label(text: str | None) -> str:
    """The env label to record for `text` (`--env-label`): stripped, the host name when empty, and
    checked by `check_label` (ValueError naming the rule). The one rule every command applies, so
    that a label one command accepts, every other command (analysis --env-label, a sweep) accepts."""
    label = str(text or "").strip()
    if not label:
        label = default_env_label()
        if len(label) > MAX_LABEL_CHARS:  # a host name may be 253 characters long
            raise ValueError(
                f"the host name {label[:40]!r}... is longer than {MAX_LABEL_CHARS} characters: "
                "give --env-label"
            )
    return check_label(label, "env_label")


def name_problem(text) -> str | None:
    """Why `text` is no name (of a model, precision, device or environment), or None: a name is
    one line of printable text of at most MAX_LABEL_CHARS characters. The rule analysis/screen.py
    applies to every name it reads from a store, and each command to the names it takes (None
    for a value that is absent, not a string)."""
    if not isinstance(text, str):
        return None
    if len(text) > MAX_LABEL_CHARS:
        return f"{len(text)} characters long, where a name is at most {MAX_LABEL_CHARS}"
    if not text.isprintable():
        return "holds a character that is not printable (a line break, a control character)"
    return None


def check_name(text: str, what: str) -> str:
    """`text` if it is a name (name_problem), else ValueError naming `what` and why."""
    why = name_problem(text)
    if why:
        shown = f"{text[:40]!r}{'...' if len(text) > 40 else ''}"
        raise ValueError(
            f"{what} {shown}: {why}; give one line of printable text of at most "
            f"{MAX_LABEL_CHARS} characters"
        )
    return text


def check_label(text: str, what: str) -> str:
    """`text` if it is a usable label (env label, sweep name), else ValueError saying why: at most
    MAX_LABEL_CHARS characters of one line of printable text (no control characters), no comma
    (analysis --env-label separates labels with commas), not both quote characters (an MLflow
    search filter cannot hold both)."""
    shown = f"{text[:40]!r}{'...' if len(text) > 40 else ''}"
    if len(text) > MAX_LABEL_CHARS:
        raise ValueError(
            f"{what} {shown} is {len(text)} characters long: use at most {MAX_LABEL_CHARS}"
        )
    if not text.isprintable():
        raise ValueError(
            f"{what} {shown} contains a line break or another control character: use one line"
        )
    if "," in text:
        raise ValueError(
            f"{what} {shown} contains a comma, which separates labels in analysis --env-label: "
            "use another character"
        )
    if "'" in text and '"' in text:
        raise ValueError(f"{what} {shown} contains both quote characters ' and \"; rename it")
    return text


def filter_literal(value: str, what: str = "value") -> str:
    """`value` as a string literal of an MLflow search filter, which has no escape for quotes:
    single quotes, else double quotes; a value holding both cannot be searched for (UsageError)."""
    if "'" not in value:
        return f"'{value}'"
    if '"' not in value:
        return f'"{value}"'
    raise UsageError(f"{what} {value!r} contains both quote characters ' and \"; rename it")
