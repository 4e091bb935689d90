"""The tracking server: which one is in use, whether it answers, how to look at a run on it.

Read-only facts about the server; writing runs is common/tracking.py's job. Every URI shown to
the user or stored for display goes through `redact` (a tracking URI may hold a password).
"""

from __future__ import annotations

import errno
import os
import re
import sqlite3
import sys
import urllib.parse

from common.errors import UsageError, one_line

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
    """The tracking URI in use (MLFLOW_TRACKING_URI, mlflow.set_tracking_uri, or the default).
    While MLflow is not imported (so nothing has called set_tracking_uri) a set MLFLOW_TRACKING_URI
    is the answer, as MLflow would give it, without importing MLflow (about 2 s of CPU here)."""
    if "mlflow" not in sys.modules and os.environ.get("MLFLOW_TRACKING_URI"):
        return os.environ["MLFLOW_TRACKING_URI"]
    import mlflow

    return mlflow.get_tracking_uri()


def redact(text: str) -> str:
    """`text` with the user info of every URI in it hidden: `http://alice:pw@host:5000` ->
    `http://***@host:5000`. The one redaction: for anything printed, tagged or written for display."""
    return _USERINFO.sub(r"\1***@", str(text))


# scheme://user[:password]@ (a password may hold '@' but not '/' or white space)
_USERINFO = re.compile(r"\b([a-zA-Z][a-zA-Z0-9+.-]*://)[^/\s]+@")


def display_uri() -> str:
    """The tracking URI in use, as it may be shown or stored: without user name and password."""
    return redact(tracking_uri())


def same_tracking_uri(uri: str | None) -> bool:
    """Whether `uri` (as a spool entry records it: redacted) is the tracking URI in use now."""
    return redact(uri or "").rstrip("/") == display_uri().rstrip("/")


def store_problem(exc: BaseException) -> str:
    """One line saying what is wrong with the tracking store and what to do, from `exc` (an error
    the store raised), the URI without credentials."""
    text = _chain_text(exc)
    uri = display_uri()
    where = f"the tracking store {uri}"
    folder = _artifact_path(exc)
    if folder is not None:  # main called a read-only artifact folder a read-only tracking store
        return (
            f"the artifact folder of {uri} cannot be written ({redact(one_line(exc))[:160]}): make "
            f"{folder} writable (or set the experiment's artifact location), or point "
            "MLFLOW_TRACKING_URI at another store"
        )
    if "readonly database" in text or "Read-only file system" in text:
        return (
            f"{where} is read-only ({one_line(exc)[:120]}): make the file and its folder "
            "writable, or point MLFLOW_TRACKING_URI at another store"
        )
    if "PermissionError" in text or "Permission denied" in text:
        return (
            f"{where} cannot be written ({redact(one_line(exc))[:160]}): make the store and its "
            "artifact folder writable, or point MLFLOW_TRACKING_URI at another store"
        )
    if "MLFLOW_ALLOW_FILE_STORE" in text:  # MLflow 3 refuses a folder store unless told to
        return (
            f"{where} is a folder store, which this MLflow keeps in maintenance mode: copy its runs "
            "into a database with `mlflow migrate-filestore` and point MLFLOW_TRACKING_URI at it, "
            "or set MLFLOW_ALLOW_FILE_STORE=true to use the folder as it is"
        )
    if "file is not a database" in text or "database disk image is malformed" in text:
        return (
            f"{where} is not a readable sqlite database ({one_line(exc)[:120]}): move the file away "
            "or point MLFLOW_TRACKING_URI at another one"
        )
    code = re.search(r"error code (\d{3}) != 200", text)
    if code and code.group(1) in ("401", "403"):
        return (
            f"{uri} refused access (HTTP {code.group(1)}): set MLFLOW_TRACKING_USERNAME and "
            "MLFLOW_TRACKING_PASSWORD (or MLFLOW_TRACKING_TOKEN) for it"
        )
    if code and ("Response body: '<" in text or code.group(1) in ("404", "405", "501")):
        return (
            f"{uri} answered HTTP {code.group(1)} to the MLflow API: it is not an MLflow tracking "
            "server; check MLFLOW_TRACKING_URI (scheme, host, port and path)"
        )
    line = redact(one_line(exc))
    return f"{where}: {line.split(' Response body:')[0][:300]}"


def _artifact_path(exc: BaseException) -> str | None:
    """The file an OSError in `exc`'s chain could not write when it is not the tracking database
    (an artifact under ./mlruns or the experiment's artifact location), else None."""
    seen: set[int] = set()
    while exc is not None and id(exc) not in seen:
        seen.add(id(exc))
        if isinstance(exc, OSError) and exc.filename and exc.errno in (errno.EROFS, errno.EACCES):
            db = tracking_uri()[len("sqlite:///") :] if tracking_uri().startswith("sqlite:") else ""
            name = str(exc.filename)
            if not db or os.path.abspath(name) != os.path.abspath(db):
                return name
        exc = exc.__cause__ or exc.__context__
    return None


def _chain_text(exc: BaseException) -> str:
    """The messages of `exc` and every exception it was raised from, with their type names."""
    parts, seen = [], set()
    while exc is not None and id(exc) not in seen:
        seen.add(id(exc))
        parts.append(f"{type(exc).__name__}: {exc}")
        exc = exc.__cause__ or exc.__context__
    return "\n".join(parts)


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


TRACKING_SCHEMES = ("http", "https", "file", "sqlite", "postgresql", "mysql", "mssql", "databricks")
"""The URI schemes MLflow keeps runs at (a database scheme may name a driver: postgresql+psycopg2)."""
_EXAMPLES = "e.g. http://127.0.0.1:5000 (an mlflow server) or sqlite:///mlflow.db"


def check_uri(uri: str | None = None) -> None:
    """UsageError when the tracking URI can never work: not a URI (`http://[::1`), a scheme MLflow
    keeps no runs at (`ftp://`), an http(s) URI without a host. Such a URI is a setting to fix, not
    a server to wait for: runs are not kept offline "to send later" for it."""
    uri = uri if uri is not None else tracking_uri()
    shown = redact(uri)
    try:
        parts = urllib.parse.urlsplit(uri)
        parts.port  # noqa: B018 - raises ValueError for a port that is not a number
    except ValueError as exc:
        raise UsageError(
            f"MLFLOW_TRACKING_URI {shown!r} is not a valid URI ({exc}): fix it, {_EXAMPLES}"
        ) from None
    scheme = parts.scheme.lower().split("+")[0]
    if len(scheme) == 1 and re.match(r"^[a-zA-Z]:[\\/]", uri):
        return  # a Windows path (C:\runs): a folder store
    if scheme and scheme not in TRACKING_SCHEMES:
        raise UsageError(
            f"MLFLOW_TRACKING_URI {shown!r}: MLflow keeps no runs at {scheme}:// URIs; use "
            "http(s)://HOST:PORT (an mlflow server), sqlite:///FILE, postgresql://, mysql://, "
            f"mssql://, databricks or a folder, {_EXAMPLES}"
        )
    if scheme in ("http", "https") and not parts.hostname:
        raise UsageError(f"MLFLOW_TRACKING_URI {shown!r} names no host: {_EXAMPLES}")
    if scheme == "sqlite":
        check_sqlite_is_mlflow(uri)


MLFLOW_TABLES = ("alembic_version", "experiments", "runs")
"""Tables every MLflow sqlite store has: a database with other tables and not these is someone
else's (MLflow would add its 66 tables to it)."""


def sqlite_file(uri: str) -> str | None:
    """The database file an sqlite URI names, as SQLAlchemy (which MLflow opens it with) reads it:
    `sqlite:///rel.db` is rel.db in the working folder, `sqlite:////abs.db` is /abs.db, a query
    string (`?mode=ro`) is not part of it, a driver may be named (`sqlite+pysqlite:`). None for an
    in-memory database (`sqlite://`, `sqlite:///:memory:`) and for any other URI."""
    scheme, sep, rest = uri.partition("://")
    if not sep or scheme.lower().split("+")[0] != "sqlite":
        return None
    path = rest.split("?", 1)[0].partition("/")[2]  # sqlite://<no host>/<path>
    return path if path and path != ":memory:" else None


def check_sqlite_is_mlflow(uri: str) -> None:
    """UsageError when `sqlite:///FILE` names an sqlite database that holds tables but not MLflow's
    (analysis and upload would create MLflow's tables inside it). A missing or empty file (a
    new store) and a file that is not sqlite (common.server.store_problem says so) pass."""
    path = sqlite_file(uri)
    if path is None or not os.path.isfile(path) or os.path.getsize(path) == 0:
        return
    try:
        con = sqlite3.connect(f"file:{urllib.parse.quote(path)}?mode=ro", uri=True)
        try:
            names = {r[0] for r in con.execute("SELECT name FROM sqlite_master WHERE type='table'")}
        finally:
            con.close()
    except sqlite3.Error:
        return
    if names and not set(MLFLOW_TABLES) <= names:
        shown = ", ".join(sorted(names)[:5]) + (", ..." if len(names) > 5 else "")
        raise UsageError(
            f"MLFLOW_TRACKING_URI {redact(uri)!r} is an sqlite database that is not an MLflow store "
            f"(its tables: {shown}); nothing was written to it: point MLFLOW_TRACKING_URI at an "
            "MLflow store or a new file"
        )


def check_reachable(timeout_s: float = 5.0) -> None:
    """For an HTTP tracking server, one quick GET /health instead of MLflow's long retry schedule.

    Raises ConnectionError when the server does not answer (other URIs are not asked), UsageError
    when the URI can never work (`check_uri`).
    """
    check_uri()
    uri = tracking_uri()
    if not uri.startswith(("http://", "https://")):
        return
    import requests

    try:
        requests.get(uri.rstrip("/") + "/health", timeout=timeout_s)
    except requests.RequestException as exc:
        raise ConnectionError(f"{redact(uri)} does not answer ({type(exc).__name__})") from exc


def server_reachable() -> bool:
    """False when an HTTP tracking server does not answer one quick GET /health (5 s timeout)."""
    try:
        check_reachable()
    except ConnectionError:
        return False
    return True
