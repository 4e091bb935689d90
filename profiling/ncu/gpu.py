"""The GPU a profile is of: torch's view of the local GPU (the injectable probe), and the chip and
counters of a device named by the user, an imported file or the probe.

`cuda_probe` is the real probe; ``profiling.cli.main(argv, probe=...)`` takes a stand-in, so the
capture path runs in tests without a GPU (docs/profiling.md, "Testing without a GPU").
"""

from __future__ import annotations

from dataclasses import dataclass, field

from common import console
from common.envinfo import environment_tags
from profiling.ncu.chips.counters import ChipCounters, counters_for, source_note
from profiling.ncu.chips.devices import ChipChoice, resolve_chip


@dataclass
class GpuInfo:
    """What the capture path needs to know about the local GPU."""

    available: bool
    """torch.cuda.is_available()."""
    name: str | None = None
    """torch.cuda.get_device_name(), e.g. "NVIDIA L4"."""
    capability: tuple[int, int] | None = None
    """compute capability (major, minor); chooses the tensor-core counters."""
    tags: dict[str, str] = field(default_factory=dict)
    """environment tags (common.envinfo.environment_tags)."""


def cuda_probe(device: str, env_label: str | None = None) -> GpuInfo:
    """The real probe: torch's view of `device` (no CUDA context is created)."""
    import torch

    if not torch.cuda.is_available():
        return GpuInfo(False)

    dev = torch.device(device)
    index = dev.index if dev.index is not None else 0
    return GpuInfo(
        True,
        torch.cuda.get_device_name(index),
        tuple(torch.cuda.get_device_capability(index)),
        environment_tags(device, env_label),
    )


def chip_for(
    device_name: str | None, capability: tuple[int, int] | None, chip_id: int | None = None
) -> tuple[ChipChoice, ChipCounters | None]:
    """The device's chip and that chip's counters, with a note for every assumption made."""
    choice = resolve_chip(device_name, capability, chip_id)
    if choice.note:
        console.note(choice.note)
    counters = counters_for(choice.chip) if choice.chip else None
    if counters is not None and source_note():
        console.note(source_note())
    return choice, counters


def chip_tags(choice: ChipChoice, counters: ChipCounters | None) -> dict[str, str]:
    """The run's tags naming the chip, how it was found and where its counter facts came from."""
    tags = {"ncu_chip": choice.chip or "unknown", "ncu_chip_from": choice.how}
    if counters is not None:
        tags["ncu_metric_database"] = counters.source
    return tags
