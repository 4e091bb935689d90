"""The tracking server: which one is in use, whether it answers, how to look at a run on it.

Read-only facts about the server; writing runs is common/tracking.py's job.
"""

from __future__ import annotations

_UNREACHABLE_MARKERS = (
    "Connection refused",
    "Max retries exceeded",
    "Failed to establish a new connection",
    "Name or service not known",
    "Temporary failure in name resolution",
    "Connection aborted",
    "Read timed out",
    "Connection reset",
    "RemoteDisconnected",
)


def tracking_uri() -> str:
    """The tracking URI in use (MLFLOW_TRACKING_URI, mlflow.set_tracking_uri, or the default)."""
    import mlflow

    return mlflow.get_tracking_uri()


def same_tracking_uri(uri: str | None) -> bool:
    """Whether `uri` (as a spool entry records it) is the tracking URI in use now."""
    return (uri or "").rstrip("/") == tracking_uri().rstrip("/")


def is_unreachable(exc: BaseException) -> bool:
    """True when `exc` says the tracking server could not be reached (as opposed to a bad request)."""
    seen: set[int] = set()
    while exc is not None and id(exc) not in seen:
        seen.add(id(exc))
        if isinstance(exc, (ConnectionError, TimeoutError)):
            return True
        if type(exc).__name__ in (
            "ConnectionError",
            "ConnectTimeout",
            "ReadTimeout",
            "MaxRetryError",
        ):
            return True
        text = str(exc)
        if any(m in text for m in _UNREACHABLE_MARKERS):
            return True
        exc = exc.__cause__ or exc.__context__
    return False


def check_reachable(timeout_s: float = 5.0) -> None:
    """For an HTTP tracking server, one quick GET /health instead of MLflow's long retry schedule.

    Raises ConnectionError when the server does not answer; other URIs are not checked.
    """
    uri = tracking_uri()
    if not uri.startswith(("http://", "https://")):
        return
    import requests

    try:
        requests.get(uri.rstrip("/") + "/health", timeout=timeout_s)
    except requests.RequestException as exc:
        raise ConnectionError(f"{uri} does not answer ({type(exc).__name__})") from exc


def server_reachable() -> bool:
    """False when an HTTP tracking server does not answer one quick GET /health (5 s timeout)."""
    try:
        check_reachable()
    except ConnectionError:
        return False
    return True


def ui_hint(run_id: str | None, experiment_id: str | None) -> str:
    """How to look at a run: the UI command for a local store, the URL for a server."""
    uri = tracking_uri()
    path = f"#/experiments/{experiment_id}/runs/{run_id}" if run_id else ""
    if uri.startswith(("http://", "https://")):
        return f"see {uri.rstrip('/')}/{path}"
    return f"see it with `mlflow ui --backend-store-uri {uri}`, then http://127.0.0.1:5000/{path}"
