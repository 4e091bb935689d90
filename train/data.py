"""Input pipelines: synthetic (resident on the device), FakeData, ImageFolder and CIFAR-10 folders.

Every source is a `BatchSource`: `next()` returns one `(inputs, targets)` batch already on the
device. For loader-backed sources, fetching the batch is part of the timed step, as it is in real
training; the synthetic source keeps one batch resident so the step measures compute only.
"""

from __future__ import annotations

import os
import pickle
import stat
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

import numpy as np

from common.errors import BenchError, UsageError
from common.schema import stable_hash
from train.folder_links import check_links

IMAGENET_MEAN = (0.485, 0.456, 0.406)
IMAGENET_STD = (0.229, 0.224, 0.225)
CIFAR10_FILES = tuple(f"data_batch_{i}" for i in range(1, 6))


class CorruptDataError(BenchError):
    """An image or batch file that cannot be decoded."""


@dataclass
class BatchSource:
    next: Callable[[], tuple]
    num_classes: int
    samples: int | None  # data set size (None for synthetic)
    description: str


def dataset_fields(data: str, image_size: int, num_classes: int, seed: int) -> dict:
    """The data source of a run as a dataset input's fields (common.run_record.dataset_input): its
    name, a 16-hex-digit digest, and where it comes from. Folders are `local` with their resolved
    path (the digest hashes the path, not the images); synthetic and fake data are `code`: made by
    this program from the image size, classes and seed, which the digest hashes."""
    if data in ("synthetic", "fake"):
        made = {"generator": data, "image_size": image_size, "num_classes": num_classes}
        return {
            "name": f"{data}-{image_size}px-{num_classes}cls",
            "digest": stable_hash({**made, "seed": seed}),
            "source_type": "code",
            "source": {**made, "seed": seed},
        }
    if data.startswith("cifar10:"):
        root, name = cifar10_root(data.split(":", 1)[1]), "cifar10"
    else:
        root = image_folder_root(data)
        name = root.parent.name if root.name == "train" else root.name
    uri = str(root.resolve())
    return {
        "name": name,
        "digest": stable_hash({"uri": uri}, lower_strings=False),
        "source_type": "local",
        "source": {"uri": uri},
    }


# ------------------------------------------------------------------ validation (no torch needed)
def image_folder_root(path: str) -> Path:
    """The ImageFolder root for `path`: `<path>/train` when it exists (imagenette, imagenet-mini)."""
    root = Path(path).expanduser()
    if not root.exists():
        raise UsageError(
            f"data folder {root} does not exist: give an ImageFolder path, synthetic, fake or cifar10:<path>"
        )
    if not root.is_dir():
        raise UsageError(
            f"data path {root} is not a folder: expected <path>/train/<class>/<image>.jpg"
        )
    return root / "train" if (root / "train").is_dir() else root


def cifar10_root(path: str) -> Path:
    """The folder holding CIFAR-10's python batches (accepts its parent too)."""
    root = Path(path).expanduser()
    if (root / "cifar-10-batches-py").is_dir():
        root = root / "cifar-10-batches-py"
    if not root.is_dir():
        raise UsageError(
            f"CIFAR-10 folder {root} does not exist: give cifar10:<folder with data_batch_1..5>"
        )
    if not any((root / f).is_file() for f in CIFAR10_FILES):
        raise UsageError(
            f"no CIFAR-10 training batches (data_batch_1..5) in {root}: get the python version of CIFAR-10"
        )
    return root


def check_data(data: str) -> int | None:
    """Cheap pre-flight checks of the --data value (existence, layout); decoding errors come later.

    Returns the data set's number of classes (None for synthetic and fake data, which take it
    from the config), so the run's params are right before any image is decoded.
    """
    if data in ("synthetic", "fake"):
        return None
    if data.startswith("cifar10:"):
        cifar10_root(data.split(":", 1)[1])
        return 10
    root = image_folder_root(data)
    classes = [d for d in root.iterdir() if d.is_dir() and not d.name.startswith(".")]
    if not classes:
        raise UsageError(
            f"no class folders in {root}: expected {root}/<class>/<image>.jpg (ImageFolder layout)"
        )

    check_links(root)  # a link loop would hang ImageFolder's listing (train/folder_links.py)
    return len(classes)


def num_classes_for(data: str, default: int) -> int:
    """Classes of the data named by `data` where they can be read here, else `default`.

    For configs describing runs made elsewhere (ncu imports, sweeps planned ahead): a folder that
    does not exist on this machine cannot be counted, so the --num-classes flag stands.
    """
    try:
        found = check_data(data)
    except UsageError:
        return default
    return default if found is None else found


# ------------------------------------------------------------------ data sets
def checked_image_loader(path: str):
    """ImageFolder's loader, turning undecodable files, and images too large to decode (PIL's
    decompression-bomb guard), into a CorruptDataError naming the file."""
    from PIL import Image

    try:
        with open(path, "rb") as fh:
            img = Image.open(fh)
            return img.convert("RGB")
    except Image.DecompressionBombError as exc:
        raise CorruptDataError(
            f"image {path} is too large to decode ({str(exc).split(', could be')[0]}): "
            "a decompression bomb or a wrong file; remove it or replace it with a resized copy"
        ) from None
    except (OSError, ValueError, SyntaxError) as exc:
        raise CorruptDataError(
            f"cannot decode image {path} ({exc}): remove or replace the file"
        ) from None


def is_image_file(path: str) -> bool:
    """ImageFolder's own test (an image extension), on a regular file only: a FIFO named `x.png`
    made the loader wait for a writer forever; a device or socket is no image either."""
    from torchvision.datasets.folder import IMG_EXTENSIONS

    if not path.lower().endswith(IMG_EXTENSIONS):
        return False
    try:
        return stat.S_ISREG(os.stat(path).st_mode)
    except OSError:
        return False  # a dangling link: as ImageFolder's listing, no image


def _train_transform(image_size: int):
    from torchvision import transforms as T

    return T.Compose(
        [
            T.RandomResizedCrop(image_size, antialias=True),
            T.RandomHorizontalFlip(),
            T.ToTensor(),
            T.Normalize(IMAGENET_MEAN, IMAGENET_STD),
        ]
    )


def image_folder(path: str, image_size: int):
    from torchvision.datasets import ImageFolder

    root = image_folder_root(path)
    try:
        ds = ImageFolder(
            str(root),
            transform=_train_transform(image_size),
            loader=checked_image_loader,
            is_valid_file=is_image_file,
        )
    except FileNotFoundError as exc:
        raise UsageError(
            f"no images in {root} ({exc}): expected {root}/<class>/<image>.jpg"
        ) from None
    return ds, len(ds.classes)


# What CIFAR-10's python batches hold besides dicts, lists, strings and ints: numpy arrays (as
# numpy pickles them: _reconstruct + ndarray + dtype; protocol 5 _frombuffer; numpy 1 names the
# module numpy.core, numpy 2 numpy._core) and, in a Python 3 re-pickle at protocol 2, bytes.
CIFAR10_PICKLE_GLOBALS = frozenset(
    {
        ("numpy.core.multiarray", "_reconstruct"),
        ("numpy.core.numeric", "_frombuffer"),
        ("numpy", "ndarray"),
        ("numpy", "dtype"),
        ("_codecs", "encode"),
    }
)


class _BatchUnpickler(pickle.Unpickler):
    """Unpickles a CIFAR-10 batch without running code: any other global (os.system, eval,
    builtins.__import__, ...) is refused before it is imported."""

    def find_class(self, module: str, name: str):
        numpy1 = module.replace("numpy._core", "numpy.core", 1)
        if (numpy1, name) not in CIFAR10_PICKLE_GLOBALS:
            raise pickle.UnpicklingError(
                f"it asks to load {module}.{name}, which no CIFAR-10 batch holds (a crafted or "
                "foreign file; nothing in it was run)"
            )
        if np.lib.NumpyVersion(np.__version__) >= "2.0.0":  # numpy.core is a deprecated alias
            numpy1 = numpy1.replace("numpy.core", "numpy._core", 1)
        return super().find_class(numpy1, name)


def load_cifar10_batch(file: Path) -> dict:
    """One CIFAR-10 python batch, read with _BatchUnpickler (never plain pickle.load)."""
    with open(file, "rb") as fh:
        return _BatchUnpickler(fh, encoding="latin1").load()


class Cifar10Folder:
    """CIFAR-10 training set from its python pickles, read without torchvision's md5 check.

    (torchvision.datasets.CIFAR10 refuses copies whose checksums differ, such as re-packed or
    subset copies; a benchmark only needs the arrays.)
    """

    def __init__(self, path: str, image_size: int) -> None:
        import torch

        root = cifar10_root(path)
        images, labels = [], []
        for name in CIFAR10_FILES:
            file = root / name
            if not file.is_file():
                continue
            try:
                entry = load_cifar10_batch(file)
                data = np.asarray(entry["data"], dtype=np.uint8).reshape(-1, 3, 32, 32)
                labels.extend(int(x) for x in entry.get("labels", entry.get("fine_labels", [])))
            except Exception as exc:  # noqa: BLE001 - any decoding problem means a corrupt file
                raise CorruptDataError(
                    f"corrupt CIFAR-10 batch {file} ({type(exc).__name__}: {exc}): replace it with "
                    "the python version of CIFAR-10 (cifar-10-python.tar.gz)"
                ) from None
            images.append(data)
        self.images = torch.from_numpy(np.concatenate(images))
        self.labels = torch.tensor(labels, dtype=torch.long)
        if len(self.labels) != len(self.images):
            raise CorruptDataError(
                f"CIFAR-10 batches in {root} have {len(self.images)} images but {len(self.labels)} labels"
            )
        self.image_size = image_size
        self.num_classes = 10
        self.mean = torch.tensor(IMAGENET_MEAN).view(3, 1, 1)
        self.std = torch.tensor(IMAGENET_STD).view(3, 1, 1)

    def __len__(self) -> int:
        return len(self.labels)

    def __getitem__(self, i: int):
        import torch.nn.functional as F

        x = self.images[i].float().div_(255)
        if self.image_size != 32:
            x = F.interpolate(
                x[None],
                size=(self.image_size, self.image_size),
                mode="bilinear",
                align_corners=False,
            )[0]
        return (x - self.mean) / self.std, self.labels[i]


# ------------------------------------------------------------------ sources
def synthetic_source(
    batch_size, image_size, num_classes, device, channels_last, seed
) -> BatchSource:
    import torch

    gen = torch.Generator().manual_seed(seed)
    x = torch.randn(batch_size, 3, image_size, image_size, generator=gen)
    y = torch.randint(0, num_classes, (batch_size,), generator=gen)
    x = x.to(
        device, memory_format=torch.channels_last if channels_last else torch.contiguous_format
    )
    y = y.to(device)
    return BatchSource(lambda: (x, y), num_classes, None, "synthetic batch resident on the device")


def loader_source(
    dataset, num_classes, batch_size, workers, device, channels_last, seed, what
) -> BatchSource:
    import torch
    from torch.utils.data import DataLoader

    if len(dataset) < batch_size:
        raise UsageError(
            f"{what} has {len(dataset)} samples, fewer than one batch of {batch_size}: use a smaller --batch"
        )
    gen = torch.Generator().manual_seed(seed)
    loader = DataLoader(
        dataset,
        batch_size=batch_size,
        shuffle=True,
        drop_last=True,
        num_workers=workers,
        pin_memory=device.type == "cuda",
        persistent_workers=workers > 0,
        generator=gen,
    )
    fmt = torch.channels_last if channels_last else torch.contiguous_format
    state = {"it": iter(loader)}

    def next_batch():
        try:
            x, y = next(state["it"])
        except StopIteration:  # fixed iteration count: cycle over epochs
            state["it"] = iter(loader)
            x, y = next(state["it"])
        return x.to(device, non_blocking=True, memory_format=fmt), y.to(device, non_blocking=True)

    return BatchSource(
        next_batch, num_classes, len(dataset), f"{what} through a DataLoader ({workers} workers)"
    )


def open_source(cfg, device) -> BatchSource:
    """The batch source for `cfg.data` (see TrainConfig.data)."""
    kind = cfg.data_kind
    if kind == "synthetic":
        return synthetic_source(
            cfg.batch_size, cfg.image_size, cfg.num_classes, device, cfg.channels_last, cfg.seed
        )
    if kind == "fake":
        from torchvision import transforms as T
        from torchvision.datasets import FakeData

        steps = cfg.warmup_iters + (cfg.max_iters if cfg.iters == "auto" else cfg.iters)
        ds = FakeData(
            size=cfg.batch_size * min(steps, 64),  # at most 64 batches; the loader cycles
            image_size=(3, cfg.image_size, cfg.image_size),
            num_classes=cfg.num_classes,
            transform=T.Compose([T.ToTensor(), T.Normalize(IMAGENET_MEAN, IMAGENET_STD)]),
            random_offset=cfg.seed,
        )
        n_classes, what = cfg.num_classes, "FakeData"
    elif kind == "cifar10":
        ds, n_classes = Cifar10Folder(cfg.data.split(":", 1)[1], cfg.image_size), 10
        what = f"CIFAR-10 at {cfg.data[8:]}"
    else:
        ds, n_classes = image_folder(cfg.data, cfg.image_size)
        what = f"ImageFolder {image_folder_root(cfg.data)}"
    return loader_source(
        ds, n_classes, cfg.batch_size, cfg.workers, device, cfg.channels_last, cfg.seed, what
    )
