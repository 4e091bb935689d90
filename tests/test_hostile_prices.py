"""Issue 32, unbounded input through --prices: a device, a huge field, an absurd price, `1_000`,
a duplicate row and a 1 MB file each end in one line (or work), never a traceback or a hang."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from analysis.findings import prices
from common.errors import UsageError

HEAD = "match,usd_per_hour\n"


@pytest.mark.parametrize(
    "body, message",
    [
        ("box,1e308\n", "line 2: usd_per_hour '1e308' is above 100,000 US dollars per device-hour"),
        ("box,1_000\n", "line 2: usd_per_hour '1_000' is not a positive number"),
        ("box,1\nA100,2\nBOX,3\n", "line 4: 'BOX' is priced on line 2 already: keep one row"),
        ("box," + "9" * 200_000 + "\n", "line 2: not a price row ("),
    ],
)
def test_a_hostile_price_row_is_one_line(body, message):
    """main: 1e308 and `1_000` (read as 1000) passed, a duplicate row silently lost to the first,
    a 200 kB field raised `_csv.Error: field larger than field limit (131072)`."""
    with pytest.raises(UsageError) as err:
        prices.parse_prices(HEAD + body, "p.csv")
    assert message in str(err.value) and "\n" not in str(err.value)
    assert len(str(err.value)) < 300


def test_a_price_of_1_5e3_is_still_a_price():
    (row,) = prices.parse_prices(HEAD + "box,1.5e3\n", "p.csv")
    assert row.usd_per_hour == 1500.0


def test_dev_zero_and_a_fifo_are_refused_at_once(tmp_path):
    """main: `--prices /dev/zero` grew to 3.5 GB in 2.7 s; a FIFO waited for a writer forever.
    In a subprocess with a timeout so that a regression fails instead of hanging the suite."""
    fifo = tmp_path / "prices.csv"
    os.mkfifo(fifo)
    code = (
        "import sys\nfrom analysis.findings import prices\nfrom common.errors import UsageError\n"
        "for p in sys.argv[1:]:\n    try:\n        prices.read_prices(p)\n"
        "    except UsageError as e:\n        print(e)\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", code, "/dev/zero", str(fifo), str(tmp_path)],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.stderr == "" and done.stdout.splitlines() == [
        "--prices /dev/zero: is a device, pipe or socket, not a file (give a CSV file)",
        f"--prices {fifo}: is a device, pipe or socket, not a file (give a CSV file)",
        f"--prices {tmp_path}: is a folder, not a file (give a CSV file)",
    ]


def test_a_file_over_the_bound_is_refused(tmp_path, monkeypatch):
    monkeypatch.setattr(prices, "MAX_PRICES_BYTES", 1000)
    big = tmp_path / "big.csv"
    big.write_text(HEAD + "".join(f"dev{i},1\n" for i in range(200)))
    with pytest.raises(UsageError, match="larger than"):
        prices.read_prices(str(big))


def test_each_row_pattern_is_compiled_once_however_many_lookups():
    """main compiled a regex per row per lookup: one point's lookup took 15.5 s on a 1 MB file
    (62,499 rows). The cache is unbounded, so 6,249 rows hold the rule as well (at 62,499 this test
    took 41 s of CPU by itself)."""
    rows = 6_249
    text = HEAD + "".join(f"GPU model {i},1.0\n" for i in range(rows))
    table = prices.PriceTable(prices.parse_prices(text, "p.csv"))
    prices._device_pattern.cache_clear()
    for _ in range(3):
        assert table.lookup("env", f"GPU model {rows - 1}").usd_per_hour == 1.0
    info = prices._device_pattern.cache_info()
    assert info.misses <= rows + len(prices.DEFAULT_PRICES) and info.hits >= 2 * rows
