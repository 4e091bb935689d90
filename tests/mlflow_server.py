"""A real `mlflow server` for tests: own process group, health-checked start, clean stop."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class MlflowServer:
    """`mlflow server` on 127.0.0.1 with `backend_uri` (sqlite or postgresql) and a local artifact root.

    Started in its own session so that stop() can kill its whole process group (the server spawns
    workers that would otherwise outlive it). MLflow's GenAI job runner is switched off: it starts
    seven extra consumer processes that this benchmark never uses.
    """

    def __init__(
        self,
        backend_uri: str,
        artifacts_dir: Path,
        port: int | None = None,
        log_path: Path | None = None,
        workers: int = 1,
    ):
        self.backend_uri = backend_uri
        self.artifacts_dir = Path(artifacts_dir)
        self.port = port or free_port()
        self.log_path = log_path or self.artifacts_dir.parent / f"mlflow-server-{self.port}.log"
        self.workers = workers
        self.proc: subprocess.Popen | None = None

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def start(self, timeout_s: float = 180.0) -> "MlflowServer":
        import requests

        self.artifacts_dir.mkdir(parents=True, exist_ok=True)
        env = dict(os.environ, MLFLOW_SERVER_ENABLE_JOB_EXECUTION="false")
        env.pop("MLFLOW_TRACKING_URI", None)
        log = open(self.log_path, "ab")
        self.proc = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "mlflow",
                "server",
                "--backend-store-uri",
                self.backend_uri,
                "--artifacts-destination",
                str(self.artifacts_dir),
                "--host",
                "127.0.0.1",
                "--port",
                str(self.port),
                "--workers",
                str(self.workers),
            ],
            stdout=log,
            stderr=subprocess.STDOUT,
            env=env,
            start_new_session=True,
        )
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(
                    f"mlflow server exited with {self.proc.returncode}; see {self.log_path}"
                )
            try:
                if requests.get(self.url + "/health", timeout=2).status_code == 200:
                    return self
            except requests.RequestException:
                pass
            time.sleep(0.5)
        self.stop()
        raise RuntimeError(
            f"mlflow server did not answer /health within {timeout_s} s; see {self.log_path}"
        )

    def stop(self) -> None:
        if self.proc is None:
            return
        try:
            os.killpg(self.proc.pid, signal.SIGTERM)
            self.proc.wait(timeout=15)
        except (ProcessLookupError, subprocess.TimeoutExpired):
            try:
                os.killpg(self.proc.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        self.proc = None
