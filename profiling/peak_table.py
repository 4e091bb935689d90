"""Vendor peak FLOP/s and DRAM bandwidth per device, each entry with its datasheet source.

The numbers are the ceilings a roofline is drawn against when no measured ceiling exists (and the
reference a measured ceiling is compared with). Conventions, applied to every entry:

* raw SI units: FLOP/s and byte/s (1 GB/s = 1e9 byte/s, as datasheets count);
* dense figures, never the 2:4-sparsity ones (datasheets mark those with '*'; we halve them);
* `fp32` is the non-tensor (CUDA core) rate, `tf32`, `fp16`, `bf16` are tensor-core rates, `fp64`
  is the FP64 tensor-core rate where the part has one (A100, H100, H200) else the vector rate;
* GeForce cards run fp16 tensor ops at two rates: with fp16 accumulate and, at half of that, with
  fp32 accumulate. We list the fp32-accumulate rate because that is what cuBLAS uses for
  `torch.mm` on fp16/bf16 inputs and therefore what autocast training gets. Data-center parts
  (A100, H100, L4, ...) have one rate for both;
* a dtype a part has no datasheet figure for is left out (for example fp64 on GeForce, bf16 on
  Turing/Volta).

`find(name)` matches names as `torch.cuda.get_device_name()` reports them and tolerates variants
(case, the "NVIDIA"/"GeForce"/"Tesla" prefixes, "Laptop GPU", a memory size the entry lists or
leaves out, a bare "SXM" for the entry's SXM generation); a different SXM generation or a memory
size the entry does not list matches nothing. Users add or override entries without editing code with a
JSON or YAML file named by `--peaks-file` or the environment variable ROOFLINE_PEAKS_FILE; the
format is in docs/peaks.md. Which figures were cross-checked is listed there too.

`python -m profiling.peak_table [NAME]` prints the table (or the entry NAME resolves to).
"""

from __future__ import annotations

import difflib
import json
import math
import os
import re
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Iterable

from common.cli import ArgumentParser
from common.errors import UsageError

DTYPES = ("fp64", "fp32", "tf32", "fp16", "bf16")
PEAKS_FILE_ENV = "ROOFLINE_PEAKS_FILE"
_ADD_HINT = (
    f"add an entry to a JSON/YAML file passed with --peaks-file or ${PEAKS_FILE_ENV} "
    "(format: docs/peaks.md)"
)


@dataclass(frozen=True)
class VendorPeaks:
    """Vendor (datasheet) ceilings of one device."""

    device_name: str
    """canonical name as torch.cuda.get_device_name reports it, e.g. "NVIDIA L4"."""
    flops_per_s: dict[str, float]
    """dtype -> dense (not sparse) peak FLOP/s; dtypes among fp64, fp32, tf32, fp16, bf16."""
    dram_bytes_per_s: float
    """peak DRAM (HBM/GDDR) bandwidth in byte/s."""
    source: str
    """datasheet URL(s) the numbers come from."""
    l2_bytes_per_s: float | None = None
    """optional peak L2 cache bandwidth in byte/s (hierarchical roofline); None: not known."""
    l1_bytes_per_s: float | None = None
    """optional peak L1 (shared memory/L1) bandwidth in byte/s, all SMs together; None: not known."""

    def __post_init__(self) -> None:
        if not isinstance(self.device_name, str) or not self.device_name.strip():
            raise ValueError("device_name must be a non-empty string")
        if not isinstance(self.flops_per_s, dict) or not self.flops_per_s:
            raise ValueError("flops_per_s must be a non-empty mapping of dtype to FLOP/s")
        flops = {}
        for dtype, value in self.flops_per_s.items():
            if dtype not in DTYPES:
                raise ValueError(f"flops_per_s: unknown dtype {dtype!r} (use {', '.join(DTYPES)})")
            flops[dtype] = _positive(value, f"flops_per_s[{dtype}]")
        object.__setattr__(self, "flops_per_s", flops)
        object.__setattr__(
            self, "dram_bytes_per_s", _positive(self.dram_bytes_per_s, "dram_bytes_per_s")
        )
        for name in ("l2_bytes_per_s", "l1_bytes_per_s"):
            if getattr(self, name) is not None:
                object.__setattr__(self, name, _positive(getattr(self, name), name))
        if not isinstance(self.source, str) or not self.source.strip():
            raise ValueError("source must name the datasheet (URL) the numbers come from")
        object.__setattr__(self, "device_name", self.device_name.strip())


def _positive(value: Any, name: str) -> float:
    if isinstance(value, bool):
        raise ValueError(f"{name} must be a positive number, got {value!r}")
    try:
        number = float(value)  # YAML reads 9.895e14 but leaves "989.5e12" a string: accept both
    except (TypeError, ValueError):
        raise ValueError(f"{name} must be a positive number, got {value!r}") from None
    if not math.isfinite(number) or number <= 0:
        raise ValueError(f"{name} must be a positive finite number, got {value!r}")
    return number


@dataclass(frozen=True)
class _Entry:
    peaks: VendorPeaks
    aliases: tuple[str, ...] = ()
    origin: str = "built-in"

    @property
    def names(self) -> tuple[str, ...]:
        return (self.peaks.device_name, *self.aliases)


def _e(name: str, flops: dict[str, float], dram: float, source: str, *aliases: str) -> _Entry:
    return _Entry(VendorPeaks(name, flops, dram, source), tuple(aliases))


T = 1e12  # TFLOP/s
G = 1e9  # GB/s

_H100_SRC = (
    "https://resources.nvidia.com/en-us-tensor-core/nvidia-tensor-core-gpu-datasheet "
    "(H100 datasheet; tensor figures there are with sparsity, halved here)"
)
_A100_SRC = (
    "https://www.nvidia.com/content/dam/en-zz/Solutions/Data-Center/a100/pdf/"
    "nvidia-a100-datasheet-us-nvidia-1758950-r4-web.pdf (tf32/bf16/fp16 dense; fp64 = FP64 Tensor Core)"
)
_A100_FLOPS = {
    "fp64": 19.5 * T,
    "fp32": 19.5 * T,
    "tf32": 156 * T,
    "fp16": 312 * T,
    "bf16": 312 * T,
}
_V100_SRC = "https://images.nvidia.com/content/technologies/volta/pdf/volta-v100-datasheet-update-us-1165301-r5.pdf"

# Order matters only for display. Sparse datasheet figures are written as `x / 2`.
_BUILTIN: tuple[_Entry, ...] = (
    _e(
        "NVIDIA H100 80GB HBM3",
        {
            "fp64": 67 * T,
            "fp32": 67 * T,
            "tf32": 989 * T / 2,
            "fp16": 1979 * T / 2,
            "bf16": 1979 * T / 2,
        },
        3.35e12,
        _H100_SRC + "; https://www.nvidia.com/en-us/data-center/h100/",
        "NVIDIA H100 SXM",
        "NVIDIA H100 SXM5 80GB",
    ),
    _e(
        "NVIDIA H100 PCIe",
        {
            "fp64": 51 * T,
            "fp32": 51 * T,
            "tf32": 756 * T / 2,
            "fp16": 1513 * T / 2,
            "bf16": 1513 * T / 2,
        },
        2.0e12,
        _H100_SRC,
        "NVIDIA H100 PCIe 80GB",
    ),
    _e(
        "NVIDIA H200",
        {
            "fp64": 67 * T,
            "fp32": 67 * T,
            "tf32": 989 * T / 2,
            "fp16": 1979 * T / 2,
            "bf16": 1979 * T / 2,
        },
        4.8e12,
        "https://www.nvidia.com/en-us/data-center/h200/ (H200 SXM; tensor figures with sparsity, halved here)",
        "NVIDIA H200 SXM",
        "NVIDIA H200 141GB HBM3e",
    ),
    _e("NVIDIA A100-SXM4-80GB", _A100_FLOPS, 2039 * G, _A100_SRC, "NVIDIA A100 SXM 80GB"),
    _e("NVIDIA A100-SXM4-40GB", _A100_FLOPS, 1555 * G, _A100_SRC, "NVIDIA A100 SXM 40GB"),
    _e("NVIDIA A100 80GB PCIe", _A100_FLOPS, 1935 * G, _A100_SRC, "NVIDIA A100-PCIE-80GB"),
    _e("NVIDIA A100-PCIE-40GB", _A100_FLOPS, 1555 * G, _A100_SRC, "NVIDIA A100 40GB PCIe"),
    _e(
        "NVIDIA L4",
        {"fp32": 30.3 * T, "tf32": 120 * T / 2, "fp16": 242 * T / 2, "bf16": 242 * T / 2},
        300 * G,
        "https://resources.nvidia.com/en-us-data-center-overview/l4-gpu-datasheet (tensor figures with sparsity, halved here)",
    ),
    _e(
        "NVIDIA L40S",
        {"fp32": 91.6 * T, "tf32": 183 * T, "fp16": 362.05 * T, "bf16": 362.05 * T},
        864 * G,
        "https://resources.nvidia.com/en-us-l40s/l40s-datasheet-28413 (dense column)",
    ),
    _e(
        "NVIDIA A10",
        {"fp32": 31.2 * T, "tf32": 62.5 * T, "fp16": 125 * T, "bf16": 125 * T},
        600 * G,
        "https://www.nvidia.com/content/dam/en-zz/Solutions/Data-Center/a10/pdf/a10-datasheet.pdf (dense column)",
    ),
    _e(
        # AWS-only part: NVIDIA publishes no datasheet. 80 SMs at 1.71 GHz boost; its tensor cores run
        # fp32-accumulate at the GeForce (half) rate, unlike the A10 above.
        "NVIDIA A10G",
        {"fp32": 35 * T, "tf32": 35 * T, "fp16": 70 * T, "bf16": 70 * T},
        600 * G,
        "https://aws.amazon.com/ec2/instance-types/g5/ (no NVIDIA datasheet exists); "
        "https://www.baseten.co/blog/nvidia-a10-vs-a10g-for-ml-model-inference/ (A10 vs A10G spec table)",
    ),
    _e(
        "Tesla T4",
        {"fp32": 8.1 * T, "fp16": 65 * T},
        320 * G,
        "https://www.nvidia.com/content/dam/en-zz/Solutions/Data-Center/tesla-t4/t4-tensor-core-datasheet-951643.pdf "
        "(fp16 = mixed precision FP16/FP32)",
        "NVIDIA T4",
    ),
    _e(
        "Tesla V100-SXM2-16GB",
        {"fp64": 7.8 * T, "fp32": 15.7 * T, "fp16": 125 * T},
        900 * G,
        _V100_SRC + " (V100 SXM2; fp16 = tensor performance)",
        "Tesla V100-SXM2-32GB",
    ),
    _e(
        "Tesla V100-PCIE-16GB",
        {"fp64": 7 * T, "fp32": 14 * T, "fp16": 112 * T},
        900 * G,
        _V100_SRC + " (V100 PCIe; fp16 = tensor performance)",
        "Tesla V100-PCIE-32GB",
    ),
    _e(
        "NVIDIA GeForce RTX 4090",
        {"fp32": 82.6 * T, "tf32": 82.6 * T, "fp16": 165.2 * T, "bf16": 165.2 * T},
        1008 * G,
        "https://images.nvidia.com/aem-dam/Solutions/geforce/ada/nvidia-ada-gpu-architecture.pdf "
        "(Appendix A; fp16/bf16 = Peak Tensor TFLOPS with FP32 Accumulate, dense)",
    ),
    _e(
        # Laptop GPUs have no whitepaper column: derived from NVIDIA's spec page at the top boost clock
        # (150 W TGP). fp32 = 7424 cores x 2 x 2.28 GHz; fp16/bf16 (fp32 accumulate, dense) = AI TOPS
        # (542, FP8 sparse) / 8, the same ratio as the RTX 4090's 1321 / 165.2; tf32 = half of fp16;
        # DRAM = 192 bit x 18 Gbit/s / 8. Lower-TGP laptops clock lower: override with --peaks-file.
        "NVIDIA GeForce RTX 4080 Laptop GPU",
        {"fp32": 7424 * 2 * 2.28e9, "tf32": 542 * T / 16, "fp16": 542 * T / 8, "bf16": 542 * T / 8},
        192 / 8 * 18e9,
        "https://www.nvidia.com/en-us/geforce/laptops/compare/ (CUDA cores, boost clock 1350-2280 MHz, AI TOPS); "
        "https://www.techpowerup.com/gpu-specs/geforce-rtx-4080-mobile.c3947 (192-bit GDDR6 at 18 Gbps)",
        "NVIDIA GeForce RTX 4080 Mobile",
    ),
    _e(
        "NVIDIA GeForce RTX 3090",
        {"fp32": 35.6 * T, "tf32": 35.6 * T, "fp16": 71 * T, "bf16": 71 * T},
        936 * G,
        "https://www.nvidia.com/content/PDF/nvidia-ampere-ga-102-gpu-architecture-whitepaper-v2.pdf "
        "(Appendix A; fp16/bf16 = Peak Tensor TFLOPS with FP32 Accumulate, dense)",
    ),
)


# ------------------------------------------------------------------------------------- matching
_DROP = {"nvidia", "geforce", "tesla", "gpu", "r", "tm", "corporation", "graphics"}
_FORM = {
    "sxm": "sxm",
    "sxm2": "sxm2",
    "sxm3": "sxm3",
    "sxm4": "sxm4",
    "sxm5": "sxm5",  # generations differ (V100 SXM3)
    "pcie": "pcie",
    "pci": "pcie",
    "nvl": "nvl",
    "laptop": "laptop",
    "mobile": "laptop",
    "notebook": "laptop",
}
_MEM_RE = re.compile(r"^\d+gb$")
_MEM_TYPE_RE = re.compile(r"^(hbm\w*|gddr\w*)$")


@dataclass(frozen=True)
class _Key:
    base: frozenset[str]  # model tokens: {"a100"}, {"rtx", "4090"}
    form: frozenset[str] = field(default_factory=frozenset)  # sxm | pcie | nvl | laptop
    mem: frozenset[str] = field(default_factory=frozenset)  # {"80gb"}
    mig: bool = False  # a MIG slice: never the whole GPU's peaks


def _normalize(name: str) -> str:
    text = name.lower().replace("(r)", " ").replace("(tm)", " ").replace("max-q", " ")
    text = re.sub(r"(\d+)\s*gb\b", r"\1gb", text)  # "80 GB" -> "80gb"
    return " ".join(re.findall(r"[a-z0-9]+", text))


def _key(name: str) -> _Key:
    base, form, mem = set(), set(), set()
    tokens = _normalize(name).split()
    mig = "mig" in tokens
    for tok in tokens:
        if tok in _DROP or _MEM_TYPE_RE.match(tok) or tok == "mig":
            continue
        if tok in _FORM:
            form.add(_FORM[tok])
        elif _MEM_RE.match(tok):
            mem.add(tok)
        else:
            base.add(tok)
    return _Key(frozenset(base), frozenset(form), frozenset(mem), mig)


def _forms_agree(a: frozenset[str], b: frozenset[str]) -> bool:
    """Same form factor; a bare "SXM" leaves the generation open and agrees with any one SXMn."""
    if a == b:
        return True
    if len(a) == len(b) == 1:
        (x,), (y,) = a, b
        return (x == "sxm" and y.startswith("sxm")) or (y == "sxm" and x.startswith("sxm"))
    return False


def _compatible(query: _Key, name: _Key) -> bool:
    """Same model and form factor; memory size only has to agree when both names state one."""
    if query.mig or name.mig or query.base != name.base or not _forms_agree(query.form, name.form):
        return False
    return not query.mem or not name.mem or query.mem == name.mem


def _entry_compatible(query: _Key, entry: _Entry) -> bool:
    """Some name of `entry` is compatible with the query, and the memory size and SXM generation the
    query states are ones the entry states (when it states any). So an alias without them ("NVIDIA
    H100 SXM") does not carry "NVIDIA H100 SXM5 94GB" or "... SXM3 ..." (other parts) to the entry."""
    keys = [_key(n) for n in entry.names]
    if not any(_compatible(query, k) for k in keys):
        return False
    stated_mem = {k.mem for k in keys if k.mem}
    if query.mem and stated_mem and query.mem not in stated_mem:
        return False
    gens = {f for k in keys for f in k.form if f.startswith("sxm") and f != "sxm"}
    query_gens = {f for f in query.form if f.startswith("sxm") and f != "sxm"}
    return not query_gens or not gens or query_gens <= gens


# ------------------------------------------------------------------------------------- overrides
_ENTRY_FIELDS = {
    "device_name",
    "aliases",
    "flops_per_s",
    "dram_bytes_per_s",
    "source",
    "l2_bytes_per_s",
    "l1_bytes_per_s",
}
_OPTIONAL_FIELDS = ("l2_bytes_per_s", "l1_bytes_per_s")


def load_overrides(path: str | os.PathLike) -> list[_Entry]:
    """Entries from a user file (JSON, or YAML for .yaml/.yml). Raises UsageError naming the problem.

    The file is `{"devices": [entry, ...]}` or a bare list of entries; an entry has `device_name`
    and optionally `aliases`, `flops_per_s`, `dram_bytes_per_s`, `source`, `l2_bytes_per_s`,
    `l1_bytes_per_s`. Fields left out are taken from the built-in entry the name matches; a new
    device needs the first four (the cache bandwidths stay optional).
    """
    p = Path(path).expanduser()
    if not p.is_file():
        raise UsageError(
            f"peaks file {p} does not exist (set by --peaks-file or ${PEAKS_FILE_ENV})"
        )
    text = p.read_text(encoding="utf-8-sig")
    try:
        if p.suffix.lower() in (".yaml", ".yml"):
            import yaml

            data = yaml.safe_load(text)
        else:
            data = json.loads(text)
    except Exception as exc:  # noqa: BLE001 - json/yaml errors: report them in one line
        first = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
        raise UsageError(
            f"peaks file {p} is not valid {p.suffix.lstrip('.').upper() or 'JSON'}: {first}"
        ) from None
    items = data.get("devices") if isinstance(data, dict) else data
    if not isinstance(items, list):
        raise UsageError(f'peaks file {p}: expected {{"devices": [...]}} or a list of entries')
    entries = []
    for i, item in enumerate(items, 1):
        where = f"peaks file {p}, entry {i}"
        if not isinstance(item, dict):
            raise UsageError(
                f"{where}: expected a mapping with device_name, flops_per_s, dram_bytes_per_s, source"
            )
        unknown = sorted(set(item) - _ENTRY_FIELDS)
        if unknown:
            raise UsageError(
                f"{where}: unknown field(s) {', '.join(unknown)} (allowed: {', '.join(sorted(_ENTRY_FIELDS))})"
            )
        name = item.get("device_name")
        if not isinstance(name, str) or not name.strip():
            raise UsageError(f"{where}: device_name is required")
        aliases = item.get("aliases") or []
        if isinstance(aliases, str):
            aliases = [aliases]
        base = _find_entry(name, list(_BUILTIN))
        fields_ = {
            "device_name": name,
            "flops_per_s": item.get("flops_per_s", base.peaks.flops_per_s if base else None),
            "dram_bytes_per_s": item.get(
                "dram_bytes_per_s", base.peaks.dram_bytes_per_s if base else None
            ),
            "source": item.get("source", base.peaks.source if base else None),
        }
        missing = [k for k, v in fields_.items() if v is None]
        if missing:
            raise UsageError(f"{where} ({name}): new device needs {', '.join(missing)}")
        for key in _OPTIONAL_FIELDS:
            fields_[key] = item.get(key, getattr(base.peaks, key) if base else None)
        try:
            peaks = VendorPeaks(**fields_)
        except ValueError as exc:
            raise UsageError(f"{where} ({name}): {exc}") from None
        extra = tuple(str(a) for a in aliases) + (base.names if base else ())
        entries.append(_Entry(peaks, tuple(dict.fromkeys(extra)), origin=str(p)))
    return entries


def _table(overrides: str | os.PathLike | None) -> list[_Entry]:
    """User entries first, then the built-in entries they do not replace."""
    path = overrides if overrides is not None else os.environ.get(PEAKS_FILE_ENV) or None
    if not path:
        return list(_BUILTIN)
    user = load_overrides(path)
    replaced = {_normalize(n) for e in user for n in e.names}
    kept = [e for e in _BUILTIN if not any(_normalize(n) in replaced for n in e.names)]
    return user + kept


def _candidates(name: str, table: list[_Entry]) -> list[_Entry]:
    """Entries `name` can mean, best first: [one entry] when unambiguous."""
    norm = _normalize(name)
    for entry in table:  # exact name, case and punctuation aside
        if any(_normalize(n) == norm for n in entry.names):
            return [entry]
    query = _key(name)
    if not query.base:
        return []
    compatible = [e for e in table if _entry_compatible(query, e)]
    if len(compatible) > 1:  # prefer entries whose memory size is stated and equal
        same_mem = [e for e in compatible if any(_key(n).mem == query.mem for n in e.names)]
        if len(same_mem) == 1:
            return same_mem
    return compatible


def _find_entry(name: str, table: list[_Entry]) -> _Entry | None:
    found = _candidates(name, table)
    return found[0] if len(found) == 1 else None


def find(device_name: str, overrides: str | os.PathLike | None = None) -> VendorPeaks | None:
    """The vendor peaks of `device_name`, or None when it is unknown or ambiguous.

    `overrides` is a user file (see load_overrides); by default $ROOFLINE_PEAKS_FILE when set.
    """
    entry = _find_entry(device_name or "", _table(overrides))
    return entry.peaks if entry else None


def lookup(device_name: str, overrides: str | os.PathLike | None = None) -> VendorPeaks:
    """Like find(), but an unknown or ambiguous name raises UsageError (one line, with suggestions)."""
    table = _table(overrides)
    found = _candidates(device_name or "", table)
    if len(found) == 1:
        return found[0].peaks
    if found:
        names = ", ".join(e.peaks.device_name for e in found)
        raise UsageError(
            f"no unique vendor peaks for {device_name!r}: it matches {names}; use the full name "
            f"torch.cuda.get_device_name() reports, or {_ADD_HINT}"
        )
    close = close_names(device_name or "", table)
    hint = f"close known devices: {', '.join(close)}; " if close else ""
    if _key(device_name or "").mig:
        hint = "a MIG slice has a fraction of the whole GPU's peaks; " + hint
    raise UsageError(f"no vendor peaks for {device_name!r}: {hint}{_ADD_HINT}")


def close_names(device_name: str, table: list[_Entry] | None = None, n: int = 4) -> list[str]:
    """Known canonical names that look like `device_name` (same model first, then spelling)."""
    table = table if table is not None else list(_BUILTIN)
    query = _key(device_name)
    same_model = [
        e.peaks.device_name
        for e in table
        if query.base and any(_key(x).base == query.base for x in e.names)
    ]
    by_norm = {_normalize(x): e.peaks.device_name for e in table for x in e.names}
    spelled = [
        by_norm[m]
        for m in difflib.get_close_matches(_normalize(device_name), list(by_norm), n=n, cutoff=0.5)
    ]
    return list(dict.fromkeys(same_model + spelled))[:n]


def known_devices(overrides: str | os.PathLike | None = None) -> list[VendorPeaks]:
    """Every entry (user entries first), for listing and for analysis."""
    return [e.peaks for e in _table(overrides)]


def aliases(device_name: str, overrides: str | os.PathLike | None = None) -> tuple[str, ...]:
    """The other names an entry answers to (exact matches besides the tolerant rules)."""
    entry = _find_entry(device_name, _table(overrides))
    return entry.aliases if entry else ()


# ------------------------------------------------------------------------------------- display
def format_table(entries: Iterable[VendorPeaks]) -> str:
    """A Markdown table in TFLOP/s and GB/s (display units; the data stay SI). L2/L1 columns appear
    only when some entry has the figure."""
    entries = list(entries)
    levels = [
        lv
        for lv in ("l2", "l1")
        if any(getattr(p, f"{lv}_bytes_per_s") is not None for p in entries)
    ]
    head = "| device | " + " | ".join(f"{d} TFLOP/s" for d in DTYPES) + " | DRAM GB/s |"
    head += "".join(f" {lv.upper()} GB/s |" for lv in levels)
    rule = "|" + "---|" * (len(DTYPES) + 2 + len(levels))
    rows = [head, rule]
    for p in entries:
        cells = [f"{p.flops_per_s[d] / 1e12:.4g}" if d in p.flops_per_s else "-" for d in DTYPES]
        cells.append(f"{p.dram_bytes_per_s / 1e9:.4g}")
        for lv in levels:
            v = getattr(p, f"{lv}_bytes_per_s")
            cells.append(f"{v / 1e9:.4g}" if v is not None else "-")
        rows.append(f"| {p.device_name} | " + " | ".join(cells) + " |")
    return "\n".join(rows)


def _main(argv: list[str] | None = None) -> int:
    parser = ArgumentParser(
        prog="python -m profiling.peak_table", description=__doc__.splitlines()[0]
    )
    parser.add_argument(
        "name", nargs="?", help="device name to resolve (as torch.cuda.get_device_name reports it)"
    )
    parser.add_argument(
        "--peaks-file", default=None, help=f"user entries (JSON/YAML); default ${PEAKS_FILE_ENV}"
    )
    args = parser.parse_args(argv)
    if args.name:
        p = lookup(args.name, args.peaks_file)
        print(format_table([p]))
        print(f"source: {p.source}")
    else:
        print(format_table(known_devices(args.peaks_file)))
    return 0


if __name__ == "__main__":
    from common.cli import cli_entry

    sys.exit(cli_entry(_main)())
