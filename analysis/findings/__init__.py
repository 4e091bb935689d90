"""Findings: what bounds each configuration, how far it is from its roof, what would move it, what
it costs, and what looks wrong; every finding a record of the measured values it rests on
(docs/analysis.md, "Findings").

engine.py builds the records from an analysis (pure), records.py renders their sentences, rules.py
holds the thresholds, prices.py the price table, report.py the report section. Over the usual
package size because each rule family has its module: bound.py, moves.py, anomalies.py,
breakdown.py, cost.py.
"""

from analysis.findings import report
from analysis.findings.engine import Findings, build, series_wanted
from analysis.findings.prices import PriceTable, read_prices

__all__ = ["Findings", "PriceTable", "build", "read_prices", "report", "series_wanted"]
