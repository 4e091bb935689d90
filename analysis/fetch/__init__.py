"""The part of analysis that reads MLflow: runs and metric series from MLFLOW_TRACKING_URI.

`Source` reads runs with one of three readers, each returning only the keys analysis reads
(analysis/fetch/rows.py):

* sql.py     a database's tables read with plain SELECTs over a DB-API connection (MLflow builds
             an ORM object per tag, param and metric): SqliteReader for an sqlite file and the
             filters analysis writes itself, with Python's sqlite3 and MLflow not imported
             (importing its SQL store costs ~3 s of CPU here); SqlReader for any database MLflow
             reads (sqlite, PostgreSQL, MySQL) and any filter, through MLflow's own engine and
             filter compiler;
* api.py     anything else (an `mlflow server`): MLflow's search API, pages requested in parallel.

and keeps what it read in a local cache (segments.py: the files), brought up to date on every
analysis (search_cached, below: what to fetch): see docs/analysis.md, "Fleet scale". Metric series (the readers' `series`) and the
complexity artifacts are read uncached, for the few runs that need them.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path

import pandas as pd

from analysis.fetch import rows, segments
from analysis.fetch.sql import SqliteReader
from common import console, schema
from common.errors import BenchError, UsageError, one_line
from common.fmt import short_id
from common.server import (
    check_reachable,
    display_uri,
    sqlite_file,
    store_problem,
    tracking_uri,
)


@dataclass
class Query:
    """Which runs to analyse."""

    experiments: list[str] = field(default_factory=list)
    """experiment names; empty = every experiment on the server."""
    filter: str = ""
    """MLflow search filter applied to the train runs (e.g. "params.model = 'resnet18'")."""
    env_labels: list[str] = field(default_factory=list)
    """keep train runs with these env_label tags; empty = all."""
    max_runs: int = 10000
    """at most this many train runs (the latest first)."""

    def __post_init__(self) -> None:
        if int(self.max_runs) <= 0:
            raise ValueError(f"max_runs must be a positive integer, got {self.max_runs}")
        self.max_runs = int(self.max_runs)
        self.filter = (self.filter or "").strip()
        self.experiments = [e for e in self.experiments if e]
        self.env_labels = [e for e in self.env_labels if e]

    def describe(self) -> str:
        exps = ", ".join(self.experiments) if self.experiments else "all experiments"
        parts = [exps]
        if self.filter:
            parts.append(f'filter "{self.filter}"')
        if self.env_labels:
            parts.append(f"env label(s) {', '.join(self.env_labels)}")
        return "; ".join(parts)


# ------------------------------------------------------------------------ the local cache
CACHE_MODES = ("auto", "refresh", "off")
"""--cache: "auto" uses and updates the cache, "refresh" forgets it first (segments.clear, by
Source) and fills it anew, "off" searches without it."""


@dataclass
class CacheStats:
    """What the cached searches of one analysis did."""

    from_cache: int = 0
    fetched: int = 0
    filled: int = 0
    """segments filled by a full search."""
    refreshed: int = 0
    """segments brought up to date incrementally."""
    oldest_fill_ms: int | None = None
    unsaved: str = ""
    """why a segment could not be written (the analysis goes on without keeping it)."""

    def saw_fill(self, filled_ms: int) -> None:
        if self.oldest_fill_ms is None or filled_ms < self.oldest_fill_ms:
            self.oldest_fill_ms = filled_ms


def _save(seg: segments.Segment, stats: CacheStats, runs_changed: bool = True) -> None:
    try:
        segments.save(seg, runs_changed)
    except OSError as exc:  # a read-only or full disk: analyse anyway, say so in the note
        stats.unsaved = f"{type(exc).__name__}: {exc}"


def _now_ms() -> int:
    return int(time.time() * 1000)


def search_cached(
    reader,
    uri: str,
    experiment_ids: list[str],
    filter_string: str,
    cap: int | None,
    mode: str,
    stats: CacheStats,
) -> pd.DataFrame:
    """What `reader.search` would return for the same arguments, answered from the local cache
    brought up to date first: the runs `filter_string` matches in the experiments, latest first,
    at most `cap`. With mode "auto" each experiment's segment for that filter is

    * filled by a full search the first time (or when it cannot serve `cap`, or analysis now reads
      other keys), capped at `cap` per experiment: the latest `cap` of a union of experiments are
      among the latest `cap` of each;
    * else refreshed: `reader.changes` reports the runs that are new or changed since the segment's
      last refresh and those that are gone, and only those are fetched. analysis/fetch/sql.py lists
      every matching run (exact, cheap on a database); analysis/fetch/api.py asks the server for
      runs started or ended since the last refresh, runs that had not ended, and deleted runs.

    Mode "off" searches without the cache. `stats` counts runs taken from the cache and fetched,
    for the report's note."""
    if mode == "off":
        out = reader.search(experiment_ids, filter_string, cap)
        stats.fetched += len(out)
        return out
    stored = {e: segments.load(uri, e, filter_string) for e in experiment_ids}
    usable = {e: s for e, s in stored.items() if s is not None and s.serves(cap)}
    parts = []
    if usable:
        parts += _refresh(reader, list(usable.values()), filter_string, cap, stats)
    for e in experiment_ids:
        if e in usable and usable[e].serves(cap):
            continue
        now = _now_ms()  # before the search: a run that ends during it is seen next time
        runs = reader.search([e], filter_string, cap)
        complete = cap is None or len(runs) < cap
        seg = segments.Segment(
            uri,
            e,
            filter_string,
            runs,
            cap,
            complete,
            None if complete else float(runs["start_time"].min()),
            now,
            now,
        )
        _save(seg, stats)
        stats.fetched += len(runs)
        stats.filled += 1
        stats.saw_fill(now)
        parts.append(runs)
    parts = [p for p in parts if not p.empty]
    out = rows.order(pd.concat(parts, ignore_index=True)) if parts else rows.empty()
    return out if cap is None else out.head(cap).reset_index(drop=True)


def _refresh(reader, segs: list, filter_string: str, cap, stats: CacheStats) -> list[pd.DataFrame]:
    """Bring `segs` (one filter, several experiments) up to date with one `reader.changes` call;
    returns the runs of those that still serve `cap`. A capped segment left with fewer than `cap`
    runs (some were deleted) does not: the caller fills it again."""
    now = _now_ms()
    cached = pd.concat([s.runs for s in segs], ignore_index=True)
    known = rows.Known(
        cached[["run_id", "status", "start_time", "end_time"]],
        min(s.refreshed_ms for s in segs),
        {str(s.experiment_id): None if s.complete else s.start_from for s in segs},
        {i for s in segs for i in s.deleted},
    )
    fresh, gone, deleted = reader.changes([s.experiment_id for s in segs], filter_string, known)
    out = []
    for s in segs:
        mine = fresh[fresh["experiment_id"] == str(s.experiment_id)]
        known = set(s.runs["run_id"]) | set(s.deleted)
        before = len(s.runs)
        kept = s.runs[~s.runs["run_id"].isin(gone | set(mine["run_id"]))]
        s.runs = rows.order(pd.concat([kept, mine], ignore_index=True) if len(mine) else kept)
        s.deleted = sorted(known & deleted)
        s.refreshed_ms = now
        if not s.serves(cap):
            continue  # filled again by the caller
        _save(s, stats, runs_changed=len(kept) < before or len(mine) > 0)
        stats.from_cache += len(kept)
        stats.fetched += len(mine)
        stats.refreshed += 1
        stats.saw_fill(s.filled_ms)
        out.append(s.runs)
    return out


FETCH_JOBS = 4  # requests in flight at once against an HTTP server


class Source:
    """The tracking server as analysis reads it: a reader, the cache mode ("auto": use and update
    the cache, "refresh": forget it and fill it anew, "off": no cache) and what was read."""

    def __init__(self, cache_mode: str = "auto", jobs: int = FETCH_JOBS):
        if cache_mode not in CACHE_MODES:
            raise UsageError(f"--cache must be one of {', '.join(CACHE_MODES)}, got {cache_mode!r}")
        self.uri = tracking_uri()
        self.mode = cache_mode
        self.jobs = jobs
        self.lite = SqliteReader.for_uri(self.uri)
        """SqliteReader (an sqlite store; MLflow not imported) for the filters it compiles."""
        self._full = None
        self.stats = CacheStats()
        if cache_mode == "refresh":
            segments.clear(self.uri)

    @property
    def reader(self):
        """The reader of searches with analysis's own filters: SqliteReader where it can, else
        full_reader()."""
        return self.lite or self.full_reader()

    def full_reader(self):
        """SqlReader (MLflow's engine and filter compiler) for a database, else api.py's."""
        if self._full is None:
            from analysis.fetch.api import ApiReader
            from analysis.fetch.sql import SqlReader

            client()  # a store MLflow cannot open: one line
            self._full = SqlReader.for_current() or ApiReader(self.jobs)
        return self._full

    def search(self, experiment_ids: list[str], filter_string: str, cap: int) -> pd.DataFrame:
        """The runs `filter_string` matches, latest first, at most `cap` (rows.py layout)."""
        lite = self.lite is not None and self.lite.understands(filter_string)
        reader = self.lite if lite else self.full_reader()
        try:
            return search_cached(
                reader, self.uri, experiment_ids, filter_string, cap, self.mode, self.stats
            )
        except BenchError:
            raise
        except Exception as exc:  # noqa: BLE001 - connection errors, server-side rejections
            msg = one_line(exc)
            if lite:  # MLflow's tables changed under SqliteReader: SqlReader reads them
                console.warn(
                    f"reading {self.uri} with sqlite3 failed ({msg}); using MLflow's store"
                )
                self.lite = None
                return self.search(experiment_ids, filter_string, cap)
            if reader.kind == "sql" and not hasattr(exc, "error_code"):
                # MLflow's internals changed under the SQL reader: MLflow's own search still works
                from analysis.fetch.api import ApiReader

                console.warn(f"reading {self.uri} directly failed ({msg}); using MLflow's search")
                self._full = ApiReader(self.jobs)
                return self.search(experiment_ids, filter_string, cap)
            if getattr(exc, "error_code", "") == "INVALID_PARAMETER_VALUE":
                raise UsageError(f'MLflow rejected the search "{filter_string}": {msg}') from exc
            raise BenchError(f"cannot search runs on {self.uri}: {msg}") from exc

    def note(self) -> str | None:
        """What the cache did, and what it cannot see (for the report)."""
        from analysis.fetch.api import OVERLAP_MS

        s = self.stats
        if self.mode == "off":
            return None
        filled = (
            datetime.fromtimestamp(s.oldest_fill_ms / 1000).strftime("%Y-%m-%d %H:%M")
            if s.oldest_fill_ms
            else "now"
        )
        blind = (
            "a tag edited on a run after it ended is not"
            if self.reader.kind == "sql"
            else "a tag edited on a run after it ended is not, nor a run purged by `mlflow gc` "
            "before an analysis saw it deleted, nor one stamped by a clock more than "
            f"{OVERLAP_MS // 60000} min behind this machine's"
        )
        unsaved = f" (not written: {s.unsaved})" if s.unsaved else ""
        return (
            f"runs read through the local cache {segments.server_folder(self.uri)}{unsaved} "
            f"(filled {filled}): "
            f"{s.from_cache} from the cache, {s.fetched} fetched now. Runs started, ended, deleted "
            f"or restored since{' (or with metrics logged since)' if self.reader.kind == 'sql' else ''} "
            f"are picked up on every analysis; {blind}: `--cache refresh` reads "
            "everything again"
        )


def check_filter(filter_string: str) -> None:
    """Parse `filter_string` with MLflow's own parser (locally) so a typo is a UsageError up front."""
    if not filter_string:
        return
    from mlflow.exceptions import MlflowException
    from mlflow.utils.search_utils import SearchUtils

    try:
        SearchUtils.parse_search_filter(filter_string)
    except MlflowException as exc:
        raise UsageError(f'MLflow rejected the filter "{filter_string}": {exc.message}') from exc


def train_filters(query: Query) -> list[tuple[str | None, str]]:
    """(env label or None, the MLflow filter of its train runs), one per --env-label."""
    base = [f"tags.{schema.TAG_RUN_KIND} = 'train'"] + ([query.filter] if query.filter else [])
    return [
        (
            label,
            " AND ".join(
                base
                + (
                    [f"tags.{schema.TAG_ENV_LABEL} = {schema.filter_literal(label, 'env label')}"]
                    if label
                    else []
                )
            ),
        )
        for label in query.env_labels or [None]
    ]


def any_train_run(query: Query) -> bool:
    """Whether any train run matches `query` (one search of at most one run per env label): asked
    before an analysis run is created, so that a label or filter matching nothing leaves no FAILED
    analysis run behind."""
    ids = experiment_ids(query.experiments)
    mlflow_client = client()
    for _, train_filter in train_filters(query):
        for lo in range(0, len(ids), 100):
            if mlflow_client.search_runs(ids[lo : lo + 100], train_filter, max_results=1):
                return True
    return False


def client():
    """An MlflowClient of the tracking store. A store MLflow cannot open (a folder store, which
    MLflow 3 keeps in maintenance mode; a damaged sqlite file) is a BenchError of one line saying
    what to do (common.server.store_problem), as train, import and peaks say it."""
    from mlflow.tracking import MlflowClient

    try:
        return MlflowClient()
    except Exception as exc:  # noqa: BLE001 - whatever the store raised on opening
        raise BenchError(f"cannot use {store_problem(exc)}") from exc


def check_store() -> None:
    """Before an analysis run exists: a tracking URI that can never work (common.server.check_uri),
    a sqlite file that does not exist (MLflow would create an empty store there, and the analysis
    run would be its only run) and a server that does not answer (the run would be kept offline
    for nothing) each end the command in one line."""
    path = sqlite_file(tracking_uri())
    if path is not None and not Path(path).exists():
        raise UsageError(
            f"no tracking store at {path} ({display_uri()}): analysis reads runs and makes no "
            "store; point MLFLOW_TRACKING_URI at the store the runs were logged to"
        )
    _check_answers()
    check_store_opens()  # a store MLflow refuses (a folder store, a damaged sqlite file)


def _check_answers() -> None:
    """common.server.check_reachable, a server that does not answer a BenchError of one line."""
    try:
        check_reachable()
    except ConnectionError as exc:
        raise BenchError(
            f"{exc}: start it, or point MLFLOW_TRACKING_URI at a store that works"
        ) from None


def check_store_opens() -> None:
    """client()'s line, asked before analysis writes anything; an sqlite store SqliteReader reads
    is not opened with MLflow (which is then not imported)."""
    if SqliteReader.for_uri(tracking_uri()) is None:
        client()


def experiment_ids(names: list[str]) -> list[str]:
    """IDs of the named experiments (all active experiments when `names` is empty); a name that
    does not exist is a UsageError."""
    lite = SqliteReader.for_uri(tracking_uri())
    ids = lite.lookup_experiments(names) if lite is not None else None
    if ids is not None:
        return ids
    _check_answers()  # a server that is down: seconds, not MLflow's minutes of retries
    mlflow_client = client()
    ids, missing = [], []
    try:
        if not names:
            import mlflow
            from mlflow.entities import ViewType

            return [e.experiment_id for e in mlflow.search_experiments(ViewType.ACTIVE_ONLY)]
        for name in names:
            exp = mlflow_client.get_experiment_by_name(name)
            (ids.append(exp.experiment_id) if exp is not None else missing.append(name))
        known = (
            [e.name for e in mlflow_client.search_experiments(max_results=20)] if missing else []
        )
    except Exception as exc:  # noqa: BLE001 - unreachable server, bad URI
        raise BenchError(f"cannot read experiments from {tracking_uri()}: {one_line(exc)}") from exc
    if missing:
        raise UsageError(
            f"no experiment named {', '.join(map(repr, missing))} on this tracking server; "
            f"existing: {', '.join(known) or 'none'}"
        )
    return ids


def fetch_runs(query: Query, source: Source | None = None) -> tuple[pd.DataFrame, list[str]]:
    """All train runs matching `query` (any status) plus the profile and peaks runs of the same
    experiments (not filtered: they join by config_key and device), each search capped at
    `query.max_runs` (a note when a cap is hit). Returns (runs, notes)."""
    source = source or Source()
    notes: list[str] = []
    check_filter(query.filter)
    ids = experiment_ids(query.experiments)
    kind = f"tags.{schema.TAG_RUN_KIND}"
    frames = []
    remaining = query.max_runs
    for label, train_filter in train_filters(query):
        df = source.search(ids, train_filter, query.max_runs).head(remaining)
        console.info(f"fetched {len(df)} train run(s)" + (f" for env {label}" if label else ""))
        frames.append(df)
        remaining -= len(df)
        if remaining <= 0:
            notes.append(
                f"stopped at --max-runs {query.max_runs} train runs (latest first); raise it to see older runs"
            )
            break
    for other in ("profile", "peaks"):
        df = source.search(ids, f"{kind} = '{other}'", query.max_runs)
        console.info(f"fetched {len(df)} {other} run(s)")
        if len(df) >= query.max_runs:
            notes.append(
                f"stopped at --max-runs {query.max_runs} {other} runs (latest first): older {other} runs "
                "were not read; raise --max-runs to use them"
            )
        frames.append(df)
    frames = [f for f in frames if not f.empty]
    runs = pd.concat(frames, ignore_index=True, sort=False) if frames else rows.empty()
    if not runs.empty:
        runs = runs.drop_duplicates("run_id").reset_index(drop=True)
    return runs, notes


COMPLEXITY_CSV = (
    "complexity/models.csv"  # the stable per-model table of a `complexity` run (docs/complexity.md)
)


def fetch_complexity(query: Query, source: Source | None = None) -> tuple[list[dict], list[str]]:
    """The `complexity/models.csv` artifact of the latest FINISHED `complexity` run per env_label in
    the query's experiments (and env labels). One search, usually empty; a download per environment
    that has such a run. Returns ([{run_id, env_label, device_name, device_memory_source, csv}], notes)."""
    source = source or Source()
    ids = experiment_ids(query.experiments)
    kind = f"tags.{schema.TAG_RUN_KIND}"
    df = source.search(
        ids, f"{kind} = 'complexity' AND attributes.status = 'FINISHED'", query.max_runs
    )
    if df.empty:
        return [], []
    env_col, dev_col = f"tags.{schema.TAG_ENV_LABEL}", f"tags.{schema.TAG_DEVICE_NAME}"
    for c in (env_col, dev_col, "params.device_memory_source"):
        if c not in df:
            df[c] = ""
    df = df.fillna({env_col: "", dev_col: "", "params.device_memory_source": ""})
    if query.env_labels:
        df = df[df[env_col].isin(query.env_labels)]
    latest = df.groupby(env_col, sort=True).head(1)  # search_runs returns the latest first
    out, notes = [], []
    for r in latest.to_dict("records"):
        try:
            text = _download_text(r["run_id"], COMPLEXITY_CSV)
        except Exception as exc:  # noqa: BLE001 - missing artifact, server-side error
            notes.append(
                f"complexity run {short_id(r['run_id'])} ({r[env_col] or 'no env_label'}) has no readable "
                f"{COMPLEXITY_CSV} ({one_line(exc)[:160]}): not in the report"
            )
            continue
        out.append(
            {
                "run_id": r["run_id"],
                "env_label": r[env_col],
                "device_name": r[dev_col],
                "device_memory_source": r["params.device_memory_source"],
                "csv": text,
            }
        )
    console.info(f"fetched {len(out)} complexity table(s)")
    return out, notes


def _download_text(run_id: str, path: str) -> str:
    """One small artifact as text (without MLflow's progress bar on stderr)."""
    from common.runs import artifact_text

    return artifact_text(run_id, path)


def fetch_series(
    run_ids: list[str], key: str = schema.STEP_SERIES, source: Source | None = None
) -> dict[str, list[float]]:
    """The per-step values of metric `key` for each run, ordered by step (then time); for the step
    times, a run logged before they were named schema.STEP_SERIES gets its `step_time_s`."""
    source = source or Source("off")
    try:
        out = source.reader.series(list(run_ids), key)
        older = [r for r in run_ids if not out.get(r)] if key == schema.STEP_SERIES else []
        if older:
            out.update(source.reader.series(older, schema.OLD_STEP_SERIES))
        return out
    except Exception as exc:  # noqa: BLE001 - connection errors, server-side rejections
        raise BenchError(f"cannot read metric {key} on {source.uri}: {one_line(exc)}") from exc
