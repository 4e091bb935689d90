"""Runs read straight from a SQL tracking store (sqlite, PostgreSQL, MySQL: a database URI).

Why not `mlflow.search_runs`: MLflow's SQL store builds one ORM object per tag, param and metric of
every run (about 50 per train run) and has no way to ask for fewer keys; 10,000 runs took 15 s at
load 1.1 and 27 s at load 3 on this project's 2-core machine. Here the same search runs as two
kinds of plain SELECT through MLflow's own SQLAlchemy engine and table models:

* the listing (run id, experiment, status, start and end time) of the runs a filter matches, built
  by MLflow's own filter compiler (`_get_sqlalchemy_filter_clauses`, the code `search_runs` uses),
  so a filter means exactly what it means to MLflow;
* the values of only the keys analysis reads (analysis.join.READ_KEYS) for the listed runs.

Both use MLflow internals (the compiler and the table models), read-only. `for_current()` returns
None when they are not there in the installed MLflow: the caller then uses the search API
(analysis/fetch/api.py), slower but public.
"""

from __future__ import annotations

import pandas as pd

from analysis import join
from analysis.fetch import rows

CHUNK = 1000  # run ids per IN (...) clause: under every database's limit on bound parameters
SCAN_FROM = 5 * CHUNK  # from this many runs on, a table's rows are read in one scan


class SqlReader:
    """Searches of one SqlAlchemyStore (see the module docstring)."""

    kind = "sql"

    def __init__(self, store):
        from mlflow.store.tracking.dbmodels import models
        from mlflow.store.tracking.sqlalchemy_store import _get_sqlalchemy_filter_clauses

        self.store = store
        self.m = models
        self.compile_filter = _get_sqlalchemy_filter_clauses

    @classmethod
    def for_current(cls) -> "SqlReader | None":
        """A reader for the current tracking URI when it is a database MLflow reads with its SQL
        store and this MLflow has the internals used here; else None."""
        try:
            from mlflow.store.tracking.sqlalchemy_store import SqlAlchemyStore
            from mlflow.tracking import MlflowClient

            store = MlflowClient()._tracking_client.store
            if not isinstance(store, SqlAlchemyStore):
                return None
            return cls(store)
        except (ImportError, AttributeError):
            return None

    # ---------------------------------------------------------------- listing
    def _listing(
        self,
        session,
        experiment_ids: list[str],
        filter_string: str,
        max_results: int | None = None,
        start_from: float | None = None,
    ):
        """SELECT (run_id, experiment_id, status, start_time, end_time) of the active runs matching
        `filter_string` in `experiment_ids`, latest first, at most `max_results`; only runs started
        at or after `start_from` (ms) when given."""
        import sqlalchemy as sa
        from mlflow.utils.search_utils import SearchUtils

        run = self.m.SqlRun
        parsed = SearchUtils.parse_search_filter(filter_string)
        attrs, joins, datasets = self.compile_filter(parsed, session, self.store._get_dialect())
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
        stmt = stmt.order_by(run.start_time.desc(), run.run_uuid)
        if max_results is not None:
            stmt = stmt.limit(int(max_results))
        return stmt

    # ---------------------------------------------------------------- values
    def _values(self, session, info: list[tuple]) -> pd.DataFrame:
        """The runs frame (analysis/fetch/rows.py) of the listed runs `info`.

        Few runs: their rows by id (IN lists of CHUNK ids). Many: one sequential scan per table of
        the rows with the keys analysis reads, kept when their run is listed; on sqlite at 100,000
        runs, a lookup a row (by run id or by key) costs 3 to 5 times as much CPU. The SQL holds only our own constants
        and ids read from the database, so it is rendered with literal values and run on the
        driver's cursor: SQLAlchemy's Row objects cost ~4 µs a row, 10 s at 100,000 runs."""
        import sqlalchemy as sa

        ids = [r[0] for r in info]
        columns = rows.Columns(ids)
        scan = len(ids) > SCAN_FROM
        chunks = [None] if scan else [ids[lo : lo + CHUNK] for lo in range(0, len(ids), CHUNK)]
        dialect = self.store.engine.dialect
        cursor = session.connection().connection.cursor()
        tables = (
            ("tags", self.m.SqlTag),
            ("params", self.m.SqlParam),
            ("metrics", self.m.SqlLatestMetric),
        )
        try:
            for kind, table in tables:
                # scanning: coalesce(key, '') is the key (never NULL) but no database uses the
                # key index for it, so the table is read in page order, not a lookup a row
                key = sa.func.coalesce(table.key, "") if scan else table.key
                wanted = sa.or_(
                    key.in_(join.READ_KEYS[kind]),
                    *[key.startswith(p, autoescape=True) for p in join.READ_PREFIXES[kind]],
                )
                cols = [table.run_uuid, table.key, table.value]
                if kind == "metrics":
                    cols.append(table.is_nan)  # MLflow stores NaN as value 0 with is_nan set
                for chunk in chunks if ids else []:
                    stmt = sa.select(*cols).where(wanted)
                    if chunk is not None:
                        stmt = stmt.where(table.run_uuid.in_(chunk))
                    sql = stmt.compile(dialect=dialect, compile_kwargs={"literal_binds": True})
                    cursor.execute(str(sql))
                    columns.fill(kind, cursor.fetchall())
        finally:
            cursor.close()
        return rows.frame(info, columns)

    def series(self, run_ids: list[str], key: str) -> dict[str, list[float]]:
        """Every logged value of metric `key` per run, by step then time: one query per CHUNK
        runs on the (run_uuid, key, step) index (MLflow's get_metric_history took 0.4-1 s a run
        on a 100,000-run sqlite store)."""
        import sqlalchemy as sa

        m = self.m.SqlMetric
        found: dict[str, list[tuple]] = {r: [] for r in run_ids}
        with self.store.ManagedSessionMaker() as session:
            for lo in range(0, len(run_ids), CHUNK):
                stmt = sa.select(m.run_uuid, m.step, m.timestamp, m.value, m.is_nan).where(
                    m.run_uuid.in_(run_ids[lo : lo + CHUNK]), m.key == key
                )
                for rid, step, ts, value, is_nan in session.connection().execute(stmt):
                    found[rid].append((step, ts, float("nan") if is_nan else float(value)))
        return {r: [v for *_, v in sorted(points)] for r, points in found.items()}

    # ---------------------------------------------------------------- searches
    def search(
        self, experiment_ids: list[str], filter_string: str, max_results: int | None
    ) -> pd.DataFrame:
        """Runs frame of the runs `filter_string` matches, latest first, at most `max_results`."""
        with self.store.ManagedSessionMaker() as session:
            listing = self._listing(session, experiment_ids, filter_string, max_results)
            info = [tuple(r) for r in session.connection().execute(listing).all()]
            return self._values(session, info)

    def changes(
        self, experiment_ids: list[str], filter_string: str, known: rows.Known
    ) -> tuple[pd.DataFrame, set[str], set[str]]:
        """What changed among the runs matching `filter_string` against the `known` cached runs:
        (rows of new runs and of runs whose status or end time changed, ids of cached runs that no
        longer match or exist, ids known deleted: none, the listing needs none). Runs of an
        experiment started before its `known.start_from` bound are not looked at.

        One listing of every matching run: exact for runs added, deleted, restored, ended or
        ended again, whatever the clocks (`known.since_ms` is not needed)."""
        start_from, cached = known.start_from, known.runs
        bounds = list(start_from.values())
        lowest = None if None in bounds or not bounds else min(bounds)
        state = dict(
            zip(
                cached["run_id"].tolist(),
                zip(cached["status"].tolist(), map(_ms, cached["end_time"].tolist())),
            )
        )
        with self.store.ManagedSessionMaker() as session:
            listing = self._listing(session, experiment_ids, filter_string, start_from=lowest)
            listing = listing.order_by(None)  # a set is compared: no need to sort it
            info = [
                tuple(r)
                for r in session.connection().execute(listing).all()
                if rows.within(r[1], r[3], start_from)
            ]
            touched = self._metrics_since(session, metrics_window(known))
            changed = [r for r in info if state.get(r[0]) != (r[2], _ms(r[4])) or r[0] in touched]
            gone = set(state) - {r[0] for r in info}
            return self._values(session, changed), gone, set()

    def _metrics_since(self, session, since_ms: int) -> set[str]:
        """Ids of the runs with a latest metric stamped at or after `since_ms`: a metric logged
        (or overwritten) after its run ended changes neither status nor end time, and `--cache
        auto` kept the old value. One pass over latest_metrics (a row per run and key)."""
        import sqlalchemy as sa

        lm = self.m.SqlLatestMetric
        stmt = sa.select(lm.run_uuid).where(lm.timestamp >= int(since_ms)).distinct()
        return {r[0] for r in session.connection().execute(stmt)}


METRICS_OVERLAP_MS = 15 * 60 * 1000
"""How far before the last refresh a metric's timestamp is looked at (the logging machine's clock
may lag this one's; as api.OVERLAP_MS)."""


def metrics_window(known: rows.Known) -> int:
    """The earliest metric timestamp (ms) a refresh looks at: the last refresh less the overlap."""
    return int(known.since_ms - METRICS_OVERLAP_MS)


def _ms(value) -> int | None:
    """An end time as an int, None when the run has not ended (NaN from a frame, None from SQL)."""
    if value is None or value != value:  # None or NaN (pd.isna is 40 µs a call on scalars)
        return None
    return int(value)
