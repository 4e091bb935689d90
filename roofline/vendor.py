"""Vendor peak FLOP/s and DRAM bandwidth per device, each entry with its datasheet source.

`find(name)` and `lookup(name)` give the entry a device name resolves to (roofline/names.py
matches names as `torch.cuda.get_device_name()` reports them, tolerating variants) from the table
of datasheet figures (roofline/datasheets.py, which states the conventions every entry follows).
Users add or override entries without editing code with a JSON or YAML file named by
`--peaks-file` or the environment variable ROOFLINE_PEAKS_FILE (`load_overrides`,
`load_vendor_lookup`); the format is in docs/peaks.md. Which figures were cross-checked is listed
there too.

`python -m roofline.vendor [NAME]` prints the table (or the entry NAME resolves to).
"""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path
from typing import Callable, Iterable

from common import schema, textfile
from common.cli import ArgumentParser
from common.errors import UsageError
from roofline.datasheets import BUILTIN, Entry, VendorPeaks
from roofline.model import DTYPES
from roofline.names import candidates, close_names, find_entry, name_key, normalize

PEAKS_FILE_ENV = "ROOFLINE_PEAKS_FILE"
_ADD_HINT = (
    f"add an entry to a JSON/YAML file passed with --peaks-file or ${PEAKS_FILE_ENV} "
    "(format: docs/peaks.md)"
)


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


def load_overrides(path: str | os.PathLike) -> list[Entry]:
    """Entries from a user file (JSON, or YAML for .yaml/.yml). Raises UsageError naming the problem.

    The file is `{"devices": [entry, ...]}` or a bare list of entries; an entry has `device_name`
    and optionally `aliases`, `flops_per_s`, `dram_bytes_per_s`, `source`, `l2_bytes_per_s`,
    `l1_bytes_per_s`. Fields left out are taken from the built-in entry the name matches; a new
    device needs the first four (the cache bandwidths stay optional).
    """
    p = Path(path).expanduser()
    entries = [_user_entry(item, p, i) for i, item in enumerate(_file_items(p), 1)]
    _refuse_clashes(entries, p)
    return entries


def _refuse_clashes(entries: list[Entry], p: Path) -> None:
    """UsageError when two entries answer to one name (main: the first won, silently)."""
    seen: dict[str, int] = {}
    for i, entry in enumerate(entries, 1):
        for n in entry.names:
            first = seen.setdefault(normalize(n), i)
            if first != i:
                raise UsageError(
                    f"peaks file {p}: entries {first} and {i} both answer to {n!r} (their "
                    f"device_name, an alias, or the built-in device they override): keep one"
                )


def _file_items(p: Path) -> list:
    """The entries a peaks file lists, parsed (JSON, or YAML without aliases: common.textfile)
    but not checked."""
    text = textfile.read_text(p, "peaks file", f"set by --peaks-file or ${PEAKS_FILE_ENV}")
    try:
        if p.suffix.lower() in (".yaml", ".yml"):
            data = textfile.load_yaml(text)
        else:
            data = json.loads(text)
    except (ValueError, RecursionError) as exc:  # json/yaml errors: report them in one line
        first = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
        raise UsageError(
            f"peaks file {p} is not valid {p.suffix.lstrip('.').upper() or 'JSON'}: {first}"
        ) from None
    items = data.get("devices") if isinstance(data, dict) else data
    if not isinstance(items, list):
        raise UsageError(f'peaks file {p}: expected {{"devices": [...]}} or a list of entries')
    return items


def _user_entry(item, p: Path, i: int) -> Entry:
    """Entry `i` of peaks file `p`, its missing fields taken from the built-in entry it names."""
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
    base = find_entry(name, list(BUILTIN))
    aliases = _aliases(item, base, f"{where} ({name})")
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
    if base:
        _near_datasheet(peaks, base.peaks, f"{where} ({name})")
    extra = tuple(aliases) + (base.names if base else ())
    return Entry(peaks, tuple(dict.fromkeys(extra)), origin=str(p))


def _aliases(item: dict, base: Entry | None, where: str) -> list[str]:
    """The entry's aliases, each a name (common.schema.check_name). UsageError for an alias that
    names a built-in device other than the one the entry's device_name overrides: it replaced
    that device silently (main: an H100 with a user's figures and 'source: me', 1502044.9 % of
    its roof)."""
    aliases = item.get("aliases") or []
    aliases = [str(a) for a in ([aliases] if isinstance(aliases, str) else aliases)]
    for alias in [item["device_name"], *aliases]:
        try:
            schema.check_name(alias, "name")
        except ValueError as exc:
            raise UsageError(f"{where}: {exc}") from None
    for alias in aliases:
        hit = [e for e in candidates(alias, list(BUILTIN)) if e is not base]
        if hit:
            raise UsageError(
                f"{where}: alias {alias!r} names the built-in {hit[0].peaks.device_name}, which it "
                "would replace: to override that device, give its name as device_name; an alias "
                "only adds another name of the entry's own device"
            )
    return aliases


NEAR_DATASHEET = 10.0
"""How far (a factor, either way) an entry may put a built-in device's figure from its datasheet:
a power cap or a boost clock moves a peak by tens of percent, a unit slip (TFLOP/s for FLOP/s) by
a million."""


def _near_datasheet(peaks: VendorPeaks, sheet: VendorPeaks, where: str) -> None:
    """UsageError for a figure of an entry overriding built-in `sheet` more than NEAR_DATASHEET
    times away from the datasheet's."""
    pairs = [
        (f"flops_per_s[{d}]", v, sheet.flops_per_s.get(d)) for d, v in peaks.flops_per_s.items()
    ]
    pairs += [
        (k, getattr(peaks, k), getattr(sheet, k)) for k in ("dram_bytes_per_s", *_OPTIONAL_FIELDS)
    ]
    for key, mine, theirs in pairs:
        if mine and theirs and not theirs / NEAR_DATASHEET <= mine <= theirs * NEAR_DATASHEET:
            raise UsageError(
                f"{where}: {key} = {mine:.3g} is {mine / theirs:.3g} times the datasheet's "
                f"{theirs:.3g} for {sheet.device_name}: a unit slip? (figures are FLOP/s and "
                f"byte/s; an override stays within {NEAR_DATASHEET:g}x of the datasheet)"
            )


def _table(overrides: str | os.PathLike | None) -> list[Entry]:
    """User entries first, then the built-in entries they do not replace."""
    path = overrides if overrides is not None else os.environ.get(PEAKS_FILE_ENV) or None
    if not path:
        return list(BUILTIN)
    user = load_overrides(path)
    replaced = {normalize(n) for e in user for n in e.names}
    kept = [e for e in BUILTIN if not any(normalize(n) in replaced for n in e.names)]
    return user + kept


def find(device_name: str, overrides: str | os.PathLike | None = None) -> VendorPeaks | None:
    """The vendor peaks of `device_name`, or None when it is unknown or ambiguous.

    `overrides` is a user file (see load_overrides); by default $ROOFLINE_PEAKS_FILE when set.
    """
    entry = find_entry(device_name or "", _table(overrides))
    return entry.peaks if entry else None


def lookup(device_name: str, overrides: str | os.PathLike | None = None) -> VendorPeaks:
    """Like find(), but an unknown or ambiguous name raises UsageError (one line, with suggestions)."""
    table = _table(overrides)
    found = candidates(device_name or "", table)
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
    if name_key(device_name or "").mig:
        hint = "a MIG slice has a fraction of the whole GPU's peaks; " + hint
    raise UsageError(f"no vendor peaks for {device_name!r}: {hint}{_ADD_HINT}")


def load_vendor_lookup(peaks_file: str = "") -> Callable[[str], VendorPeaks | None]:
    """lookup(device_name) -> VendorPeaks | None with `peaks_file` (else $ROOFLINE_PEAKS_FILE)
    passed through: analysis's --peaks-file and train's roofline.png read one file format with one
    parser. A device the table does not know gives None (the report then says `no peaks for ...`).

    A bad peaks file is a one-line UsageError here, before any run is read.
    """
    path = peaks_file or os.environ.get(PEAKS_FILE_ENV, "")
    if not path:
        return find
    load_overrides(path)  # validate now: one line naming the bad entry
    return lambda name: find(name, overrides=path)


def known_devices(overrides: str | os.PathLike | None = None) -> list[VendorPeaks]:
    """Every entry (user entries first), for listing and for analysis."""
    return [e.peaks for e in _table(overrides)]


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


def main(argv: list[str] | None = None) -> int:
    parser = ArgumentParser(prog="python -m roofline.vendor", description=__doc__.splitlines()[0])
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

    sys.exit(cli_entry(main)())
