"""Test data generators: small ImageFolder trees of real JPEGs and CIFAR-10 python batches."""

from __future__ import annotations

import pickle
import subprocess
import sys
from pathlib import Path

import numpy as np

TINY = [
    "--model",
    "resnet18",
    "--batch",
    "2",
    "--image-size",
    "32",
    "--warmup-iters",
    "1",
    "--iters",
    "3",
    "--device",
    "cpu",
    "--no-progress",
    "--no-system-metrics",
]


def make_image_folder(
    root: Path, classes=("cat", "dog"), per_class=3, size=40, train_subdir=True
) -> Path:
    """Write a tiny ImageFolder tree of real JPEGs: root[/train]/<class>/<i>.jpg."""
    from PIL import Image

    base = root / "train" if train_subdir else root
    rng = np.random.default_rng(0)
    for c in classes:
        (base / c).mkdir(parents=True, exist_ok=True)
        for i in range(per_class):
            arr = rng.integers(0, 255, size=(size, size + 7, 3), dtype=np.uint8)
            Image.fromarray(arr).save(base / c / f"{i}.jpg", quality=85)
    return root


def make_cifar10(root: Path, per_batch=4, batches=2) -> Path:
    """Write CIFAR-10-format python pickles data_batch_1..N (uint8 N x 3072, labels 0..9)."""
    root.mkdir(parents=True, exist_ok=True)
    rng = np.random.default_rng(1)
    for b in range(1, batches + 1):
        entry = {
            "data": rng.integers(0, 255, size=(per_batch, 3072), dtype=np.uint8),
            "labels": [int(x) for x in rng.integers(0, 10, size=per_batch)],
            "batch_label": f"training batch {b} of 5",
        }
        with open(root / f"data_batch_{b}", "wb") as fh:
            pickle.dump(entry, fh)
    return root


def dead_pid() -> int:
    """The pid of a process that has ended (a run tagged with it was left by a dead process)."""
    proc = subprocess.Popen([sys.executable, "-c", "pass"])
    proc.wait()
    return proc.pid


def use_uri(monkeypatch, uri: str) -> None:
    """Point this test's MLflow client and subprocesses at `uri` (the `tracking` fixture resets
    the client's URI after the test)."""
    import mlflow

    monkeypatch.setenv("MLFLOW_TRACKING_URI", uri)
    mlflow.set_tracking_uri(uri)


def png_text(data) -> dict[str, str]:
    """The `Title` and `Description` that roofline.style.write_png put in a PNG (bytes or a
    path): what a figure says, read back without looking at it."""
    import io

    from PIL import Image

    with Image.open(io.BytesIO(data) if isinstance(data, bytes) else data) as image:
        return {k: str(image.text.get(k, "")) for k in ("Title", "Description")}
