"""A real MLflow tracking server for tests, as docs/cluster.md starts one: its own SQLite database and
artifact store, on a free loopback port, in a process group of its own; stopped and started again on the same
port and store (a server restarted mid-sweep). `server`: one for a test module (import it there).
`silent_uri`: where nothing answers. `busy_server`: answers /health, and 503 (MLflow retries it) to the rest.
"""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import threading
import time
import urllib.request
from contextlib import contextmanager
from http.server import BaseHTTPRequestHandler, HTTPServer
from pathlib import Path
from typing import Iterator, Optional

import pytest

START_WITHIN_S = 120  # ~25 s on a busy 2-core machine


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def silent_uri() -> str:
    """An http URI on a loopback port nobody listens on."""
    return f"http://127.0.0.1:{free_port()}"


class _Busy(BaseHTTPRequestHandler):
    health = 200

    def do_GET(self) -> None:
        self.send_response(self.health if self.path == "/health" else 503)
        self.end_headers()

    do_POST = do_GET

    def log_message(self, *args: object) -> None:
        pass


@contextmanager
def busy_server(health: int = 200) -> Iterator[str]:
    """A server that answers its health check `health`, and 503 to MLflow's calls: MLflow retries for minutes."""
    server = HTTPServer(("127.0.0.1", 0), type("Busy", (_Busy,), {"health": health}))
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()
        server.server_close()


class MlflowServer:
    def __init__(self, root: Path) -> None:
        self.root = root
        self.port = free_port()
        self.uri = f"http://127.0.0.1:{self.port}"
        self.proc: Optional[subprocess.Popen] = None

    def start(self) -> "MlflowServer":
        log = open(self.root / "server.log", "a")
        self.proc = subprocess.Popen(
            [
                str(Path(sys.executable).parent / "mlflow"),
                "server",
                "--host",
                "127.0.0.1",
                "--port",
                str(self.port),
                "--workers",
                "1",
                "--backend-store-uri",
                f"sqlite:///{self.root / 'server.db'}",
                "--artifacts-destination",
                str(self.root / "artifacts"),
            ],
            cwd=self.root,
            # no job runner: MLflow's GenAI jobs are not wif's, and its huey consumers cost ~5 s of CPU a start
            env={**os.environ, "MLFLOW_SERVER_ENABLE_JOB_EXECUTION": "false"},
            stdout=log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
        log.close()
        deadline = time.monotonic() + START_WITHIN_S
        while not self.healthy():
            assert self.proc.poll() is None, (self.root / "server.log").read_text()[-3000:]
            assert time.monotonic() < deadline, f"the MLflow server did not answer within {START_WITHIN_S} s"
            time.sleep(0.5)
        return self

    def healthy(self) -> bool:
        try:
            with urllib.request.urlopen(f"{self.uri}/health", timeout=2) as answer:
                return answer.status == 200
        except OSError:
            return False

    def stop(self) -> None:
        """SIGTERM to the group this object started (nothing else), SIGKILL after 20 s."""
        if self.proc is None:
            return
        try:
            os.killpg(self.proc.pid, signal.SIGTERM)
            self.proc.wait(timeout=20)
        except (ProcessLookupError, subprocess.TimeoutExpired):
            try:
                os.killpg(self.proc.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
            self.proc.wait()
        self.proc = None


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[MlflowServer]:
    srv = MlflowServer(tmp_path_factory.mktemp("mlflow-server"))
    try:
        yield srv.start()
    finally:
        srv.stop()
