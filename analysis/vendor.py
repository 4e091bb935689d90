"""Where vendor ceilings come from: the project's peak table and an optional --peaks-file.

The vendor table lives in profiling/peak_table.py (`find(device_name) -> VendorPeaks | None` with
fields device_name, flops_per_s {dtype: FLOP/s}, dram_bytes_per_s, source). It is imported lazily so
that analysis works (with a note in the report) where that module is absent.

A peaks file (JSON or YAML) adds or overrides entries, for devices the table does not know:

    "NVIDIA L4":
      flops_per_s: {fp32: 30.3e12, fp16: 121e12, bf16: 121e12}
      dram_bytes_per_s: 300e9
      source: https://www.nvidia.com/en-us/data-center/l4/
"""
from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any, Callable

from common.errors import UsageError


def load_vendor_lookup() -> tuple[Callable[[str], Any] | None, str]:
    """(profiling.peak_table.find, '') or (None, note saying why there is no vendor table)."""
    try:
        from profiling.peak_table import find
    except ImportError as exc:
        return None, f"no vendor peak table available (profiling.peak_table: {exc}); only measured peaks runs and --peaks-file give roofs"
    return find, ""


def parse_peaks_file(text: str, name: str = "peaks file") -> dict[str, dict]:
    """Parse a peaks file (JSON or YAML mapping device name -> entry) into plain dicts.

    Each entry needs `flops_per_s` (dtype -> FLOP/s) and/or `dram_bytes_per_s`, both positive SI
    numbers; `source` is free text. Raises UsageError naming the bad entry.
    """
    try:
        data = json.loads(text)
    except json.JSONDecodeError:
        import yaml

        try:
            data = yaml.safe_load(text)
        except yaml.YAMLError as exc:
            raise UsageError(f"{name}: neither JSON nor YAML ({str(exc).splitlines()[0]})") from exc
    if not isinstance(data, dict) or not data:
        raise UsageError(f"{name}: expected a mapping of device name -> {{flops_per_s, dram_bytes_per_s, source}}")
    out = {}
    for device, entry in data.items():
        if not isinstance(entry, dict):
            raise UsageError(f"{name}: entry {device!r} must be a mapping")
        flops = entry.get("flops_per_s") or {}
        if not isinstance(flops, dict):
            raise UsageError(f"{name}: {device!r}.flops_per_s must map dtype -> FLOP/s")
        clean: dict[str, Any] = {"device_name": str(device), "flops_per_s": {}, "source": str(entry.get("source", ""))}
        for dtype, value in flops.items():
            clean["flops_per_s"][str(dtype)] = _positive(value, f"{name}: {device!r}.flops_per_s.{dtype}")
        for key in ("dram_bytes_per_s", "l2_bytes_per_s", "l1_bytes_per_s"):
            if entry.get(key) is not None:
                clean[key] = _positive(entry[key], f"{name}: {device!r}.{key}")
        if not clean["flops_per_s"] and "dram_bytes_per_s" not in clean:
            raise UsageError(f"{name}: {device!r} has neither flops_per_s nor dram_bytes_per_s")
        out[str(device)] = clean
    return out


def _positive(value: Any, where: str) -> float:
    try:
        v = float(value)
    except (TypeError, ValueError):
        raise UsageError(f"{where} must be a number in SI units (e.g. 30.3e12), got {value!r}") from None
    if not (math.isfinite(v) and v > 0):
        raise UsageError(f"{where} must be positive, got {value!r}")
    return v


def read_peaks_file(path: str) -> dict[str, dict]:
    p = Path(path)
    if not p.is_file():
        raise UsageError(f"--peaks-file {path}: no such file")
    return parse_peaks_file(p.read_text(), str(p))
