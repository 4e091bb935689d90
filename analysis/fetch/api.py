"""Runs read through MLflow's public search API: any tracking server (http://, https://, databricks)
and, as a fallback, any store analysis/fetch/sql.py cannot read.

MLflow's search API returns whole runs (every tag, param and metric; REST has no field selection),
so the keys analysis does not read are dropped here, as they arrive, before anything is kept. On an
HTTP server the response's JSON is read directly (through MLflow's own `http_request`, so its
authentication, TLS and retry settings apply): MlflowClient would first turn it into protobuf
messages and Run objects: 3.3 s of CPU for 2,000 runs here, against 0.5 to 0.9 s this way.

Pages in parallel: the server hands out a page token after each page. When the first page's token
is the one MLflow's own stores make for "offset N" (`SearchUtils.create_page_token`, checked
against the token the server sent, not assumed), the remaining pages are requested `jobs` at a time
with the tokens for their offsets; any other token means paging one after the other.
"""

from __future__ import annotations

import base64
from concurrent.futures import ThreadPoolExecutor

import pandas as pd

from analysis.fetch import rows

PAGE = 1000  # runs per request (MLflow's own default page size)
CHUNK = 100  # run ids per "attributes.run_id IN (...)" filter
# How far before the last refresh the windows of `changes` reach back: runs stamped by a clock
# that lags ours by more than this are missed by an incremental refresh (docs/analysis.md).
OVERLAP_MS = 15 * 60 * 1000


def both(a: str, b: str) -> str:
    """Two MLflow filters joined with AND (its grammar has no OR)."""
    return f"{a} AND {b}" if a and b else a or b


def id_filter(ids: list[str]) -> str:
    return "attributes.run_id IN (" + ", ".join(f"'{i}'" for i in ids) + ")"


class ApiReader:
    """Searches through MLflow's search API (see the module docstring)."""

    kind = "api"

    def __init__(self, jobs: int = 4, page: int = PAGE):
        from mlflow.tracking import MlflowClient

        self.client = MlflowClient()
        store = getattr(getattr(self.client, "_tracking_client", None), "store", None)
        self.host_creds = getattr(store, "get_host_creds", None)  # a RestStore's, else None
        self.jobs = max(1, int(jobs))
        self.page = int(page)
        self.parallel_pages = 0  # pages fetched by offset token, for the bench and the tests

    # ---------------------------------------------------------------- paging
    def _request(self, ids, filter_string, deleted, n, token) -> tuple[list[tuple], str | None]:
        """One page: ([(info, {column: value})], next page token)."""
        if self.host_creds is None:
            from mlflow.entities import ViewType

            view = ViewType.DELETED_ONLY if deleted else ViewType.ACTIVE_ONLY
            page = self.client.search_runs(ids, filter_string, view, n, None, token)
            return [_entity_record(r) for r in page], page.token
        from mlflow.utils.rest_utils import http_request, verify_rest_response

        endpoint = "/api/2.0/mlflow/runs/search"
        body = {
            "experiment_ids": list(ids),
            "filter": filter_string,
            "run_view_type": "DELETED_ONLY" if deleted else "ACTIVE_ONLY",
            "max_results": n,
        }
        if token:
            body["page_token"] = token
        response = http_request(self.host_creds(), endpoint, "POST", json=body)
        if response.status_code != 200:
            verify_rest_response(response, endpoint)  # raises MLflow's own exception
        data = response.json()
        return [_json_record(r) for r in data.get("runs", [])], data.get("next_page_token")

    def runs(
        self,
        experiment_ids: list[str],
        filter_string: str,
        max_results: int | None = None,
        deleted: bool = False,
    ) -> list[tuple]:
        """Records (info, {column: value}) of the runs matching, latest first, at most
        `max_results` (None: all)."""
        from mlflow.utils.search_utils import SearchUtils

        size = self.page if max_results is None else min(self.page, max_results)

        def request(token):
            return self._request(experiment_ids, filter_string, deleted, size, token)

        out, token = request(None)
        if not token or (max_results is not None and len(out) >= max_results):
            return out[:max_results]
        by_offset = _decoded(token) == _decoded(SearchUtils.create_page_token(len(out)))
        if by_offset and self.jobs > 1:
            offset = len(out)
            with ThreadPoolExecutor(self.jobs) as pool:
                while True:
                    offsets = []
                    for _ in range(self.jobs):
                        if max_results is not None and offset >= max_results:
                            break
                        offsets.append(offset)
                        offset += size
                    if not offsets:
                        break
                    tokens = [SearchUtils.create_page_token(o).decode() for o in offsets]
                    pages = list(pool.map(request, tokens))
                    self.parallel_pages += len(pages)
                    for page, _ in pages:
                        out += page
                    if any(len(page) < size or not nxt for page, nxt in pages):
                        break
            out = unique(out)  # a run started while paging shifts the pages by one
        else:
            while token and (max_results is None or len(out) < max_results):
                page, token = request(token)
                out += page
        return out[:max_results] if max_results is not None else out

    def series(self, run_ids: list[str], key: str) -> dict[str, list[float]]:
        """Every logged value of metric `key` per run, by step then time (MlflowClient's
        get_metric_history, `jobs` runs at a time)."""

        def one(run_id):
            hist = self.client.get_metric_history(run_id, key)
            return [m.value for m in sorted(hist, key=lambda m: (m.step, m.timestamp))]

        with ThreadPoolExecutor(self.jobs) as pool:
            return dict(zip(run_ids, pool.map(one, run_ids)))

    # ---------------------------------------------------------------- searches
    def search(
        self, experiment_ids: list[str], filter_string: str, max_results: int | None
    ) -> pd.DataFrame:
        """Runs frame of the runs `filter_string` matches, latest first, at most `max_results`."""
        return to_frame(self.runs(experiment_ids, filter_string, max_results))

    def changes(
        self, experiment_ids: list[str], filter_string: str, known: rows.Known
    ) -> tuple[pd.DataFrame, set[str], set[str]]:
        """What changed among the runs matching `filter_string` since `known.since_ms`, against the
        `known` cached runs: (rows of runs that started or ended since (less OVERLAP_MS), of cached
        runs that had not ended, and of runs restored from `known.deleted`; ids of cached runs
        deleted or no longer matching; ids of the deleted runs matching now). What this cannot see
        is in docs/analysis.md: tags edited after a run ended, runs purged by `mlflow gc` before a
        refresh saw them deleted, clocks lagging by more than OVERLAP_MS."""
        cached, start_from = known.runs, known.start_from
        w = int(known.since_ms - OVERLAP_MS)
        open_ids = list(cached.loc[~cached["status"].isin(rows.TERMINAL), "run_id"])
        deleted_runs = self.runs(experiment_ids, filter_string, deleted=True)
        deleted = {info[0] for info, _ in deleted_runs}
        recheck = open_ids + sorted(known.deleted - deleted)  # not ended / maybe restored
        searches = [
            both(filter_string, f"attributes.start_time >= {w}"),
            both(filter_string, f"attributes.end_time >= {w}"),
        ] + [
            both(filter_string, id_filter(recheck[i : i + CHUNK]))
            for i in range(0, len(recheck), CHUNK)
        ]
        with ThreadPoolExecutor(self.jobs) as pool:
            found = list(pool.map(lambda f: self.runs(experiment_ids, f), searches))
        fresh = to_frame([r for page in found for r in page])
        cached_ids = set(cached["run_id"])
        gone = (deleted & cached_ids) | (set(open_ids) - set(fresh["run_id"]))
        keep = [
            rows.within(e, t, start_from)
            for e, t in zip(fresh["experiment_id"], fresh["start_time"])
        ]
        fresh = fresh.loc[pd.Series(keep, index=fresh.index, dtype=bool)]
        return fresh.reset_index(drop=True), gone, deleted


def to_frame(records: list[tuple]) -> pd.DataFrame:
    """Runs frame (analysis/fetch/rows.py) of records (info, {column: value}); a run found by
    several searches (started and ended since the last refresh) is kept once."""
    records = unique(records)
    info = [info for info, _ in records]
    columns = rows.Columns([i[0] for i in info])
    for (rid, *_), data in records:
        for column, value in data.items():
            columns.put(column, rid, value)
    return rows.frame(info, columns)


def unique(records: list[tuple]) -> list[tuple]:
    """Records with each run id once (its first)."""
    seen: set[str] = set()
    return [r for r in records if not (r[0][0] in seen or seen.add(r[0][0]))]


def _entity_record(run) -> tuple:
    """(info, {column: value}) of an MLflow Run, only the keys analysis reads."""
    i = run.info
    data = {}
    for kind, items in (
        ("tags", run.data.tags),
        ("params", run.data.params),
        ("metrics", run.data.metrics),
    ):
        for key, value in items.items():
            if rows.keeps(kind, key):
                data[f"{kind}.{key}"] = value
    return (i.run_id, i.experiment_id, i.status, i.start_time, i.end_time), data


def _json_record(run: dict) -> tuple:
    """(info, {column: value}) of a run as the REST API's JSON has it, only the keys analysis
    reads. Metric values may come as strings ("NaN", "Infinity"): rows.metric reads those."""
    i, d = run.get("info", {}), run.get("data", {})
    data = {}
    for kind in ("tags", "params"):
        for kv in d.get(kind, ()):
            if rows.keeps(kind, kv["key"]):
                data[f"{kind}.{kv['key']}"] = kv.get("value", "")
    for m in d.get("metrics", ()):
        if rows.keeps("metrics", m["key"]):
            data[f"metrics.{m['key']}"] = rows.metric(m.get("value"))
    info = (
        i["run_id"],
        i.get("experiment_id"),
        i.get("status"),
        i.get("start_time"),
        i.get("end_time"),
    )
    return info, data


def _decoded(token) -> str:
    try:
        return base64.b64decode(token).decode("utf-8")
    except (ValueError, TypeError):
        return f"undecodable {token!r}"
