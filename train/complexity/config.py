"""What `python -m train.complexity` analyses: ComplexityConfig, validated on construction."""

from __future__ import annotations

import argparse
import math
import re
from dataclasses import dataclass, field

from common import flags, schema
from common.cli import str_bool
from train.config import DEVICE, OPTIMIZER, PRECISION

DEFAULT_MODELS = ("resnet18", "resnet50", "vgg16", "mobilenet_v2")
DEFAULT_BATCH_SIZES = (16, 32, 64, 128)
DEFAULT_RSS_BATCH_SIZES = (2, 8)


@dataclass
class ComplexityConfig:
    """What to analyse. Field names are the MLflow param names of a `complexity` run; each field is
    a flag of `python -m train.complexity` (common.flags)."""

    models: list[str] = field(default_factory=lambda: list(DEFAULT_MODELS))
    """models as --model of python -m train names them (torchvision names, timm:NAME,
    package.module:callable), space or comma separated."""
    batch_sizes: list[int] = field(default_factory=lambda: list(DEFAULT_BATCH_SIZES))
    """batch sizes to predict memory, FLOPs and intensity for (positive integers)."""
    image_size: int = 224
    """input height = width in pixels (>= 32)."""
    optimizer: str = field(default="sgd", metadata=OPTIMIZER)
    """sgd (momentum 0.9: one state tensor per parameter), adam or adamw (two each, plus a step counter)."""
    precision: str = field(default="fp32", metadata=PRECISION)
    """fp32, or fp16/bf16 through torch.autocast, as in training runs."""
    device: str = field(default="auto", metadata=DEVICE)
    """auto, cpu, cuda, cuda:N or mps: where the model is measured."""
    num_classes: int = 1000
    """classifier outputs."""
    device_memory: str | None = None
    """memory to fit the batch into, e.g. 16GiB, 16GB, 512MiB (default: the measured device's)."""
    validate_rss: bool | str = field(
        default="auto", metadata={"nargs": "?", "const": "true", "metavar": "{auto,true,false}"}
    )
    """compare the prediction with the RSS growth of one real step per --rss-batch-sizes (CPU only):
    auto = on the CPU, the model with the fewest training FLOPs per sample (the cheapest check), off
    elsewhere; true = every model (refused off the CPU); false = off."""
    rss_batch_sizes: list[int] = field(default_factory=lambda: list(DEFAULT_RSS_BATCH_SIZES))
    """batch sizes of the RSS check (one fresh process each; keep them small)."""
    seed: int = 0
    """seed for weights and synthetic data."""
    env_label: str = flags.env_label()

    def __post_init__(self) -> None:
        self.models = list(dict.fromkeys(str(m).strip() for m in self.models if str(m).strip()))
        if not self.models:
            raise ValueError("models must name at least one torchvision classifier")
        for name in ("batch_sizes", "rss_batch_sizes"):
            values = list(getattr(self, name))
            if not values or any(int(b) <= 0 for b in values):
                raise ValueError(
                    f"{name} must be positive integers, got {' '.join(str(b) for b in values) or 'none'}"
                )
            setattr(self, name, sorted({int(b) for b in values}))
        for name in ("image_size", "num_classes"):
            if int(getattr(self, name)) <= 0:
                raise ValueError(f"{name} must be a positive integer, got {getattr(self, name)}")
        if self.image_size < 32:
            raise ValueError(f"image_size must be >= 32 pixels, got {self.image_size}")
        self.optimizer, self.precision, self.device = (
            self.optimizer.lower(),
            self.precision.lower(),
            self.device.lower(),
        )
        flags.check_choices(self)
        self.validate_rss = _auto_bool(self.validate_rss)
        if self.device_memory is not None and str(self.device_memory).strip() == "":
            self.device_memory = None
        if self.device_memory is not None:
            try:
                parse_bytes(self.device_memory)
            except ValueError as exc:
                raise ValueError(f"device_memory: {exc}") from None
        self.env_label = schema.env_label(self.env_label)

    def rss_check_on(self, device) -> bool:
        """Whether the RSS check runs on `device` (auto: only on the CPU)."""
        if self.validate_rss == "auto":
            return device.type == "cpu"
        return bool(self.validate_rss)

    def rss_check_models(self, models, device) -> list:
        """The analysed models (ModelComplexity) whose prediction the RSS check measures on `device`.

        true: all of them. auto: on the CPU, the one with the fewest training FLOPs per sample, so
        that the default four models at 224 px stay well under two minutes (docs/complexity.md).
        """
        if not self.rss_check_on(device) or not models:
            return []
        if self.validate_rss == "auto":
            return [min(models, key=lambda c: c.train_flops_per_sample)]
        return list(models)

    @property
    def device_memory_bytes(self) -> int | None:
        return parse_bytes(self.device_memory) if self.device_memory is not None else None

    def params(self) -> dict:
        return {
            "models": ",".join(self.models),
            "batch_sizes": ",".join(map(str, self.batch_sizes)),
            "image_size": self.image_size,
            "optimizer": self.optimizer,
            "precision": self.precision,
            "num_classes": self.num_classes,
            "validate_rss": str(self.validate_rss).lower(),
            "rss_batch_sizes": ",".join(map(str, self.rss_batch_sizes)),
            "seed": self.seed,
        }


def _auto_bool(value) -> bool | str:
    """ "auto" (or empty: the default) stays "auto"; true/false words become booleans."""
    if isinstance(value, bool):
        return value
    text = str(value).strip().lower()
    if text in ("auto", ""):
        return "auto"
    try:
        return str_bool(text)
    except argparse.ArgumentTypeError:
        raise ValueError(f"validate_rss must be auto, true or false, got {value!r}") from None


_SIZE_RE = re.compile(
    r"^\s*([0-9]*\.?[0-9]+(?:e[+-]?[0-9]+)?)\s*([kmgtp]?)(i?)(b?)\s*$", re.IGNORECASE
)
_PREFIX_POWER = {"": 0, "k": 1, "m": 2, "g": 3, "t": 4, "p": 5}


def parse_bytes(text: str | int | float) -> int:
    """Bytes in a size like `16GiB` (binary, 2**30), `16GB` (decimal, 10**9), `512MiB`, `1.5e9`.

    A bare number is bytes. Raises ValueError with the accepted forms.
    """
    if isinstance(text, (int, float)) and not isinstance(text, bool):
        value, unit = float(text), 1
    else:
        m = _SIZE_RE.match(str(text))
        if not m or (m.group(3) and not m.group(2)):
            raise ValueError(
                f"expected a size like 16GiB, 16GB, 512MiB or a number of bytes, got {text!r}"
            )
        number, prefix, binary, _b = m.groups()
        value = float(number)
        unit = (1024 if binary else 1000) ** _PREFIX_POWER[prefix.lower()]
    size = value * unit
    if not math.isfinite(size) or size < 1:
        raise ValueError(f"a memory size must be at least 1 byte, got {text!r}")
    return int(size)
