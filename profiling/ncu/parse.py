"""Read Nsight Compute CSV output into per-kernel records with SI values.

Pure: no mlflow, no file writes (``read_ncu_csv`` only reads). Handles both CSV pages that
``ncu --csv`` prints:

* details (``--page details``, the default): one row per kernel and metric, columns
  ``"ID","Process ID",...,"Metric Name","Metric Unit","Metric Value"``, optionally NVTX columns
  after ``Host Name`` (``--nvtx``) and trailing rule columns (``Rule Name``, ...);
* raw (``--page raw``): a header row, a units row, then one row per kernel with one column per
  metric.

Also: ``==PROF==``/``==WARNING==``/``==ERROR==`` lines and program output before (or between) the
table rows, a UTF-8 BOM, CRLF line ends, thousands separators (``"134,221,568"``), ``n/a`` values,
and unit prefixes scaled by 1000 (``Kbyte`` = 1,000 byte; ``usecond`` = 1e-6 s): values and units
are read by profiling.ncu.units, NVTX cells and phases by profiling.ncu.nvtx, and a file of ncu's
messages without a table gets its reason from profiling.ncu.messages.
"""

from __future__ import annotations

import csv
import gzip
import io
import math
import re
import zlib
from dataclasses import dataclass, field
from functools import lru_cache
from pathlib import Path
from sys import intern
from typing import Callable, Iterable

from common.errors import BenchError
from profiling.ncu.budget import CountedReader, ReadBudget, refuse_many_results
from profiling.ncu.messages import messages_reason
from profiling.ncu.names import DEVICE_NAME_METRIC
from profiling.ncu.nvtx import kernel_phase, nvtx_ranges
from profiling.ncu.units import parse_number, unit_scale

# Identity columns of both pages (everything that is not a metric). NVTX columns are found by name.
ID_COLUMNS = (
    "ID",
    "Process ID",
    "Process Name",
    "Host Name",
    "Kernel Name",
    "Kernel Time",
    "Context",
    "Stream",
    "Block Size",
    "Grid Size",
    "Device",
    "CC",
    "Section Name",
)
DETAILS_COLUMNS = ("Metric Name", "Metric Unit", "Metric Value")

_METRIC_NAME = re.compile(r"^[a-z0-9_]+__[A-Za-z0-9_.]+$")  # unit__counter[.rollup[.submetric]]


class NcuParseError(BenchError):
    """The input is not Nsight Compute CSV output (or not a table we can read)."""


@dataclass(slots=True)
class NcuKernel:
    """One profiled result (a kernel launch; a range in range replay modes)."""

    id: int
    """ncu's result ID (the "ID" column)."""
    name: str
    """kernel name as ncu printed it (demangled by default)."""
    attrs: dict[str, str] = field(default_factory=dict)
    """identity columns: Process ID, Block Size, Grid Size, Device, CC, Stream, ..."""
    nvtx_push_pop: tuple[str, ...] = ()
    """names of the NVTX push/pop ranges open on the launching thread, outermost first."""
    nvtx_start_end: tuple[str, ...] = ()
    """names of the process-wide NVTX start/end ranges open at launch, in start order."""
    metrics: dict[str, float] = field(default_factory=dict)
    """metric name -> value in SI base units (bytes, seconds, counts); NaN where ncu said n/a."""
    units: dict[str, str] = field(default_factory=dict)
    """metric name -> base unit after scaling ("byte", "second", "inst", "inst/cycle", "%", "")."""
    texts: dict[str, str] = field(default_factory=dict)
    """metric name -> value, for metrics whose value is not a number (device name, cache config)."""
    phase_label: str | None = None
    """the phase the user said the kernel's file holds (--phase), which wins over NVTX."""

    @property
    def phase(self) -> str | None:
        """The training phase the kernel ran in: its --phase label, else from NVTX
        (profiling.ncu.nvtx.kernel_phase); None without either."""
        if self.phase_label:
            return self.phase_label
        return kernel_phase(self.nvtx_start_end, self.nvtx_push_pop)


@dataclass
class NcuReport:
    """Everything read from one ncu output: kernels in file order plus what surrounded the table."""

    kernels: list[NcuKernel]
    page: str
    """"details", "raw" or "ncu-rep"."""
    messages: list[str] = field(default_factory=list)
    """ncu's own lines (==PROF==, ==WARNING==, ==ERROR==), in order."""
    program_lines: int = 0
    """other non-table lines (program output) that were skipped."""
    na: dict[str, int] = field(default_factory=dict)
    """metric name -> number of kernels for which ncu reported n/a."""
    has_nvtx: bool = False
    """True when the table had NVTX columns (ncu --nvtx)."""
    source: str = ""
    """file name (or "<text>")."""
    truncated: str = ""
    """why the input looks cut short ("its last row stops mid-field ..."), or "" when it ends as
    ncu ends a table (see truncation_reason)."""

    @property
    def device_name(self) -> str | None:
        """GPU name when the output carries it (raw page with device attributes, .ncu-rep)."""
        for k in self.kernels:
            name = k.texts.get(DEVICE_NAME_METRIC)
            if name:
                return name
        return None

    def metric_names(self) -> set[str]:
        names: set[str] = set()
        for k in self.kernels:
            names.update(k.metrics)
        return names


# ------------------------------------------------------------------------------------ CSV
MAX_LINE_CHARS = 1 << 20
"""The longest line read (characters). ncu's longest lines are raw-page rows of a `--set full`
export (22,757 characters in tests/data/ncu/b200_decode_raw_page.csv, with hundreds of columns and a
demangled template name); a longer line is no ncu output (a file of NUL bytes, a binary). Lines are
read one at a time, so memory stays bounded by this, not by the file's size."""


class _Lines:
    """The lines of a text stream without their line ends, refusing one longer than `limit`
    characters as soon as it is seen (without reading the rest of it). Remembers whether the input
    ended with a line end and what its last non-blank line was, for truncation_reason. Each line
    is taken from `budget` (profiling.ncu.budget: the lines one import may read)."""

    def __init__(self, chunks: Iterable[str], source: str, limit: int, budget: ReadBudget):
        self.chunks, self.source, self.limit, self.budget = chunks, source, limit, budget
        self.number = 0  # physical line number of the last line read (1-based)
        self.ends = False
        self.last = ""

    def __iter__(self):
        for chunk in self.chunks:
            self.number += 1
            if len(chunk.rstrip("\r\n")) > self.limit:
                raise NcuParseError(
                    f"{self.source}: line {self.number} is longer than {self.limit:,} characters "
                    "(ncu's longest lines are tens of thousands): not Nsight Compute CSV output, "
                    "or damaged (NUL bytes, a binary file); export it again"
                )
            body = chunk.rstrip(" \t")
            if body:
                self.ends = body.endswith(("\n", "\r"))
            # splitlines, as the text was split before lines were streamed (\x0b, \x1c, ...)
            for line in chunk.splitlines():
                self.budget.take_line(self.source)
                if line.strip():
                    self.last = line
                yield line


def _read_chunks(fh, limit: int):
    while True:
        chunk = fh.readline(limit + 2)
        if not chunk:
            return
        yield chunk


def read_ncu_csv(
    path: str | Path,
    keep: Callable[[str], bool] | None = None,
    max_line_chars: int = MAX_LINE_CHARS,
    budget: ReadBudget | None = None,
) -> NcuReport:
    """Read an ncu CSV file (see parse_ncu_csv) line by line, in memory bounded by the kept
    metrics and `max_line_chars`, and in text, lines and results by `budget` (one import's,
    shared by its files; default: a whole import's for this file alone). Decodes UTF-8 with or
    without BOM; a gzipped file (its first bytes say so, whatever its name) is read through gzip."""
    p = Path(path)
    budget = budget or ReadBudget()
    gz = is_gzip(p)
    try:
        if not gz:
            budget.check_size(p)  # before it is opened
        with gzip.GzipFile(p, "rb") if gz else open(p, "rb") as raw:
            refuse_many_results(raw, budget, p.name)  # before the parser builds one result
        raw = gzip.GzipFile(p, "rb") if gz else open(p, "rb")
        counted = io.BufferedReader(CountedReader(raw, budget, p.name))
        with io.TextIOWrapper(counted, encoding="utf-8-sig", errors="replace", newline="") as fh:
            lines = _Lines(_read_chunks(fh, max_line_chars), p.name, max_line_chars, budget)
            return _parse_lines(lines, keep, p.name, budget)
    except (EOFError, zlib.error, gzip.BadGzipFile) as exc:
        raise BenchError(
            f"cannot read {p.name}: a damaged or cut gzip file ({exc}); copy it again"
        ) from exc
    except OSError as exc:
        raise BenchError(f"cannot read {p}: {exc.strerror or exc}") from exc


GZIP_MAGIC = b"\x1f\x8b"


def is_gzip(path: str | Path) -> bool:
    """True when the file starts with gzip's magic bytes."""
    try:
        with open(path, "rb") as fh:
            return fh.read(2) == GZIP_MAGIC
    except OSError:
        return False


def parse_ncu_csv(
    text: str,
    keep: Callable[[str], bool] | None = None,
    source: str = "<text>",
    max_line_chars: int = MAX_LINE_CHARS,
    budget: ReadBudget | None = None,
) -> NcuReport:
    """Parse the text ncu wrote with ``--csv`` (log file or captured stdout).

    `keep(metric_name)` limits which metrics are stored (large raw exports have ~500 columns);
    the device name is always kept. Raises NcuParseError when no ncu table is found, when a table
    header is followed by no readable result row, or when a line is longer than `max_line_chars`.
    """
    if text.startswith("\ufeff"):
        text = text[1:]
    chunks = (m.group(0) for m in re.finditer(r"[^\n\r]*(?:\r\n|\n|\r)|[^\n\r]+$", text))
    budget = budget or ReadBudget()
    return _parse_lines(_Lines(chunks, source, max_line_chars, budget), keep, source, budget)


def _parse_lines(
    lines: _Lines, keep: Callable[[str], bool] | None, source: str, budget: ReadBudget
) -> NcuReport:
    """The parser behind read_ncu_csv and parse_ncu_csv: one pass over `lines`."""
    messages: list[str] = []
    program = 0
    nvprof = False
    it = iter(lines)
    header_line = None
    for line in it:
        s = line.lstrip("\ufeff").strip()
        if s.startswith('"ID",') or s.startswith("ID,"):
            header_line = line
            break
        nvprof = (
            nvprof or '"Device","Kernel","Invocations"' in line or "NVPROF is profiling" in line
        )
        if s.startswith("=="):
            messages.append(s)
        elif s:
            program += 1
    if header_line is None:
        raise NcuParseError(_no_table_reason(nvprof, source, messages))

    seen = _TableLines(header_line, it, messages)
    rows = csv.reader(seen)
    try:
        header = [h.strip().lstrip("\ufeff") for h in next(rows)]
        report = NcuReport(
            kernels=[], page="", messages=messages, program_lines=program, source=source
        )
        last_names: list[set[str]] = []
        if all(c in header for c in DETAILS_COLUMNS):
            last_names = _parse_details(header, rows, report, keep, budget)
            candidates = seen.count - 1
        else:
            units_row = _parse_raw(header, rows, report, keep, budget)
            candidates = seen.count - 1 - int(units_row)
    except csv.Error as exc:  # a field over csv's limit (131,072 characters) on a shorter line
        raise NcuParseError(
            f"{source}: line {lines.number} cannot be read as CSV ({exc}): not Nsight Compute CSV "
            "output, or damaged; export it again"
        ) from None
    if not report.kernels:
        raise NcuParseError(_no_results_reason(source, messages, seen.first, candidates))
    ends = lines.ends or lines.last.strip().startswith("==")
    report.truncated = truncation_reason(header_line, seen.last, len(header), ends, last_names)
    return report


class _TableLines:
    """The lines from the header on, as csv.reader reads them: ncu's `==` messages (which ncu may
    print between rows) go to `messages`, blank lines are skipped; counts the table's lines and
    keeps its first row under the header and its last line."""

    def __init__(self, header: str, rest, messages: list[str]):
        self.header, self.rest, self.messages = header, rest, messages
        self.count = 0
        self.first = ""
        self.last = ""

    def __iter__(self):
        self.count = 1
        yield self.header
        for line in self.rest:
            s = line.strip()
            if s.startswith("=="):
                self.messages.append(s)
            elif s:
                self.count += 1
                self.first = self.first or s
                self.last = line
                yield line


def refuse_truncated(report: NcuReport, allowed: bool) -> None:
    """BenchError when `report` looks cut short, unless the user allowed it (--allow-truncated)."""
    if report.truncated and not allowed:
        raise BenchError(
            f"{report.source} is truncated: {report.truncated}, so its totals would cover only part "
            "of the profile; copy or export it again (a capture: run it again), or pass "
            "--allow-truncated to log what it holds as an incomplete profile without a roofline point"
        )


def truncation_reason(
    header: str, last_line: str, width: int, ends_with_line_end: bool, last_names: list[set[str]]
) -> str:
    """Why a table looks cut short, or "".

    ncu writes no footer, so what closes a table is a whole last row: every field, the closing
    quote of its last value (ncu quotes every value) and a line end, and, on the details page, a
    last result with every metric the result before it has (ncu prints the same metrics for every
    result of one run). A file cut at a byte (`head -c`, an interrupted copy, a full disk) fails
    the first test, or, cut at a line end inside a result's rows, the second. A cut exactly between
    two results cannot be seen. `header` is the table's header line, `last_line` its last line
    ("" when no row follows the header); `last_names` the metric names of the last two results of a
    details page, in file order.
    """
    last = last_line.strip()
    row = next(csv.reader([last]), []) if last else []
    if row and row[0].strip().replace(",", "").isdigit() and len(row) < width:
        return f"its last row has {len(row)} of the header's {width} fields"
    quoted = header.lstrip().startswith('"')
    unclosed = quoted and (not last.endswith('"') or last.count('"') % 2)
    if last and not ends_with_line_end and (len(row) < width or unclosed):
        return f"its last line stops inside a row ({last[-20:]!r}, no line end)"
    if len(last_names) == 2 and last_names[1] < last_names[0]:
        lacking = len(last_names[0] - last_names[1])
        return (
            f"its last result has {len(last_names[1])} of the {len(last_names[0])} metrics of the "
            f"result before it ({lacking} missing)"
        )
    return ""


def _no_results_reason(source: str, messages: list[str], first: str, candidates: int) -> str:
    """Why a table with an ncu header gave no kernels. Never the launch-skip hint: a real ncu run
    that profiles nothing prints no table at all ("No kernels were profiled", classified below)."""
    reason = messages_reason(source, messages)
    if reason:
        return reason
    export = (
        "export it again on the profiling machine (`ncu --import report.ncu-rep --csv --page raw`)"
    )
    if candidates <= 0:
        return (
            f"{source} has an ncu table header but no result rows (a truncated export?): {export}"
        )
    return (
        f"{source}: none of the {candidates} rows under its ncu table header could be read as a result "
        f"(first: {first[:60]!r}): the file is damaged or not ncu CSV output; {export}"
    )


def _no_table_reason(nvprof: bool, source: str, messages: list[str]) -> str:
    if nvprof:
        return (
            f"{source} is nvprof output, not Nsight Compute: nvprof metrics (flop_count_sp, ...) "
            "do not exist on current GPUs; profile with `python -m profiling` or export with ncu --csv"
        )
    # ncu's console output or log without a table (e.g. saved from a failed run elsewhere): the
    # same one-line reasons as a failed capture
    reason = messages_reason(source, messages)
    if reason:
        return reason
    return (
        f'{source} is not Nsight Compute CSV output (no header row starting with "ID"): export with '
        "`ncu --csv --page details` or `ncu --import report.ncu-rep --csv --page raw`, or pass the .ncu-rep"
    )


def _nvtx_columns(header: list[str]) -> tuple[int | None, int | None]:
    pp = se = None
    for i, h in enumerate(header):
        low = h.lower()
        if "push/pop_range" in low or (low.startswith("nvtx") and pp is None):
            pp = i
        elif "start/stop_range" in low or "start/end_range" in low:
            se = i
    return pp, se


def _id_columns(header: list[str]) -> list[tuple[str, int]]:
    return [(c, header.index(c)) for c in ID_COLUMNS if c in header]


def _kernel_from_row(
    row: list[str], idcols: list[tuple[str, int]], pp: int | None, se: int | None
) -> NcuKernel:
    attrs = {c: intern(row[i].strip()) for c, i in idcols}  # one copy of what rows repeat
    try:
        rid = int(attrs.get("ID", "").replace(",", ""))
    except ValueError as exc:
        raise NcuParseError(f"bad result ID {attrs.get('ID')!r}: not ncu CSV output") from exc
    return NcuKernel(
        id=rid,
        name=attrs.pop("Kernel Name", ""),
        attrs={k: v for k, v in attrs.items() if k != "ID"},
        nvtx_push_pop=nvtx_ranges(row[pp]) if pp is not None else (),
        nvtx_start_end=nvtx_ranges(row[se]) if se is not None else (),
    )


def _store(k: NcuKernel, name: str, unit: str, value: str, report: NcuReport) -> None:
    try:
        v = parse_number(value)
    except ValueError:
        k.texts[name] = value.strip()
        return
    if v is None:
        return
    scale, base = unit_scale(unit)
    if math.isnan(v):
        report.na[name] = report.na.get(name, 0) + 1
    k.metrics[name] = v * scale
    k.units[name] = base


def _cached(keep: Callable[[str], bool] | None) -> Callable[[str], bool]:
    """`keep` plus the device name, memoized per metric name (details pages repeat names per kernel)."""
    if keep is None:
        return lambda name: True
    return lru_cache(maxsize=None)(lambda name: name == DEVICE_NAME_METRIC or bool(keep(name)))


def _parse_details(
    header: list[str], rows: Iterable[list[str]], report: NcuReport, keep, budget: ReadBudget
) -> list[set[str]]:
    """Fill `report` from a details page; the metric names of its last two results (every name,
    kept or not), for truncation_reason: only the last two results' names are kept (all of them
    held 4.56 GB for 3 M results)."""
    report.page = "details"
    pp, se = _nvtx_columns(header)
    report.has_nvtx = pp is not None or se is not None
    i_id, i_pid = header.index("ID"), header.index("Process ID") if "Process ID" in header else None
    i_name, i_unit, i_val = (header.index(c) for c in DETAILS_COLUMNS)
    width = len(header)
    idcols = _id_columns(header)
    wanted = _cached(keep)
    by_key: dict[tuple[str, str], NcuKernel] = {}
    names: dict[tuple[str, str], set[str]] = {}
    rows_of: dict[tuple[str, str], int] = {}  # each result's rows, for budget.check_rows
    for row in rows:
        if len(row) < i_val + 1 or len(row) > width or not row[i_id].strip():
            report.program_lines += 1  # program output that happened to sit inside the table
            continue
        key = (row[i_pid] if i_pid is not None else "", row[i_id])
        k = by_key.get(key)
        if k is None:
            try:
                k = _kernel_from_row(row + [""] * (width - len(row)), idcols, pp, se)
            except NcuParseError:
                report.program_lines += 1
                continue
            budget.take_result(report.source)
            by_key[key] = k
            names[key] = set()
            if len(names) > 2:
                del names[next(iter(names))]
            report.kernels.append(k)
        rows_of[key] = rows_of.get(key, 0) + 1
        budget.check_rows(rows_of[key], row[i_id], report.source)
        name = intern(row[i_name].strip())
        if not name:  # a rule row (Rule Name/Description set, no metric)
            continue
        if key in names:
            names[key].add(name)
        if wanted(name):
            _store(k, name, row[i_unit], row[i_val], report)
    return list(names.values())[-2:]


def _parse_raw(
    header: list[str], rows: Iterable[list[str]], report: NcuReport, keep, budget: ReadBudget
) -> bool:
    """Fill `report` from a raw page; True when the units row was seen."""
    report.page = "raw"
    if "Kernel Name" not in header:
        raise NcuParseError(
            f'{report.source} has an "ID" header but neither Metric Name/Value columns (details page) '
            "nor Kernel Name (raw page): not Nsight Compute CSV output"
        )
    pp, se = _nvtx_columns(header)
    report.has_nvtx = pp is not None or se is not None
    metric_cols = [
        (i, h)
        for i, h in enumerate(header)
        if _METRIC_NAME.match(h) and (keep is None or keep(h) or h == DEVICE_NAME_METRIC)
    ]
    width = len(header)
    idcols = _id_columns(header)
    units: list[str] | None = None
    i_id = header.index("ID")
    for row in rows:
        if len(row) != width:
            report.program_lines += 1
            continue
        if units is None and not row[i_id].strip():  # the units row follows the header
            units = row
            continue
        try:
            k = _kernel_from_row(row, idcols, pp, se)
        except NcuParseError:
            report.program_lines += 1
            continue
        budget.take_result(report.source)
        for i, h in metric_cols:
            _store(k, h, units[i] if units else "", row[i], report)
        report.kernels.append(k)
    return units is not None
