"""The measured configuration of a training benchmark, validated on construction."""

from __future__ import annotations

import argparse
import math
from dataclasses import asdict, dataclass, field

from common import flags, schema
from common.ui import run_name

PRECISION = {"choices": schema.PRECISIONS}
DEVICE = {
    "choices": ("auto", "cpu", "cuda", "mps"),
    "choices_pattern": (r"cuda:\d+", "cuda:N (N = 0, 1, ...)"),
}
OPTIMIZER = {"choices": ("sgd", "adam", "adamw")}
"""the choices of the fields TrainConfig shares with the complexity command's config, declared
once (common.flags: the flags' choices and check_choices come from them; cuda:-1, cuda:abc: no)"""
# numeric configuration fields logged again as metrics `config_<field>` (TrainConfig.header)
CONFIG_METRICS = ("batch_size", "image_size")
ENGINES = (schema.NOT_DISTRIBUTED, "ddp", "deepspeed")
BACKENDS = ("auto", "nccl", "gloo")
ZERO_STAGES = (0, 1, 2, 3)
# The fields of a data-parallel run (docs/distributed.md). A single-process config leaves them at
# their defaults and neither logs them as params nor hashes them into its keys, so its params,
# config_key and sweep_key do not depend on them.
DISTRIBUTED_FIELDS = (*schema.DISTRIBUTED_KEY_FIELDS, "collective_timeout_s")
_FLAG_TOKENS = (("channels_last", "cl"), ("compile", "compiled"))
"""the boolean knobs a name shows, and how (as analysis labels them)"""


@dataclass
class TrainConfig:
    """One benchmark configuration. Field names are the MLflow param names (docs/schema.md); each
    field's docstring is its flag's help (add_config_args) and MLproject's entry points pass every
    field (tests/test_mlproject.py holds them to the same names and defaults).

    Two facts are derived once, when it is built, as plain attributes (not fields: neither is a
    param nor in the keys): `is_distributed` (a data-parallel run: an engine is given, even at
    world size 1) and `data_kind` (synthetic | fake | folder | cifar10). `distributed` and `data`
    are not changed after that (dataclasses.replace builds a new config)."""

    model: str = "resnet18"
    """a torchvision classifier (torchvision.models.list_models: resnet18, vit_b_16, ...), a timm
    model as timm:NAME (timm:convnext_atto), or your own as package.module:callable (a function or
    class returning an nn.Module classifier; given num_classes and image_size where it takes them)."""
    batch_size: int = field(default=16, metadata={"flags": ("--batch", "--batch-size")})
    """samples per step (per process in a data-parallel run)."""
    precision: str = field(default="fp32", metadata=PRECISION)
    """fp32 (IEEE FP32: TF32 off on CUDA), fp16/bf16 through torch.autocast (fp16 adds a GradScaler
    on CUDA), or tf32 (fp32 tensors, convolutions and matmuls on TF32 tensor cores; CUDA sm_80+)."""
    device: str = field(default="auto", metadata=DEVICE)
    """auto (cuda, then mps, then cpu), cpu, cuda, cuda:N or mps."""
    warmup_iters: int = 5
    """steps run before measuring (not timed; include torch.compile's compilation)."""
    iters: int | str = 20
    """measured steps, or "auto": measure until the 95 % confidence half-width of the mean step time
    is within ci_target of the mean (at least 10 steps), or max_iters / max_time_s is reached."""
    ci_target: float = 0.02
    """iters=auto: target 95 % CI half-width of the mean step time, relative to the mean."""
    max_iters: int = 1000
    """iters=auto: most measured steps."""
    max_time_s: float = 300.0
    """iters=auto: most seconds spent in measured steps."""
    image_size: int = 224
    """input height = width in pixels."""
    data: str = "synthetic"
    """synthetic (one batch resident on the device), fake (FakeData through a DataLoader), a path to
    an ImageFolder tree (uses <path>/train when it exists), or cifar10:<path> (CIFAR-10 python folder)."""
    workers: int = 2
    """DataLoader worker processes (fake and folder data only)."""
    channels_last: bool = False
    """convert model and inputs to torch.channels_last."""
    compile: bool = False
    """torch.compile the model (compilation happens in warmup; needs warmup_iters >= 1)."""
    seed: int = 0
    """seed for weights, synthetic data and loader order."""
    env_label: str = flags.env_label()
    lr: float = 0.01
    """learning rate."""
    optimizer: str = field(default="sgd", metadata=OPTIMIZER)
    """sgd (momentum 0.9), adam (no weight decay) or adamw (weight decay 0.01)."""
    num_classes: int = 1000
    """classifier outputs (set from the data set's classes for folder/cifar10 data)."""
    distributed: str = field(default=schema.NOT_DISTRIBUTED, metadata={"choices": ENGINES})
    """none (one process), or the data-parallel engine of a torchrun job: ddp (PyTorch
    DistributedDataParallel) or deepspeed (DeepSpeed's engine, ZeRO stage zero_stage); batch_size
    is per process."""
    zero_stage: int = field(
        default=0, metadata={"choices": ZERO_STAGES, "choices_text": "0, 1, 2 or 3"}
    )
    """deepspeed: ZeRO stage 0 (plain data parallel), 1 (optimizer state partitioned), 2 (+
    gradients) or 3 (+ parameters). 0 for ddp."""
    world_size: int = field(default=1, metadata={"flags": ()})
    """processes of the job (torchrun's WORLD_SIZE: nodes x processes per node); batch_size is per
    process. Set from the environment under torchrun; a sweep axis (one torchrun job per child)."""
    backend: str = field(default="auto", metadata={"choices": BACKENDS})
    """collective backend: auto (nccl on CUDA, gloo on CPU), nccl or gloo."""
    collective_timeout_s: float = 300.0
    """seconds a collective may wait for the other ranks before the job fails (a lost peer)."""

    def __post_init__(self) -> None:
        self.model = str(self.model).strip()
        self.precision = str(self.precision).lower()
        self.device = str(self.device).lower()
        self.optimizer = str(self.optimizer).lower()
        self.distributed = str(self.distributed).strip().lower() or schema.NOT_DISTRIBUTED
        self.backend = str(self.backend).strip().lower()
        self.zero_stage, self.world_size = int(self.zero_stage), int(self.world_size)
        self.collective_timeout_s = float(self.collective_timeout_s)
        if str(self.iters).strip().lower() == "auto":
            self.iters = "auto"
        else:
            try:
                self.iters = int(self.iters)
            except (TypeError, ValueError):
                raise ValueError(
                    f"iters must be a positive integer or auto, got {self.iters!r}"
                ) from None
        for name in ("batch_size", "image_size", "num_classes", "max_iters"):
            if int(getattr(self, name)) <= 0:
                raise ValueError(f"{name} must be a positive integer, got {getattr(self, name)}")
        if self.iters != "auto" and self.iters <= 0:
            raise ValueError(f"iters must be a positive integer or auto, got {self.iters}")
        if not 0 < self.ci_target < 1:
            raise ValueError(
                f"ci_target must be between 0 and 1 (a fraction of the mean), got {self.ci_target}"
            )
        if not self.max_time_s > 0:
            raise ValueError(f"max_time_s must be > 0, got {self.max_time_s}")
        for name in ("warmup_iters", "workers"):
            if int(getattr(self, name)) < 0:
                raise ValueError(f"{name} must be >= 0, got {getattr(self, name)}")
        flags.check_choices(self)  # precision, device, optimizer, distributed, zero_stage, backend
        if not (math.isfinite(self.lr) and self.lr > 0):  # inf: every weight becomes nan
            raise ValueError(f"lr must be a finite number > 0, got {self.lr}")
        if self.compile and self.warmup_iters < 1:
            raise ValueError("warmup_iters must be >= 1 with compile, so compilation is not timed")
        if self.image_size < 32:
            raise ValueError(f"image_size must be >= 32 pixels, got {self.image_size}")
        if not self.data:
            raise ValueError("data must be synthetic, fake, a folder path or cifar10:<path>")
        self.env_label = schema.env_label(self.env_label)
        self.is_distributed = schema.is_distributed({"distributed": self.distributed})
        self.data_kind = data_kind(self.data)
        self._check_distributed()

    def _check_distributed(self) -> None:
        if self.zero_stage and self.distributed != "deepspeed":
            raise ValueError(
                f"zero_stage {self.zero_stage} needs distributed=deepspeed (ZeRO is DeepSpeed's)"
            )
        if self.world_size < 1:
            raise ValueError(f"world_size must be a positive integer, got {self.world_size}")
        if not self.collective_timeout_s > 0:
            raise ValueError(f"collective_timeout_s must be > 0, got {self.collective_timeout_s}")
        if not self.is_distributed:
            if self.world_size > 1:
                raise ValueError(
                    f"world_size {self.world_size} needs a data-parallel engine: distributed=ddp or deepspeed"
                )
            return
        if self.iters == "auto":
            raise ValueError(
                "iters=auto is not supported with distributed (every rank must run the same number "
                "of steps): give a number of steps"
            )
        if self.compile and self.distributed == "deepspeed":
            raise ValueError(
                "compile with distributed=deepspeed is not supported (DeepSpeed compiles through "
                "its engine): use distributed=ddp, or compile=false"
            )

    def params(self) -> dict:
        """MLflow params of this config (everything but env_label, which is a tag; the
        DISTRIBUTED_FIELDS only for a distributed config)."""
        out = asdict(self)
        out.pop("env_label")
        if not self.is_distributed:
            for name in DISTRIBUTED_FIELDS:
                out.pop(name)
        return out

    def config_key(self) -> str:
        """The join key (common.schema.config_key); a distributed config's includes world size,
        engine, ZeRO stage and backend (resolve "auto" first: train.bench.preflight does)."""
        return schema.config_key(asdict(self))

    def single_process_key(self) -> str:
        """The config_key of the same work per process in one process, without an engine: what a
        distributed run's scaling is compared with (tag `base_config_key`)."""
        return schema.config_key({**asdict(self), "distributed": schema.NOT_DISTRIBUTED})

    def identity(self) -> list[str]:
        """The knobs that make this run's numbers differ, readable, those that differ most often
        first (the UI cuts names at about 22 characters): for a data-parallel run the engine (ddp,
        or zero<stage> for DeepSpeed) and <n>proc (world size); b<batch>, precision, cl
        (channels_last) and compiled when set, <size>px, model; then only what is not the default:
        the optimizer (not sgd), <n>cls (not 1000), the data source (not synthetic; and <n>workers
        when not 2), and a data-parallel run's collective backend once resolved. Not in it: what
        does not change a measured number (seed, iteration counts, lr, env label: a tag of its
        own, device: the run name ends with it). run_name and config_label are it."""
        parts = []
        if self.is_distributed:
            engine = self.distributed
            if engine == "deepspeed":
                engine = f"zero{self.zero_stage}"
            parts += [engine, f"{self.world_size}proc"]
        parts += [f"b{self.batch_size}", self.precision]
        parts += [tok for name, tok in _FLAG_TOKENS if getattr(self, name)]
        parts += [f"{self.image_size}px", self.model]
        if self.optimizer != "sgd":
            parts.append(self.optimizer)
        if self.num_classes != 1000:
            parts.append(f"{self.num_classes}cls")
        if self.data_kind != "synthetic":
            parts.append(self.data_kind)
            if self.workers != 2:
                parts.append(f"{self.workers}workers")
        if self.is_distributed and self.backend != "auto":
            parts.append(self.backend)
        return parts

    def run_name(self, device: str | None = None, repeat: int | None = None, kind: str = "") -> str:
        """`b8-bf16-cl-224px-resnet18`, `ddp-2proc-b2-fp32-32px-resnet18-gloo-cpu`: identity()
        named by common.ui.run_name, with the device, a sweep's repeat and a kind when given."""
        return run_name(self.identity(), device, repeat, kind)

    def config_label(self) -> str:
        """The configuration for the UI's Group by (tag `config_label`): identity() joined by '/',
        so that runs whose numbers differ get different labels, early: `b8/fp32/64px/resnet18`,
        `b8/bf16/cl/224px/resnet18/adam`, `ddp/2proc/b2/fp32/32px/resnet18/gloo`."""
        return "/".join(self.identity())

    def header(self, device=None, intensity_source: str = "modeled") -> RunHeader:
        """What a run of this config is created with, derived once (build it after
        train.bench.preflight, which resolves what the keys hold): the params (`device`, resolved,
        as the device param when given), the tags (config_key, config_label, where its intensity
        comes from; a distributed config's single-process key and batch scope), the numeric values
        also logged as metrics (so that the UI sorts them as numbers: params are text, 16 < 4 < 64
        < 8) and its name's parts."""
        identity = tuple(self.identity())
        params = self.params()
        tags = {
            schema.TAG_CONFIG_KEY: self.config_key(),
            schema.TAG_CONFIG_LABEL: "/".join(identity),
            schema.TAG_INTENSITY_SOURCE: intensity_source,
        }
        if device is not None:
            params["device"] = str(device)
        if self.is_distributed:
            params["global_batch_size"] = self.batch_size * self.world_size
            tags[schema.TAG_BASE_CONFIG_KEY] = self.single_process_key()
            tags[schema.TAG_BATCH_SCOPE] = "per_process"
        metrics = {f"config_{name}": float(getattr(self, name)) for name in CONFIG_METRICS}
        return RunHeader(params, tags, metrics, identity)


@dataclass(frozen=True)
class RunHeader:
    """A run's config as it is logged, derived once by TrainConfig.header: what the run is created
    with and what its texts name it by (label, key, name) afterwards."""

    params: dict
    tags: dict[str, str]
    metrics: dict[str, float]
    identity: tuple[str, ...]

    @property
    def label(self) -> str:
        return self.tags[schema.TAG_CONFIG_LABEL]

    @property
    def key(self) -> str:
        return self.tags[schema.TAG_CONFIG_KEY]

    def run_name(self, device: str | None = None, repeat: int | None = None, kind: str = "") -> str:
        """As TrainConfig.run_name, from the parts derived once."""
        return run_name(list(self.identity), device, repeat, kind)


def data_kind(data: str) -> str:
    """synthetic | fake | folder | cifar10 of a `data` value (a run's param; a run that logged
    none had the default, synthetic)."""
    data = str(data or "synthetic").strip()
    if data in ("synthetic", "fake"):
        return data
    return "cifar10" if data.startswith("cifar10:") else "folder"


def add_config_args(
    parser: argparse.ArgumentParser, overrides: bool = False, distributed: bool = True
) -> None:
    """The config flags shared by `python -m train`, `python -m profiling` and the sweep: one per
    TrainConfig field (common.flags: help from the field's docstring, default from its default).

    `distributed=False` leaves out the data-parallel flags (profiling captures one process; a
    torchrun job's rank 0 is profiled as docs/profiling.md shows).

    `overrides=True` (the sweep): every flag defaults to None, so that only flags given on the
    command line override a sweep file's base, and an empty value ("" from an MLproject default)
    also counts as not given.
    """
    single = [f.name for f in flags.flag_fields(TrainConfig) if f.name not in DISTRIBUTED_FIELDS]
    flags.add_flags(parser.add_argument_group("configuration"), TrainConfig, single, overrides)
    if distributed:
        title = "data parallel (under torchrun: torchrun --nproc-per-node N -m train --distributed ddp ...)"
        group = parser.add_argument_group(title)
        flags.add_flags(group, TrainConfig, DISTRIBUTED_FIELDS, overrides)


def config_flags(values) -> list[str]:
    """The config flags (add_config_args) as `python -m train` takes them, from any object with
    the fields as attributes (parsed args, a TrainConfig); None values are left out."""
    return flags.flag_values(TrainConfig, values)


def config_from_args(args: argparse.Namespace) -> TrainConfig:
    """A TrainConfig from parsed flags; UsageError names the bad field."""
    return flags.build(TrainConfig, args)


def config_from_params(params: dict) -> TrainConfig:
    """The TrainConfig a run's params describe (MLflow keeps them as text: "8", "false"), read by
    the flags' own converters; a field the run did not log keeps its default. UsageError names a
    bad value."""
    from common.cli import ArgumentParser  # raises UsageError instead of exiting

    parser = ArgumentParser(prog="the run's params", add_help=False)
    add_config_args(parser)
    argv: list[str] = []
    for f in flags.flag_fields(TrainConfig):
        if f.name in params and params[f.name] not in (None, ""):
            argv += [flags.flag_names(f)[0], str(params[f.name])]
    return config_from_args(parser.parse_args(argv))
