"""Device names -> vendor-table entries, tolerant of how names are written.

Names are matched as `torch.cuda.get_device_name()` reports them, tolerating variants (case, the
"NVIDIA"/"GeForce"/"Tesla" prefixes, "Laptop GPU", a memory size the entry lists or leaves out, a
bare "SXM" for the entry's SXM generation); a different SXM generation or a memory size the entry
does not list matches nothing, and a MIG slice never matches the whole GPU. Pure.
"""

from __future__ import annotations

import difflib
import re
from dataclasses import dataclass, field

from roofline.datasheets import BUILTIN, Entry

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
class Key:
    """A device name reduced to what identifies the part."""

    base: frozenset[str]  # model tokens: {"a100"}, {"rtx", "4090"}
    form: frozenset[str] = field(default_factory=frozenset)  # sxm | pcie | nvl | laptop
    mem: frozenset[str] = field(default_factory=frozenset)  # {"80gb"}
    mig: bool = False  # a MIG slice: never the whole GPU's peaks


def normalize(name: str) -> str:
    """Lower case, words only, (R)/(TM)/Max-Q dropped, "80 GB" -> "80gb"."""
    text = name.lower().replace("(r)", " ").replace("(tm)", " ").replace("max-q", " ")
    text = re.sub(r"(\d+)\s*gb\b", r"\1gb", text)  # "80 GB" -> "80gb"
    return " ".join(re.findall(r"[a-z0-9]+", text))


def name_key(name: str) -> Key:
    """The Key of a device name."""
    base, form, mem = set(), set(), set()
    tokens = normalize(name).split()
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
    return Key(frozenset(base), frozenset(form), frozenset(mem), mig)


def _forms_agree(a: frozenset[str], b: frozenset[str]) -> bool:
    """Same form factor; a bare "SXM" leaves the generation open and agrees with any one SXMn."""
    if a == b:
        return True
    if len(a) == len(b) == 1:
        (x,), (y,) = a, b
        return (x == "sxm" and y.startswith("sxm")) or (y == "sxm" and x.startswith("sxm"))
    return False


def _compatible(query: Key, name: Key) -> bool:
    """Same model and form factor; memory size only has to agree when both names state one."""
    if query.mig or name.mig or query.base != name.base or not _forms_agree(query.form, name.form):
        return False
    return not query.mem or not name.mem or query.mem == name.mem


def _entry_compatible(query: Key, entry: Entry) -> bool:
    """Some name of `entry` is compatible with the query, and the memory size and SXM generation the
    query states are ones the entry states (when it states any). So an alias without them ("NVIDIA
    H100 SXM") does not carry "NVIDIA H100 SXM5 94GB" or "... SXM3 ..." (other parts) to the entry."""
    keys = [name_key(n) for n in entry.names]
    if not any(_compatible(query, k) for k in keys):
        return False
    stated_mem = {k.mem for k in keys if k.mem}
    if query.mem and stated_mem and query.mem not in stated_mem:
        return False
    gens = {f for k in keys for f in k.form if f.startswith("sxm") and f != "sxm"}
    query_gens = {f for f in query.form if f.startswith("sxm") and f != "sxm"}
    return not query_gens or not gens or query_gens <= gens


def candidates(name: str, table: list[Entry]) -> list[Entry]:
    """Entries `name` can mean, best first: [one entry] when unambiguous."""
    norm = normalize(name)
    for entry in table:  # exact name, case and punctuation aside
        if any(normalize(n) == norm for n in entry.names):
            return [entry]
    query = name_key(name)
    if not query.base:
        return []
    compatible = [e for e in table if _entry_compatible(query, e)]
    if len(compatible) > 1:  # prefer entries whose memory size is stated and equal
        same_mem = [e for e in compatible if any(name_key(n).mem == query.mem for n in e.names)]
        if len(same_mem) == 1:
            return same_mem
    return compatible


def find_entry(name: str, table: list[Entry]) -> Entry | None:
    """The one entry `name` means, None when it is unknown or ambiguous."""
    found = candidates(name, table)
    return found[0] if len(found) == 1 else None


def close_names(device_name: str, table: list[Entry] | None = None, n: int = 4) -> list[str]:
    """Known canonical names that look like `device_name` (same model first, then spelling)."""
    table = table if table is not None else list(BUILTIN)
    query = name_key(device_name)
    same_model = [
        e.peaks.device_name
        for e in table
        if query.base and any(name_key(x).base == query.base for x in e.names)
    ]
    by_norm = {normalize(x): e.peaks.device_name for e in table for x in e.names}
    spelled = [
        by_norm[m]
        for m in difflib.get_close_matches(normalize(device_name), list(by_norm), n=n, cutoff=0.5)
    ]
    return list(dict.fromkeys(same_model + spelled))[:n]
