"""Runs read from an sqlite tracking store with Python's own sqlite3 module, MLflow not imported.

Why: importing MLflow's SQL store (mlflow, SQLAlchemy, alembic and what they import) costs about
3 s of CPU on this project's 2-core machine, more than a repeat analysis of 10,000 runs from the
local cache should take in all. For an `sqlite:///` URI and the filters analysis writes itself, a
conjunction of `tags.<key> = '<value>'`, `params.<key> = '<value>'` and `attributes.status =
'<status>'` clauses, this reader answers the same searches as sql.py with plain read-only SELECTs
on MLflow's tables (experiments, runs, tags, params, latest_metrics, metrics), the same rows and
the same order: active runs of the experiments, latest start first, ties by run id; a run matches
`tags.k = 'v'` when it has tag k with value v, exactly as MLflow's SQL compiler has it.

Anything else goes to sql.py (MLflow's own filter compiler) through analysis.fetch.Source:
`understands()` is False for a filter of another form (a --filter of the user's), `for_uri()` is
None for another database or a file that lacks those tables, and a query that fails (a future
MLflow that renamed a table) makes Source fall back for the rest of the analysis.
"""

from __future__ import annotations

import os
import re
import sqlite3
from pathlib import Path
from urllib.parse import quote

import pandas as pd

from analysis import join
from analysis.fetch import rows
from analysis.fetch.sql import _ms, metrics_window

METRICS_SINCE = "SELECT DISTINCT run_uuid FROM latest_metrics WHERE timestamp >= ?"
"""Runs with a latest metric stamped since a time (sql.py's `_metrics_since`)."""

TABLES = {"experiments", "runs", "tags", "params", "latest_metrics", "metrics"}
CHUNK = 500  # ids per IN (...) list: under sqlite's limit on bound parameters (999 before 3.32)
SCAN_FROM = 5000  # from this many runs on, a table's rows with the wanted keys are read in one scan
_KEY = r"[A-Za-z_][A-Za-z0-9_]*"
_CLAUSE = re.compile(rf"\s*(tags|params|attributes)\.({_KEY})\s*=\s*'([^'\\]*)'\s*")
_AND = re.compile(r"\s*AND\s*", re.IGNORECASE)
_TABLE_OF = {"tags": "tags", "params": "params"}


def sqlite_path(uri: str) -> str | None:
    """The database file of an `sqlite:///<path>` URI (as SQLAlchemy reads it: `sqlite:////abs`
    is /abs), None for any other URI, an in-memory database or one with query options."""
    if not uri.startswith("sqlite:///") or "?" in uri:
        return None
    path = uri[len("sqlite:///") :]
    return path if path and path != ":memory:" else None


def parse_filter(filter_string: str) -> list[tuple[str, str, str]] | None:
    """[(entity, key, value)] of a conjunction of equality clauses this reader compiles, None for
    any other filter (MLflow's compiler then reads it)."""
    clauses, pos = [], 0
    text = filter_string.strip()
    while True:
        m = _CLAUSE.match(text, pos)
        if m is None:
            return None
        entity, key, value = m.groups()
        if entity == "attributes" and key != "status":
            return None
        clauses.append((entity, key, value))
        pos = m.end()
        if pos == len(text):
            return clauses
        sep = _AND.match(text, pos)
        if sep is None or sep.end() == pos:
            return None
        pos = sep.end()


class SqliteReader:
    """Searches of one sqlite tracking store (see the module docstring)."""

    kind = "sql"  # a listing of every matching run, as sql.py: the same cache rules apply

    def __init__(self, path: str):
        self.path = path
        target = f"file:{quote(str(Path(path).resolve()))}?mode=ro"
        self.con = sqlite3.connect(target, uri=True, check_same_thread=False)
        found = {r[0] for r in self.con.execute("SELECT name FROM sqlite_master")}
        if not TABLES <= found:
            self.con.close()
            raise sqlite3.DatabaseError(f"not an MLflow store: lacks {sorted(TABLES - found)}")

    @classmethod
    def for_uri(cls, uri: str) -> SqliteReader | None:
        """A reader of `uri`'s database when it is an sqlite file holding MLflow's tables."""
        path = sqlite_path(uri)
        if path is None or not os.path.isfile(path):
            return None
        try:
            return cls(path)
        except sqlite3.Error:
            return None

    @staticmethod
    def understands(filter_string: str) -> bool:
        return parse_filter(filter_string or "") is not None or not (filter_string or "").strip()

    # ---------------------------------------------------------------- experiments
    def lookup_experiments(self, names: list[str]) -> list[str] | None:
        """IDs of the named experiments, deleted ones included as MLflow's get_experiment_by_name
        has them (every active experiment when `names` is empty); None when a name is missing
        (MLflow then says which, and which exist) or the query fails."""
        try:
            if not names:
                q = "SELECT experiment_id FROM experiments WHERE lifecycle_stage = 'active'"
                return [str(r[0]) for r in self.con.execute(q)]
            ids = []
            for name in names:
                row = self.con.execute(
                    "SELECT experiment_id FROM experiments WHERE name = ?", (name,)
                ).fetchone()
                if row is None:
                    return None
                ids.append(str(row[0]))
            return ids
        except sqlite3.Error:
            return None

    # ---------------------------------------------------------------- listing
    def _listing(
        self,
        experiment_ids: list[str],
        filter_string: str,
        max_results: int | None = None,
        start_from: float | None = None,
        ordered: bool = True,
    ) -> list[tuple]:
        """(run_id, experiment_id, status, start_time, end_time) of the active runs matching
        `filter_string` in `experiment_ids`, latest first, at most `max_results`; only runs
        started at or after `start_from` (ms) when given."""
        clauses = parse_filter(filter_string) if (filter_string or "").strip() else []
        if clauses is None:
            raise ValueError(f"not a filter this reader compiles: {filter_string!r}")
        ids = [int(e) for e in experiment_ids]
        sql = [
            "SELECT r.run_uuid, r.experiment_id, r.status, r.start_time, r.end_time FROM runs r",
            f"WHERE r.experiment_id IN ({','.join('?' * len(ids))})",
            "AND r.lifecycle_stage = 'active'",
        ]
        args: list = list(ids)
        for entity, key, value in clauses:
            if entity == "attributes":
                sql.append("AND r.status = ?")
                args.append(value)
            else:
                sql.append(
                    f"AND EXISTS (SELECT 1 FROM {_TABLE_OF[entity]} x WHERE "
                    "x.run_uuid = r.run_uuid AND x.key = ? AND x.value = ?)"
                )
                args += [key, value]
        if start_from is not None:
            sql.append("AND r.start_time >= ?")
            args.append(int(start_from))
        if ordered:
            sql.append("ORDER BY r.start_time DESC, r.run_uuid")
        if max_results is not None:
            sql.append("LIMIT ?")
            args.append(int(max_results))
        return [tuple(r) for r in self.con.execute(" ".join(sql), args)]

    # ---------------------------------------------------------------- values
    def _values(self, info: list[tuple]) -> pd.DataFrame:
        """The runs frame (analysis/fetch/rows.py) of the listed runs `info`: by id in IN lists
        for few runs, else one scan per table of the rows with the keys analysis reads."""
        ids = [r[0] for r in info]
        columns = rows.Columns(ids)
        scan = len(ids) > SCAN_FROM
        chunks = [None] if scan else [ids[lo : lo + CHUNK] for lo in range(0, len(ids), CHUNK)]
        for kind, table in (("tags", "tags"), ("params", "params"), ("metrics", "latest_metrics")):
            keys = list(join.READ_KEYS[kind])
            prefixes = [_like_prefix(p) for p in join.READ_PREFIXES[kind]]
            # scanning: coalesce(key, '') is the key, but no index serves it, so the table is read
            # in page order rather than looked up a row at a time (3 to 5 times the CPU; sql.py)
            key = "coalesce(key, '')" if scan else "key"
            wanted = " OR ".join(
                [f"{key} IN ({','.join('?' * len(keys))})"]
                + [f"{key} LIKE ? ESCAPE '/'"] * len(prefixes)
            )
            cols = "run_uuid, key, value" + (", is_nan" if kind == "metrics" else "")
            for chunk in chunks if ids else []:
                sql = f"SELECT {cols} FROM {table} WHERE ({wanted})"
                args = [*keys, *prefixes]
                if chunk is not None:
                    sql += f" AND run_uuid IN ({','.join('?' * len(chunk))})"
                    args += chunk
                columns.fill(kind, self.con.execute(sql, args).fetchall())
        return rows.frame(info, columns)

    def series(self, run_ids: list[str], key: str) -> dict[str, list[float]]:
        """Every logged value of metric `key` per run, by step then time (as sql.py)."""
        found: dict[str, list[tuple]] = {r: [] for r in run_ids}
        for lo in range(0, len(run_ids), CHUNK):
            chunk = list(run_ids[lo : lo + CHUNK])
            sql = (
                "SELECT run_uuid, step, timestamp, value, is_nan FROM metrics WHERE key = ? "
                f"AND run_uuid IN ({','.join('?' * len(chunk))})"
            )
            for rid, step, ts, value, is_nan in self.con.execute(sql, [key, *chunk]):
                found[rid].append((step, ts, float("nan") if is_nan else float(value)))
        return {r: [v for *_, v in sorted(points)] for r, points in found.items()}

    # ---------------------------------------------------------------- searches
    def search(
        self, experiment_ids: list[str], filter_string: str, max_results: int | None
    ) -> pd.DataFrame:
        """Runs frame of the runs `filter_string` matches, latest first, at most `max_results`."""
        return self._values(self._listing(experiment_ids, filter_string, max_results))

    def changes(
        self, experiment_ids: list[str], filter_string: str, known: rows.Known
    ) -> tuple[pd.DataFrame, set[str], set[str]]:
        """What changed among the matching runs against the `known` cached ones, as sql.py's
        `changes`: (rows of new runs and of runs whose status or end time changed, ids of cached
        runs that no longer match or exist, no ids known deleted)."""
        bounds = list(known.start_from.values())
        lowest = None if None in bounds or not bounds else min(bounds)
        cached = known.runs
        state = dict(
            zip(
                cached["run_id"].tolist(),
                zip(cached["status"].tolist(), map(_ms, cached["end_time"].tolist())),
            )
        )
        listed = self._listing(experiment_ids, filter_string, start_from=lowest, ordered=False)
        info = [r for r in listed if rows.within(r[1], r[3], known.start_from)]
        touched = {r[0] for r in self.con.execute(METRICS_SINCE, (metrics_window(known),))}
        changed = [r for r in info if state.get(r[0]) != (r[2], _ms(r[4])) or r[0] in touched]
        gone = set(state) - {r[0] for r in info}
        return self._values(changed), gone, set()


def _like_prefix(prefix: str) -> str:
    """A LIKE pattern for keys starting with `prefix` ('/' escapes % and _, as SQLAlchemy's
    startswith(autoescape=True) has it)."""
    return prefix.replace("/", "//").replace("%", "/%").replace("_", "/_") + "%"
