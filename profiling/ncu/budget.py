"""What one `--import` may cost, bounded before and while its files are read.

A file's size on disk says little about what reading it costs: a 2 MB gzip can expand to 2 GiB of
newlines (main was still reading one after 300 s; a 64 MiB one took 253 s), a 7.9 MB gzip of a
header and 3 M rows held 4.56 GB of kernels. So every import reads its files against one
`ReadBudget`, all PATHs together: at most MAX_TEXT_BYTES of text (decompressed), MAX_LINES lines
and MAX_RESULTS results (kernel launches). A plain file larger than the text left is refused before
it is opened; a file whose results would pass the bound is refused by a dry run before it is
parsed (refuse_many_results: counted in C, where the parser builds each result in Python); any
file is refused as soon as what it held so far passes a bound: it is decompressed
READ_AHEAD_BYTES at a time, ahead of the parser, each block's bytes taken from the budget and its
line ends counted (in C, `bytes.count`), so a gzip of newlines is refused in its first block,
before the parser has seen most of its lines. (A gzip's trailer, which states its size, is not
trusted: a cut file's last bytes are anything.) Pure: reads only.
"""

from __future__ import annotations

import copy
import io
import re
from itertools import groupby
from pathlib import Path

from common.errors import BenchError

MAX_TEXT_BYTES = 1024**3
"""The most text one import reads, decompressed, all files together (1 GiB): ncu's CSV of a
profiled training step is megabytes, a `--set full` details export of ten thousand kernels a few
hundred MB."""
MAX_LINES = 2_000_000
"""The most lines one import reads, all files together: the L4 fixture's roofline capture has 785
lines for 98 kernels, so this is 250,000 such kernels, or 2,000 kernels whose details page prints a
thousand metrics each (a `--set full` kernel holds 1,131 in all:
tests/data/ncu/t4_matrix_add_1000x1000_set_full.ncu-rep)."""
MAX_RESULTS = 100_000
"""The most results (kernel launches) one import holds, all files together: a training step
launches hundreds to tens of thousands of kernels, and a capture set of one-metric files repeats
them once per file (NERSC's DeepCAM set: 12 files of 1,426 launches, 17,112 results), so 20 files
of a 5,000-launch step. Each file's results are counted before it is parsed
(refuse_many_results); one the parser builds costs about 1.3 KB and 130 us here (a file of
100,000 one-row results: 13-22 s and +133 MB RSS, load 8 on 2 cores), so this bounds what an
import that passes the count may cost."""
MAX_ROWS_PER_RESULT = 10_000
"""The most rows one result (kernel launch) of a details page holds: a `--set full` kernel prints
1,131 metrics and a few dozen rule rows. A row repeated under one result ID (a gzip of one row
copied over and over: 11 MB for 2 GiB) is refused after its first 10,000 copies, where the text
and line bounds alone let the parser read 1 GiB first (368 s here)."""
READ_AHEAD_BYTES = 4 * 1024**2
"""How far ahead of the parser a file is decompressed and its line ends counted: a file of
newlines shows more line ends in its first 4 MiB than MAX_LINES, and is refused there."""

_FIX = (
    "it is not the export of one profiled step: export only the profiled step (ncu "
    "--launch-skip/--launch-count, --metrics) or check that it is the right file"
)
_ALL = "the most one import reads (all files together)"


class ImportTooLarge(BenchError):
    """An import would read more than its ReadBudget allows (never taken for 'not ncu output')."""


class ReadBudget:
    """What is left to read of one import (text bytes, lines, results), all files together; the
    bounds are the module's, read when the budget is made."""

    def __init__(self) -> None:
        self.limits = (MAX_TEXT_BYTES, MAX_LINES, MAX_RESULTS)
        self.text_bytes, self.lines, self.results = self.limits

    def _refuse(self, source: str, what: str) -> ImportTooLarge:
        return ImportTooLarge(f"--import: {source} {what}; {_FIX}")

    def take_bytes(self, n: int, source: str) -> None:
        self.text_bytes -= n
        if self.text_bytes < 0:
            raise self._refuse(source, f"holds more than {_size(self.limits[0])} of text, {_ALL}")

    def check_line_ends(self, seen: int, left_at_start: int, source: str) -> None:
        """Refuse early: the `seen` line ends of a file, whose reading began with `left_at_start`
        lines left, are at least that many lines the parser will read."""
        if seen > left_at_start:
            raise self._refuse(source, f"holds more than {self.limits[1]:,} lines, {_ALL}")

    def take_line(self, source: str) -> None:
        self.lines -= 1
        if self.lines < 0:
            raise self._refuse(source, f"holds more than {self.limits[1]:,} lines, {_ALL}")

    def take_result(self, source: str, n: int = 1) -> None:
        self.results -= n
        if self.results < 0:
            raise self._refuse(
                source, f"holds more than {self.limits[2]:,} results (kernel launches), {_ALL}"
            )

    def check_rows(self, rows: int, result: str, source: str) -> None:
        """Refuse a details page's result `result` once it holds more than MAX_ROWS_PER_RESULT
        rows (`rows`, counted by the parser)."""
        if rows > MAX_ROWS_PER_RESULT:
            raise self._refuse(
                source,
                f"holds more than {MAX_ROWS_PER_RESULT:,} rows for result {result[:40]} (a "
                "profiled kernel prints about a thousand metrics)",
            )

    def check_size(self, path: Path) -> None:
        """Refuse a plain file larger than the text left to read, before it is opened."""
        size = path.stat().st_size
        if size > self.text_bytes:
            raise self._refuse(
                path.name,
                f"is {_size(size)}, more than the {_size(self.text_bytes)} of text left to read, "
                + _ALL,
            )


def _size(n: int) -> str:
    return f"{n / 1024**3:.3g} GiB" if n >= 1024**3 else f"{n / 1024**2:.3g} MiB"


class CountedReader(io.RawIOBase):
    """A binary stream (a file or a GzipFile) read READ_AHEAD_BYTES at a time, ahead of the
    parser: each block's bytes are taken from `budget`, and its line ends (\\n, \\r, \\r\\n)
    counted, refusing the file as soon as they outnumber the lines left (each line end is at
    least one line the parser would read)."""

    def __init__(self, raw, budget: ReadBudget, source: str):
        super().__init__()
        self.raw, self.budget, self.source = raw, budget, source
        self.line_ends = 0
        self.lines_at_start = budget.lines
        self.block = memoryview(b"")
        self.pos = 0

    def readable(self) -> bool:
        return True

    def next_block(self) -> bytes:
        """The next READ_AHEAD_BYTES of the stream (b"" at its end), taken from the budget."""
        data = self.raw.read(READ_AHEAD_BYTES)
        if data:
            self.budget.take_bytes(len(data), self.source)
            cr = data.count(b"\r")  # most files have none: \r\n is then not counted
            self.line_ends += data.count(b"\n") + (cr and cr - data.count(b"\r\n"))
            self.budget.check_line_ends(self.line_ends, self.lines_at_start, self.source)
        return data

    def readinto(self, buffer) -> int:
        if self.pos >= len(self.block):
            data = self.next_block()
            self.block, self.pos = memoryview(data), 0
            if not data:
                return 0
        n = min(len(buffer), len(self.block) - self.pos)
        buffer[:n] = self.block[self.pos : self.pos + n]
        self.pos += n
        return n

    def close(self) -> None:
        self.raw.close()
        super().close()


_HEADER = re.compile(rb'\n(?:\xef\xbb\xbf)?[ \t]*"?ID"?[ \t]*,')
"""The start of an ncu table's header line (after a line end; the first line gets one)."""
_ROW_ID = re.compile(rb'\n"?([0-9][0-9,]*)')
"""The result ID that starts a table row (ncu quotes it; the parser reads it unquoted too)."""


def refuse_many_results(raw, budget: ReadBudget, source: str) -> None:
    """A dry run of one file before it is parsed: its bytes, line ends and results counted
    against a copy of `budget` in C (decompression, `bytes.count`, one regular expression per
    block), refusing it as the parser would, but before the parser builds a result. The parser
    builds each result in Python (here about 130 microseconds and 2 KB each: a 1.2 MB gzip of
    250,001 one-row results took 33 s and 500 MB before the results bound refused it); this reads
    the same gzip in about a second. A result is a run of rows under one ID after the header (ncu
    prints a result's rows together); a row's line cut by a block's end is read with the next
    block. `raw` is read to its end or the refusal; the caller opens the file again to parse it."""
    dry = copy.copy(budget)
    reader = CountedReader(raw, dry, source)
    tail, last, started = b"\n", None, False
    while data := reader.next_block():
        text, pos = tail + data, 0
        if not started:
            head = _HEADER.search(text)
            if head is None:
                tail = text[-64:]
                continue
            started, pos = True, head.end()
        end = text.rfind(b"\n")
        ids = [k for k, _ in groupby(_ROW_ID.findall(text, pos, end))]
        if ids:
            dry.take_result(source, len(ids) - (ids[0] == last))
            last = ids[-1]
        tail = text[end : end + 64]
