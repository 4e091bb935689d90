"""torchvision classification models by name, with close-name suggestions for typos."""

from __future__ import annotations

import difflib
import warnings

from common.errors import UsageError


def classification_models() -> list[str]:
    import torchvision

    return sorted(torchvision.models.list_models(module=torchvision.models))


def check_model_name(name: str) -> str:
    """Return `name` if torchvision has such a classifier, else raise UsageError with close names."""
    known = classification_models()
    if name in known:
        return name
    lowered = {m.lower(): m for m in known}
    if name.lower() in lowered:
        return lowered[name.lower()]
    close = difflib.get_close_matches(name.lower(), list(lowered), n=4, cutoff=0.5)
    hint = (
        f"did you mean {', '.join(lowered[c] for c in close)}?"
        if close
        else "see torchvision.models.list_models()"
    )
    raise UsageError(f"unknown model {name!r}: {hint}")


def build_model(name: str, num_classes: int):
    """A randomly initialised torchvision classifier (no weights are downloaded)."""
    import torchvision

    name = check_model_name(name)
    with warnings.catch_warnings():
        # googlenet/inception_v3 warn that their default init will change; irrelevant for timing
        warnings.simplefilter("ignore", FutureWarning)
        warnings.simplefilter("ignore", UserWarning)
        return torchvision.models.get_model(name, weights=None, num_classes=num_classes)
