"""The model a run trains, from one plain string (the `model` param): a torchvision classifier
(`resnet18`), a timm model (`timm:convnext_atto`) or a user's factory (`package.module:callable`,
a function or class returning an nn.Module classifier).

Every model is built for the run's image size where its constructor takes one (torchvision's
ViTs `image_size`, MaxViT `input_size`, timm's fixed-size models `img_size`, a factory's
`image_size`), so a ViT at 64 px is ViT-B/16 with 16 patches. Each torchvision classifier's
smallest training size is known (`SIZE_RULES`: measured by tests/test_models.py, which trains
every one at it); a smaller one is refused in one line before a run exists.
"""

from __future__ import annotations

import contextlib
import difflib
import importlib
import inspect
import warnings
from dataclasses import dataclass
from typing import Callable

from common.errors import UsageError

TIMM_PREFIX = "timm:"
MIN_IMAGE_SIZE = 32
"""the smallest --image-size any model takes (train.config)"""


@dataclass(frozen=True)
class SizeRule:
    """The image sizes a model trains at: at least `minimum`, a multiple of `multiple`, and
    `fits(size)` when given."""

    minimum: int = MIN_IMAGE_SIZE
    multiple: int = 1
    why: str = ""
    fits: Callable[[int], bool] | None = None

    def allows(self, size: int) -> bool:
        ok = size >= self.minimum and size % self.multiple == 0
        return ok and (self.fits is None or self.fits(size))

    def smallest_at_least(self, size: int) -> int:
        size = max(size, self.minimum)
        while not self.allows(size):
            size += 1
        return size


def _maxvit_fits(size: int) -> bool:
    """MaxViT-T's stem and each of its 4 blocks halve the image with a 3 x 3 stride-2 convolution
    (n -> (n - 1) // 2 + 1); every block's input must divide into 7 x 7 windows."""
    n = (size - 1) // 2 + 1
    for _ in range(4):
        n = (n - 1) // 2 + 1
        if n % 7:
            return False
    return True


SIZE_RULES = {
    "alexnet": SizeRule(63, 1, "its last max pool needs a 3 x 3 input"),
    "inception_v3": SizeRule(
        299, 1, "its auxiliary head, which runs in training, needs a 17 x 17 input"
    ),
    "maxvit_t": SizeRule(
        221,
        1,
        "every block's input must divide into 7 x 7 windows: 221-224, 445-448, ... px",
        _maxvit_fits,
    ),
    "vit_b_16": SizeRule(32, 16, "whole 16 x 16 patches"),
    "vit_l_16": SizeRule(32, 16, "whole 16 x 16 patches"),
    "vit_b_32": SizeRule(32, 32, "whole 32 x 32 patches"),
    "vit_l_32": SizeRule(32, 32, "whole 32 x 32 patches"),
    "vit_h_14": SizeRule(42, 14, "whole 14 x 14 patches"),
}
"""torchvision classifiers that do not train at every size from 32 px (tests/test_models.py
trains each at its minimum and checks the size below it fails)"""


# ------------------------------------------------------------------ what a spec names
def source_of(spec: str) -> str:
    """torchvision | timm | user, from the spelling of a model spec."""
    if spec.startswith(TIMM_PREFIX):
        return "timm"
    return "user" if ":" in spec else "torchvision"


def classification_models() -> list[str]:
    import torchvision

    return sorted(torchvision.models.list_models(module=torchvision.models))


def _close(name: str, known: list[str], what: str) -> str:
    lowered = {m.lower(): m for m in known}
    close = difflib.get_close_matches(name.lower(), list(lowered), n=4, cutoff=0.5)
    return f"did you mean {', '.join(lowered[c] for c in close)}?" if close else what


def _torchvision_name(name: str) -> str:
    known = classification_models()
    if name in known:
        return name
    lowered = {m.lower(): m for m in known}
    if name.lower() in lowered:
        return lowered[name.lower()]
    hint = _close(name, known, "see torchvision.models.list_models(), timm:NAME or module:callable")
    raise UsageError(f"unknown model {name!r}: {hint}")


def _timm():
    try:
        import timm
    except ImportError:
        raise UsageError(
            "--model timm:NAME needs timm, which is not installed: pip install timm "
            "(requirements.txt lists it)"
        ) from None
    return timm


def _timm_name(spec: str) -> str:
    name = spec[len(TIMM_PREFIX) :].strip()
    timm = _timm()
    if name and timm.is_model(name):
        return TIMM_PREFIX + name
    hint = _close(name, timm.list_models(), "see timm.list_models()")
    raise UsageError(f"unknown timm model {name!r}: {hint}")


def _factory(spec: str):
    """The callable a `package.module:callable` spec names; UsageError when it cannot be had."""
    module_name, _, attr = spec.partition(":")
    if not module_name or not attr:
        raise UsageError(
            f"model {spec!r}: a user model is package.module:callable, e.g. mynets:make"
        )
    try:
        module = importlib.import_module(module_name)
    except Exception as exc:  # noqa: BLE001 - the user's module: say what failed, in one line
        from common.errors import one_line

        raise UsageError(
            f"model {spec!r}: cannot import {module_name} ({one_line(exc)}); it must be importable "
            "from the current folder or PYTHONPATH"
        ) from None
    target = module
    for part in attr.split("."):
        target = getattr(target, part, None)
        if target is None:
            raise UsageError(f"model {spec!r}: {module_name} has no {attr!r}")
    if not callable(target):
        raise UsageError(
            f"model {spec!r}: {attr} is not callable (a function or class returning an nn.Module)"
        )
    return target


def check_model_name(spec: str) -> str:
    """The canonical spelling of a model spec; UsageError (one line, close names) when it names
    no model."""
    spec = str(spec).strip()
    source = source_of(spec)
    if source == "timm":
        return _timm_name(spec)
    if source == "user":
        _factory(spec)
        return spec
    return _torchvision_name(spec)


def display_name(spec: str) -> str:
    """The model's name without its source: `convnext_atto` for timm:convnext_atto, `make` for
    mynets:make (the breakdown's root module)."""
    return spec.rsplit(":", 1)[-1].rsplit(".", 1)[-1]


# ------------------------------------------------------------------ image sizes
def size_rule(spec: str) -> SizeRule:
    """The sizes a model trains at: torchvision's from SIZE_RULES; a timm model whose
    pretrained_cfg says it takes one input size and whose constructor cannot be told another,
    only that one; anything else from 32 px."""
    return SIZE_RULES.get(spec, SizeRule())


def check_image_size(spec: str, size: int) -> None:
    """UsageError naming the model's smallest training size when `size` is not one it takes."""
    rule = size_rule(spec)
    if rule.allows(size):
        return
    fit = rule.smallest_at_least(size)
    if rule.fits is not None:
        raise UsageError(f"{spec} does not train at {size} px ({rule.why}): use --image-size {fit}")
    multiple = f" and a multiple of {rule.multiple}" if rule.multiple > 1 else ""
    raise UsageError(
        f"{spec} trains at {rule.minimum} px or more{multiple} ({rule.why}), not {size} px: "
        f"use --image-size {fit}"
    )


def timm_input_size(spec: str) -> int | None:
    """The input size of a timm model's pretrained_cfg (its height), None when it has none."""
    cfg = _timm().models.get_pretrained_cfg(spec[len(TIMM_PREFIX) :])
    size = getattr(cfg, "input_size", None) if cfg is not None else None
    return int(size[-1]) if size else None


# ------------------------------------------------------------------ building
def _takes(fn, name: str) -> bool:
    """Whether callable `fn` accepts keyword `name` (or any keyword)."""
    try:
        params = inspect.signature(fn).parameters.values()
    except (TypeError, ValueError):
        return False
    return any(p.name == name or p.kind is p.VAR_KEYWORD for p in params)


def _torchvision(name: str, num_classes: int, image_size: int | None):
    import torchvision

    kwargs = {"num_classes": num_classes}
    if image_size is not None and name.startswith("vit_"):
        kwargs["image_size"] = image_size
    if image_size is not None and name.startswith("maxvit"):
        kwargs["input_size"] = (image_size, image_size)
    return torchvision.models.get_model(name, weights=None, **kwargs)


def _timm_model(spec: str, num_classes: int, image_size: int | None):
    timm = _timm()
    name = spec[len(TIMM_PREFIX) :]
    cfg = timm.models.get_pretrained_cfg(name)
    kwargs = {"num_classes": num_classes, "pretrained": False}
    if image_size is not None and getattr(cfg, "fixed_input_size", False):
        kwargs["img_size"] = image_size  # ViTs, MLP-mixers, Swin: positions fixed by the size
    return timm.create_model(name, **kwargs)


def _user_model(spec: str, num_classes: int, image_size: int | None):
    import torch

    factory = _factory(spec)
    kwargs = {"num_classes": num_classes} if _takes(factory, "num_classes") else {}
    if image_size is not None and _takes(factory, "image_size"):
        kwargs["image_size"] = image_size
    model = factory(**kwargs)
    if not isinstance(model, torch.nn.Module):
        raise UsageError(f"model {spec!r} returned {type(model).__name__}, not a torch.nn.Module")
    return model


def build_model(spec: str, num_classes: int, image_size: int | None = None):
    """A randomly initialised classifier (no weights are downloaded) for `image_size` where its
    constructor takes a size."""
    spec = check_model_name(spec)
    build = {"timm": _timm_model, "user": _user_model}.get(source_of(spec), _torchvision)
    with warnings.catch_warnings():
        # googlenet/inception_v3 warn that their default init will change; irrelevant for timing
        warnings.simplefilter("ignore", FutureWarning)
        warnings.simplefilter("ignore", UserWarning)
        return build(spec, num_classes, image_size)


def model_source(spec: str) -> str:
    """Where the model came from, for tag `model_source`: `torchvision 0.29.1`, `timm 1.0.31
    (pretrained_cfg input 224 px)`, or `user: mynets:make (/path/to/mynets.py)`."""
    source = source_of(spec)
    if source == "user":
        module = importlib.import_module(spec.partition(":")[0])
        return f"user: {spec} ({getattr(module, '__file__', None) or 'no file'})"
    package = importlib.import_module(source)
    if source == "timm":
        size = timm_input_size(spec)
        native = f" (pretrained_cfg input {size} px)" if size else ""
        return f"timm {package.__version__}{native}"
    return f"{source} {package.__version__}"


# ------------------------------------------------------------------ on the meta device
META_FALLBACK = "parameters on the meta device (its constructor reads tensor values)"


@contextlib.contextmanager
def _allocations_on_meta():
    """Tensors made by torch.empty/zeros/ones/full (and their random fills) without a device go
    to the meta device; arange, linspace and tensor stay real, so a constructor that reads values
    from those (RegNet's widths, timm's drop-path rates: `.tolist()`) still builds."""
    import torch
    from torch.overrides import TorchFunctionMode

    factories = {
        torch.empty,
        torch.empty_strided,
        torch.zeros,
        torch.ones,
        torch.full,
        torch.rand,
        torch.randn,
    }

    class ParamsOnMeta(TorchFunctionMode):
        def __torch_function__(self, func, types, args=(), kwargs=None):
            kwargs = dict(kwargs or {})
            if func in factories and kwargs.get("device") is None:
                kwargs["device"] = "meta"
            return func(*args, **kwargs)

    with ParamsOnMeta():
        yield


def build_on_meta(spec: str, num_classes: int, image_size: int | None = None):
    """(the model built on the meta device: nothing allocated, how). Some constructors read tensor
    values (every RegNet's `.tolist()`), which the meta device has none of: those are built with
    their allocations on the meta device and the rest real, then moved to meta (`META_FALLBACK`).
    Raises what the constructor raises when neither way builds it."""
    import torch

    try:
        with torch.device("meta"):
            return build_model(spec, num_classes, image_size), "meta"
    except UsageError:
        raise
    except Exception:  # noqa: BLE001 - try the other way; its failure is what is raised
        pass
    with _allocations_on_meta():
        model = build_model(spec, num_classes, image_size)
    return model.to("meta"), META_FALLBACK
