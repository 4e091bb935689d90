"""What a sweep runs: the spec (matrix, base, repeats, name), its plan and the keys resume compares.

Pure: no MLflow, no files written (a sweep file is read).
"""

from __future__ import annotations

import hashlib
import itertools
import json
import math
from dataclasses import dataclass, field, fields
from pathlib import Path

from common import schema, textfile
from common.errors import UsageError
from train.config import TrainConfig
from train.models import check_model_name

TAG_SWEEP_NAME = "sweep_name"
TAG_SWEEP_KEY = "sweep_key"  # which (configuration) of the sweep a child measured: see sweep_key()
# on the run `mlflow run` made for a resumed sweep: the parent it resumed
TAG_RESUME_OF = "sweep_resume_of"
PARAM_REPEAT = "repeat"
AXIS_ALIASES = {
    "batch": "batch_size",
    "models": "model",
    "batch_sizes": "batch_size",
    "precisions": "precision",
    "image_sizes": "image_size",
    "world_sizes": "world_size",
}
CONFIG_FIELDS = {f.name for f in fields(TrainConfig)}
LABEL_AXES = ("model", "batch_size", "precision", "image_size")  # always in a child's label
MAX_RUNS = 10_000
"""The most runs one sweep plans (configurations x repeats): a week of 1-minute runs. The matrix's
size is checked before any configuration is made: ten axes of ten values are 10^10 of them."""


@dataclass
class SweepSpec:
    """What to run. Every axis and base key is a TrainConfig field (docs/schema.md)."""

    matrix: dict[str, list]
    """axis -> values; the cross product of all axes is the set of configurations. Repeated values
    of an axis count once."""
    base: dict = field(default_factory=dict)
    """fields shared by every configuration (device, iters, image_size, data, ...)."""
    repeats: int = 1
    """runs per configuration; repeats of one configuration go to different passes over the matrix."""
    variants: list[dict] = field(default_factory=list)
    """configurations given one by one instead of crossed: each a dict of fields over the base,
    crossed with the matrix (which may then be empty). A what-if's original and its one-knob
    moves (train/whatif); empty: the matrix alone."""
    name: str | None = None
    """the sweep's name; re-running a sweep of the same name resumes it. Default: a hash of the spec."""
    env_label: str | None = None
    """the machine's label (default: base's env_label, else the host name). Not part of the spec's
    identity: every machine running the same sweep gets the same default name."""

    def __post_init__(self) -> None:
        self.matrix = {
            AXIS_ALIASES.get(k, k): unique(v) if isinstance(v, (list, tuple)) else [v]
            for k, v in self.matrix.items()
        }
        self.base = {AXIS_ALIASES.get(k, k): v for k, v in self.base.items()}
        self.variants = [{AXIS_ALIASES.get(k, k): v for k, v in d.items()} for d in self.variants]
        for key in [*self.matrix, *self.base, *(k for d in self.variants for k in d)]:
            if key not in CONFIG_FIELDS:
                raise ValueError(
                    f"matrix: unknown field {key!r}; use TrainConfig fields such as model, batch_size, precision"
                )
        if "env_label" in self.matrix:
            raise ValueError(
                "matrix: env_label cannot be an axis; run the sweep on each machine with its own --env-label"
            )
        label = self.base.pop("env_label", None)
        self.env_label = self.env_label or label or None
        for key, values in self.matrix.items():
            if not values:
                raise ValueError(f"matrix: axis {key!r} has no values")
        if int(self.repeats) < 1:
            raise ValueError(f"repeats must be a positive integer, got {self.repeats}")
        self.repeats = int(self.repeats)
        runs = math.prod(len(v) for v in self.matrix.values()) * self.repeats
        if runs > MAX_RUNS:
            raise ValueError(
                f"matrix: {' x '.join(str(len(v)) for v in self.matrix.values())} values x "
                f"{self.repeats} repeats are {runs:,} runs, more than the {MAX_RUNS:,} of one "
                "sweep: split it into sweeps of fewer axes or values"
            )
        if not self.name:
            self.name = "sweep-" + self.digest()
        try:
            schema.check_key(self.name)
        except ValueError:
            raise ValueError(
                f"name {self.name!r}: use letters, digits, _ - . / and spaces"
            ) from None
        schema.check_label(self.name, "sweep name")  # bounded like an env label

    def digest(self) -> str:
        ident = {"matrix": self.matrix, "base": self.base, "repeats": self.repeats}
        if self.variants:  # a sweep without variants keeps the name it always had
            ident["variants"] = self.variants
        blob = json.dumps(
            ident,
            sort_keys=True,
            default=str,
        )
        return hashlib.sha256(blob.encode()).hexdigest()[:10]

    def configs(self) -> list[TrainConfig]:
        """Every distinct configuration of the matrix, validated (ValueError names the combination).

        Combinations that TrainConfig normalises to the same configuration ("FP32" and "fp32") count once.
        """
        axes = list(self.matrix)
        out, seen = [], set()
        combos = itertools.product(self.variants or [{}], *(self.matrix[a] for a in axes))
        for variant, *combo in combos:
            values = {**self.base, **variant, **dict(zip(axes, combo))}
            if self.env_label:
                values["env_label"] = self.env_label
            try:
                cfg = TrainConfig(**values)
            except ValueError as exc:
                raise ValueError(f"{_describe(values)}: {exc}") from None
            key = sweep_key(cfg)
            if key not in seen:
                seen.add(key)
                out.append(cfg)
        return out

    def plan(self) -> list[tuple[TrainConfig, int]]:
        """(config, repeat) in run order: repeat-major, so slow drift of the machine spreads over all
        configurations instead of biasing the ones measured last."""
        configs = self.configs()
        return [(cfg, r) for r in range(self.repeats) for cfg in configs]

    def run_params(self) -> dict:
        """The parent run's params: what identifies the sweep besides its name."""
        out = {
            "sweep_matrix": json.dumps(self.matrix, sort_keys=True),
            "sweep_base": json.dumps(self.base, sort_keys=True, default=str),
            "sweep_repeats": self.repeats,
        }
        if self.variants:
            out["sweep_variants"] = json.dumps(self.variants, sort_keys=True, default=str)
        return out


def unique(values) -> list:
    """`values` without repeats, first occurrence first (`--models resnet18 resnet18` runs once)."""
    out = []
    for v in values:
        if v not in out:
            out.append(v)
    return out


def sweep_key(cfg: TrainConfig) -> str:
    """Stable 16-hex-digit hash of every field of `cfg` except env_label (and the data-parallel
    fields of a single-process configuration): what resume compares.

    `config_key` (the join key of the analysis) leaves out fields that do not change the work per
    step (data source, device, seed, lr, iteration counts, workers); two configurations of one sweep
    can differ only there (`data: [synthetic, fake]`), so resume needs this finer key.
    """
    # cfg.params(): every field but env_label, and the data-parallel fields only for a distributed
    # configuration (a single-process configuration's key does not depend on them)
    return schema.stable_hash(
        cfg.params(), lower_strings=False
    )  # case kept: data paths are case-sensitive


def check_models(spec: SweepSpec) -> None:
    """Every model name of the sweep exists (UsageError with close names otherwise); names are
    replaced by torchvision's spelling so that equal models get equal keys."""
    if "model" in spec.matrix:
        spec.matrix["model"] = unique(
            check_model_name(str(m).strip()) for m in spec.matrix["model"]
        )
    elif "model" in spec.base:
        spec.base["model"] = check_model_name(str(spec.base["model"]).strip())


@dataclass
class Plan:
    """A checked sweep, ready to run: every (configuration, repeat) in run order with its key."""

    spec: SweepSpec
    env_label: str
    runs: list[tuple[TrainConfig, int, str]]
    """(configuration, repeat, sweep_key), repeat-major (SweepSpec.plan)."""

    @property
    def axes(self) -> list[str]:
        return list(self.spec.matrix)

    @property
    def n_configs(self) -> int:
        return len(self.runs) // self.spec.repeats

    def label(self, cfg: TrainConfig, repeat: int) -> str:
        """`resnet18 b2 fp32 32px #0`, with every other matrix axis, and each field a variant
        sets where this configuration's value is not the base's (`compile=True`)."""
        set_ = dict.fromkeys(k for d in self.spec.variants for k in d if k not in self.axes)
        differ = [k for k in set_ if str(getattr(cfg, k)) != str(self.spec.base.get(k))]
        return child_label(cfg, repeat, [*self.axes, *differ])


def plan_sweep(spec: SweepSpec, env_label: str | None = None) -> Plan:
    """Check every model name and configuration of `spec` (one UsageError line, before anything
    runs) and plan it for `env_label` (default: the spec's, else the host name)."""
    check_models(spec)
    try:
        planned = spec.plan()
    except ValueError as exc:
        raise UsageError(str(exc)) from None
    try:  # the one rule every command applies (train, analysis --env-label, ...)
        label = schema.env_label(env_label or spec.env_label or planned[0][0].env_label)
    except ValueError as exc:
        raise UsageError(str(exc)) from None
    for cfg, _ in planned:
        cfg.env_label = label
    # keyed now: running a configuration normalises some fields (model spelling, num_classes)
    return Plan(spec, label, [(cfg, r, sweep_key(cfg)) for cfg, r in planned])


def load_spec_file(path: str) -> dict:
    """A sweep file (YAML or JSON): {name?, repeats?, matrix: {axis: [values]}, base?: {field: value}}.
    Read as every user file is (common.textfile: a regular file, at most 1 Mi characters, YAML
    without aliases)."""
    p = Path(path).expanduser()
    text = textfile.read_text(p, "sweep file", "--matrix")
    try:
        data = textfile.load_yaml(text)  # YAML is a superset of JSON
    except ValueError as exc:
        raise UsageError(
            f"sweep file {p} is not valid YAML/JSON: {exc}; fix that line "
            "(indent with spaces, close every [ and {)"
        ) from None
    if not isinstance(data, dict) or not isinstance(data.get("matrix"), dict):
        raise UsageError(f"sweep file {p} needs a `matrix:` mapping of axis -> list of values")
    unknown = set(data) - {"name", "repeats", "matrix", "base"}
    if unknown:
        raise UsageError(
            f"sweep file {p}: unknown keys {sorted(unknown)} (allowed: name, repeats, matrix, base)"
        )
    return data


def _describe(values: dict) -> str:
    return " ".join(f"{k}={values[k]}" for k in LABEL_AXES if k in values) or "configuration"


def child_label(cfg: TrainConfig, repeat: int, axes=()) -> str:
    """`resnet18 b2 fp32 32px #0`, plus `axis=value` for every other axis in `axes` (`data=fake`)."""
    extra = "".join(f" {a}={getattr(cfg, a)}" for a in axes if a not in LABEL_AXES)
    return f"{cfg.model} b{cfg.batch_size} {cfg.precision} {cfg.image_size}px{extra} #{repeat}"
