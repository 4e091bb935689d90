"""Where vendor ceilings come from: the project's peak table, with the user's --peaks-file.

The vendor table lives in profiling/peak_table.py: `find(device_name, overrides=None) ->
VendorPeaks | None` (fields device_name, flops_per_s {dtype: FLOP/s}, dram_bytes_per_s, source),
with tolerant name matching and user overrides from a JSON/YAML file (`--peaks-file`, else
$ROOFLINE_PEAKS_FILE; format in docs/peaks.md). Analysis passes its --peaks-file straight through,
so there is one file format in the project.

The table is imported lazily. Where it is absent, a peaks file is still read here (same format,
exact device names or aliases only) and the report says so; with neither, the report says there is
no vendor table.
"""
from __future__ import annotations

import inspect
import json
import math
import os
from pathlib import Path
from typing import Any, Callable

from common.errors import UsageError

PEAKS_FILE_ENV = "ROOFLINE_PEAKS_FILE"  # the variable profiling.peak_table reads too
_FIELDS = {"device_name", "aliases", "flops_per_s", "dram_bytes_per_s", "source"}


def load_vendor_lookup(peaks_file: str = "") -> tuple[Callable[[str], Any] | None, str]:
    """(lookup(device_name) -> VendorPeaks-like | None, note); note is '' when all is normal.

    A bad peaks file is a UsageError here, before any work.
    """
    path = peaks_file or os.environ.get(PEAKS_FILE_ENV, "")
    try:
        from profiling import peak_table
    except ImportError as exc:
        if path:
            entries = read_peaks_file(path)
            return _file_lookup(entries), (f"no vendor peak table available (profiling.peak_table: {exc}); "
                                           f"vendor ceilings from {path} only, matched by exact device name")
        return None, (f"no vendor peak table available (profiling.peak_table: {exc}); "
                      "only measured peaks runs give roofs")
    find = peak_table.find
    if not path:
        return find, ""
    if hasattr(peak_table, "load_overrides"):
        peak_table.load_overrides(path)  # validate now: one line naming the bad entry
    if "overrides" in inspect.signature(find).parameters:
        return (lambda name: find(name, overrides=path)), ""
    return find, f"profiling.peak_table.find takes no overrides: {path} not used"


def parse_peaks_file(text: str, name: str = "peaks file", yaml_syntax: bool = False) -> list[dict]:
    """Entries of a peaks file in profiling.peak_table's format: {"devices": [entry, ...]} or a bare
    list; an entry has device_name and optionally aliases, flops_per_s {dtype: FLOP/s},
    dram_bytes_per_s, source. Raises UsageError naming the file and the entry."""
    try:
        if yaml_syntax:
            import yaml

            data = yaml.safe_load(text)
        else:
            data = json.loads(text)
    except Exception as exc:  # noqa: BLE001 - json/yaml errors in one line
        first = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
        raise UsageError(f"{name} is not valid {'YAML' if yaml_syntax else 'JSON'}: {first}") from None
    items = data.get("devices") if isinstance(data, dict) else data
    if not isinstance(items, list):
        raise UsageError(f'{name}: expected {{"devices": [...]}} or a list of entries (format: docs/peaks.md)')
    out = []
    for i, item in enumerate(items, 1):
        where = f"{name}, entry {i}"
        if not isinstance(item, dict):
            raise UsageError(f"{where}: expected a mapping with device_name, flops_per_s, dram_bytes_per_s, source")
        unknown = sorted(set(item) - _FIELDS)
        if unknown:
            raise UsageError(f"{where}: unknown field(s) {', '.join(unknown)} (allowed: {', '.join(sorted(_FIELDS))})")
        device = item.get("device_name")
        if not isinstance(device, str) or not device.strip():
            raise UsageError(f"{where}: device_name is required")
        flops = item.get("flops_per_s") or {}
        if not isinstance(flops, dict):
            raise UsageError(f"{where} ({device}): flops_per_s must map dtype -> FLOP/s")
        entry: dict[str, Any] = {"device_name": device, "source": str(item.get("source") or ""),
                                 "flops_per_s": {str(d): _positive(v, f"{where} ({device}): flops_per_s.{d}")
                                                 for d, v in flops.items()}}
        if item.get("dram_bytes_per_s") is not None:
            entry["dram_bytes_per_s"] = _positive(item["dram_bytes_per_s"], f"{where} ({device}): dram_bytes_per_s")
        if not entry["flops_per_s"] and "dram_bytes_per_s" not in entry:
            raise UsageError(f"{where} ({device}): needs flops_per_s or dram_bytes_per_s")
        aliases = item.get("aliases") or []
        entry["names"] = [device, *([aliases] if isinstance(aliases, str) else aliases)]
        out.append(entry)
    return out


def _positive(value: Any, where: str) -> float:
    try:
        v = float(value)  # YAML reads 30.3e12 (no sign in the exponent) as a string
    except (TypeError, ValueError):
        raise UsageError(f"{where} must be a number in SI units (e.g. 30.3e12), got {value!r}") from None
    if not (math.isfinite(v) and v > 0):
        raise UsageError(f"{where} must be positive, got {value!r}")
    return v


def read_peaks_file(path: str) -> list[dict]:
    p = Path(path).expanduser()
    if not p.is_file():
        raise UsageError(f"peaks file {p} does not exist (set by --peaks-file or ${PEAKS_FILE_ENV})")
    return parse_peaks_file(p.read_text(encoding="utf-8-sig"), f"peaks file {p}",
                            yaml_syntax=p.suffix.lower() in (".yaml", ".yml"))


def _file_lookup(entries: list[dict]) -> Callable[[str], dict | None]:
    by_name = {n.strip().lower(): e for e in entries for n in e["names"]}
    return lambda device: by_name.get((device or "").strip().lower())
