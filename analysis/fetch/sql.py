"""Runs read straight from an SQL tracking store's tables (sqlite, PostgreSQL, MySQL).

Why not `mlflow.search_runs`: MLflow's SQL store builds one ORM object per tag, param and metric of
every run (about 50 per train run) and has no way to ask for fewer keys; 10,000 runs took 15 s at
load 1.1 and 27 s at load 3 on this project's 2-core machine. Here a search is plain SELECTs on
MLflow's tables (runs, tags, params, latest_metrics, metrics), written once in `Tables` over a
DB-API connection with the driver's placeholder (`?` for sqlite3, `%s` for psycopg and MySQL's):

* the listing (run id, experiment, status, start and end time) of the active runs a filter
  matches, latest first, ties by run id;
* the values of only the keys analysis reads (analysis.join.READ_KEYS) for the listed runs;
* a metric's series, and the runs with a latest metric stamped since a time (the cache's refresh).

Two readers share them; they differ in their connection and in who compiles the filter:

* `SqliteReader.for_uri`: an `sqlite:///` file opened read-only with Python's sqlite3, MLflow not
  imported (importing MLflow's SQL store, SQLAlchemy and alembic costs about 3 s of CPU here, more
  than a repeat analysis of 10,000 runs from the local cache should take in all). It compiles the
  filters analysis writes itself, a conjunction of `tags.<key> = '<value>'`, `params.<key> =
  '<value>'` and `attributes.status = '<status>'` clauses: a run matches `tags.k = 'v'` when it has
  tag k with value v, exactly as MLflow's SQL compiler has it.
* `SqlReader.for_current`: the current tracking URI's database through a raw DB-API connection from
  MLflow's own SQLAlchemy engine, filters compiled by MLflow's own compiler
  (`_get_sqlalchemy_filter_clauses`, the code `search_runs` uses), so a filter of the user's means
  exactly what it means to MLflow. These are MLflow internals, read-only: `for_current()` is None
  where the installed MLflow lacks them, and the caller uses the search API (analysis/fetch/api.py).

analysis.fetch.Source sends a filter SqliteReader does not `understand` to SqlReader, and falls back
to it for the rest of the analysis when a query fails (a future MLflow that renamed a table).
Columns are named with their table's alias (`t.key`): MySQL reserves `key` unless it is qualified.
"""

from __future__ import annotations

import contextlib
import os
import re
import sqlite3
from pathlib import Path
from urllib.parse import quote

import pandas as pd

from analysis import join
from analysis.fetch import rows
from common.server import sqlite_file

CHUNK = 500  # ids per IN (...) list: under sqlite's limit on bound parameters (999 before 3.32)
SCAN_FROM = 5000  # from this many runs on, a table's rows with the wanted keys are read in one scan
TABLES = {"experiments", "runs", "tags", "params", "latest_metrics", "metrics"}
_VALUES = (("tags", "tags"), ("params", "params"), ("metrics", "latest_metrics"))
_MARKS = {"qmark": "?", "format": "%s", "pyformat": "%s"}  # DB-API paramstyle -> placeholder
_KEY = r"[A-Za-z_][A-Za-z0-9_]*"
_CLAUSE = re.compile(rf"\s*(tags|params|attributes)\.({_KEY})\s*=\s*'([^'\\]*)'\s*")
_AND = re.compile(r"\s*AND\s*", re.IGNORECASE)

METRICS_OVERLAP_MS = 15 * 60 * 1000
"""How far before the last refresh a metric's timestamp is looked at (the logging machine's clock
may lag this one's; as api.OVERLAP_MS)."""


class Tables:
    """The SELECTs of a search on MLflow's tables; a reader supplies `_connection()` (a context
    yielding a DB-API connection), `mark` (its placeholder) and `_listing`."""

    kind = "sql"  # a listing of every matching run: search_cached's rules for a database apply
    mark = "?"

    def _connection(self):
        raise NotImplementedError

    def _listing(
        self, con, experiment_ids, filter_string, max_results=None, start_from=None, ordered=True
    ) -> list[tuple]:
        """(run_id, experiment_id, status, start_time, end_time) of the active runs matching
        `filter_string` in `experiment_ids`, latest first unless not `ordered`, at most
        `max_results`; only runs started at or after `start_from` (ms) when given."""
        raise NotImplementedError

    def _marks(self, n: int) -> str:
        return ",".join([self.mark] * n)

    @staticmethod
    def _rows(con, sql: str, args) -> list[tuple]:
        cursor = con.cursor()
        try:
            cursor.execute(sql, args)
            return cursor.fetchall()
        finally:
            cursor.close()

    # ---------------------------------------------------------------- values
    def _values(self, con, info: list[tuple]) -> pd.DataFrame:
        """The runs frame (analysis/fetch/rows.py) of the listed runs `info`.

        Few runs: their rows by id (IN lists of CHUNK ids). Many: one sequential scan per table of
        the rows with the keys analysis reads, kept when their run is listed; on sqlite at 100,000
        runs, a lookup a row (by run id or by key) costs 3 to 5 times as much CPU. Rows are read
        from the driver's cursor: SQLAlchemy's Row objects cost ~4 µs a row, 10 s at 100,000
        runs."""
        ids = [r[0] for r in info]
        columns = rows.Columns(ids)
        scan = len(ids) > SCAN_FROM
        chunks = [None] if scan else [ids[lo : lo + CHUNK] for lo in range(0, len(ids), CHUNK)]
        for kind, table in _VALUES:
            keys = list(join.READ_KEYS[kind])
            prefixes = [_like_prefix(p) for p in join.READ_PREFIXES[kind]]
            # scanning: coalesce(key, '') is the key (never NULL) but no database uses the key
            # index for it, so the table is read in page order, not a lookup a row
            key = "coalesce(t.key, '')" if scan else "t.key"
            wanted = " OR ".join(
                [f"{key} IN ({self._marks(len(keys))})"]
                + [f"{key} LIKE {self.mark} ESCAPE '/'"] * len(prefixes)
            )
            cols = "t.run_uuid, t.key, t.value" + (", t.is_nan" if kind == "metrics" else "")
            for chunk in chunks if ids else []:
                sql = f"SELECT {cols} FROM {table} t WHERE ({wanted})"
                args = [*keys, *prefixes]
                if chunk is not None:
                    sql += f" AND t.run_uuid IN ({self._marks(len(chunk))})"
                    args += chunk
                columns.fill(kind, self._rows(con, sql, args))
        return rows.frame(info, columns)

    def series(self, run_ids: list[str], key: str) -> dict[str, list[float]]:
        """Every logged value of metric `key` per run, by step then time: one query per CHUNK
        runs on the (run_uuid, key, step) index (MLflow's get_metric_history took 0.4-1 s a run
        on a 100,000-run sqlite store)."""
        found: dict[str, list[tuple]] = {r: [] for r in run_ids}
        with self._connection() as con:
            for lo in range(0, len(run_ids), CHUNK):
                chunk = list(run_ids[lo : lo + CHUNK])
                sql = (
                    "SELECT m.run_uuid, m.step, m.timestamp, m.value, m.is_nan FROM metrics m "
                    f"WHERE m.key = {self.mark} AND m.run_uuid IN ({self._marks(len(chunk))})"
                )
                for rid, step, ts, value, is_nan in self._rows(con, sql, [key, *chunk]):
                    found[rid].append((step, ts, rows.metric(value, is_nan)))
        return {r: [v for *_, v in sorted(points)] for r, points in found.items()}

    # ---------------------------------------------------------------- searches
    def search(
        self, experiment_ids: list[str], filter_string: str, max_results: int | None
    ) -> pd.DataFrame:
        """Runs frame of the runs `filter_string` matches, latest first, at most `max_results`."""
        with self._connection() as con:
            return self._values(con, self._listing(con, experiment_ids, filter_string, max_results))

    def changes(
        self, experiment_ids: list[str], filter_string: str, known: rows.Known
    ) -> tuple[pd.DataFrame, set[str], set[str]]:
        """What changed among the runs matching `filter_string` against the `known` cached runs:
        (rows of new runs, of runs whose status or end time changed and of runs with a metric
        logged since the last refresh; ids of cached runs that no longer match or exist; ids known
        deleted: none, the listing needs none). Runs of an experiment started before its
        `known.start_from` bound are not looked at.

        One listing of every matching run: exact for runs added, deleted, restored, ended or
        ended again, whatever the clocks (`known.since_ms` only bounds the metrics looked at)."""
        bounds = list(known.start_from.values())
        lowest = None if None in bounds or not bounds else min(bounds)
        cached = known.runs
        state = dict(
            zip(
                cached["run_id"].tolist(),
                zip(cached["status"].tolist(), map(_ms, cached["end_time"].tolist())),
            )
        )
        with self._connection() as con:
            listed = self._listing(
                con, experiment_ids, filter_string, start_from=lowest, ordered=False
            )
            info = [tuple(r) for r in listed if rows.within(r[1], r[3], known.start_from)]
            # a metric logged (or overwritten) after its run ended changes neither status nor end
            # time: one pass over latest_metrics (a row per run and key) finds those runs
            since = "SELECT DISTINCT lm.run_uuid FROM latest_metrics lm WHERE lm.timestamp >= "
            touched = {r[0] for r in self._rows(con, since + self.mark, [metrics_window(known)])}
            changed = [r for r in info if state.get(r[0]) != (r[2], _ms(r[4])) or r[0] in touched]
            gone = set(state) - {r[0] for r in info}
            return self._values(con, changed), gone, set()


class SqlReader(Tables):
    """A database MLflow reads with its SQL store, filters compiled by MLflow (module docstring)."""

    def __init__(self, store):
        from mlflow.store.tracking.dbmodels import models
        from mlflow.store.tracking.sqlalchemy_store import _get_sqlalchemy_filter_clauses

        self.store = store
        self.m = models
        self.compile_filter = _get_sqlalchemy_filter_clauses
        self.dialect = store.engine.dialect
        self.mark = _MARKS[self.dialect.paramstyle]  # a KeyError: for_current() says None

    @classmethod
    def for_current(cls) -> SqlReader | None:
        """A reader for the current tracking URI when it is a database MLflow reads with its SQL
        store, its driver takes `?` or `%s` and this MLflow has the internals used here; else
        None."""
        try:
            from mlflow.store.tracking.sqlalchemy_store import SqlAlchemyStore
            from mlflow.tracking import MlflowClient

            store = MlflowClient()._tracking_client.store
            if not isinstance(store, SqlAlchemyStore):
                return None
            return cls(store)
        except (ImportError, AttributeError, KeyError):
            return None

    @contextlib.contextmanager
    def _connection(self):
        con = self.store.engine.raw_connection()  # the pool's; closing it hands it back
        try:
            yield con
        finally:
            con.close()

    def _listing(
        self, con, experiment_ids, filter_string, max_results=None, start_from=None, ordered=True
    ) -> list[tuple]:
        """Tables._listing, the filter compiled by MLflow; the statement is rendered for this
        database and run on the driver's cursor."""
        import sqlalchemy as sa
        from mlflow.utils.search_utils import SearchUtils
        from sqlalchemy.orm import Session

        run = self.m.SqlRun
        parsed = SearchUtils.parse_search_filter(filter_string)
        attrs, joins, datasets = self.compile_filter(
            parsed, Session(), self.store._get_dialect()
        )  # the session only builds subqueries: it never connects
        stmt = sa.select(run.run_uuid, run.experiment_id, run.status, run.start_time, run.end_time)
        for sub in joins:
            stmt = stmt.join(sub)
        for sub in datasets:
            stmt = stmt.join(sub, run.run_uuid == sub.c.destination_id)
        stmt = stmt.distinct().where(
            run.experiment_id.in_([int(e) for e in experiment_ids]),
            run.lifecycle_stage == "active",
            *attrs,
        )
        if start_from is not None:
            stmt = stmt.where(run.start_time >= int(start_from))
        if ordered:
            stmt = stmt.order_by(run.start_time.desc(), run.run_uuid)
        if max_results is not None:
            stmt = stmt.limit(int(max_results))
        sql = stmt.compile(dialect=self.dialect, compile_kwargs={"render_postcompile": True})
        args = [sql.params[k] for k in sql.positiontup] if self.dialect.positional else sql.params
        return self._rows(con, str(sql), args)


class SqliteReader(Tables):
    """An sqlite tracking store read with sqlite3, MLflow not imported (module docstring)."""

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
        """A reader of `uri`'s database when it is an sqlite file holding MLflow's tables (and the
        URI sets no query options, which MLflow's engine reads)."""
        path = None if "?" in uri else sqlite_file(uri)
        if path is None or not os.path.isfile(path):
            return None
        try:
            return cls(path)
        except sqlite3.Error:
            return None

    def _connection(self):
        return contextlib.nullcontext(self.con)

    @staticmethod
    def understands(filter_string: str) -> bool:
        return parse_filter(filter_string or "") is not None or not (filter_string or "").strip()

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

    def _listing(
        self, con, experiment_ids, filter_string, max_results=None, start_from=None, ordered=True
    ) -> list[tuple]:
        """Tables._listing for the filters parse_filter reads."""
        clauses = parse_filter(filter_string) if (filter_string or "").strip() else []
        if clauses is None:
            raise ValueError(f"not a filter this reader compiles: {filter_string!r}")
        ids = [int(e) for e in experiment_ids]
        sql = [
            "SELECT r.run_uuid, r.experiment_id, r.status, r.start_time, r.end_time FROM runs r",
            f"WHERE r.experiment_id IN ({self._marks(len(ids))})",
            "AND r.lifecycle_stage = 'active'",
        ]
        args: list = list(ids)
        for entity, key, value in clauses:
            if entity == "attributes":
                sql.append(f"AND r.status = {self.mark}")
                args.append(value)
            else:  # entity is the table: tags or params
                sql.append(
                    f"AND EXISTS (SELECT 1 FROM {entity} x WHERE x.run_uuid = r.run_uuid "
                    f"AND x.key = {self.mark} AND x.value = {self.mark})"
                )
                args += [key, value]
        if start_from is not None:
            sql.append(f"AND r.start_time >= {self.mark}")
            args.append(int(start_from))
        if ordered:
            sql.append("ORDER BY r.start_time DESC, r.run_uuid")
        if max_results is not None:
            sql.append(f"LIMIT {self.mark}")
            args.append(int(max_results))
        return self._rows(con, " ".join(sql), args)


def parse_filter(filter_string: str) -> list[tuple[str, str, str]] | None:
    """[(entity, key, value)] of a conjunction of equality clauses SqliteReader compiles, None for
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


def metrics_window(known: rows.Known) -> int:
    """The earliest metric timestamp (ms) a refresh looks at: the last refresh less the overlap."""
    return int(known.since_ms - METRICS_OVERLAP_MS)


def _like_prefix(prefix: str) -> str:
    """A LIKE pattern for keys starting with `prefix` ('/' escapes % and _, as SQLAlchemy's
    startswith(autoescape=True) has it)."""
    return prefix.replace("/", "//").replace("%", "/%").replace("_", "/_") + "%"


def _ms(value) -> int | None:
    """An end time as an int, None when the run has not ended (NaN from a frame, None from SQL)."""
    if value is None or value != value:  # None or NaN (pd.isna is 40 µs a call on scalars)
        return None
    return int(value)
