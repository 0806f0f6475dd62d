"""Everything the study writes to MLflow, in one place: the experiment, runs, params, tags, metrics.

It uses an explicit `MlflowClient`, with no fluent global state. One long-lived supervising process can then
hold the store open for a whole sweep, while each run's own work happens in a child process. `PacedSender`
sends a watched script's epochs from a thread of its own: see NOTE [ Sends paced to a share of a core ].
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import json
import logging
import os
import queue
import random
import threading
import time
from pathlib import Path
from typing import Any, Dict, List, Mapping, Optional, Sequence, Tuple
from urllib.parse import urlparse

from mlflow.entities import Metric, Param, RunStatus, RunTag
from mlflow.exceptions import MlflowException
from mlflow.tracking import MlflowClient

from wif.config import ConfigError
from wif.measure import names
from wif.measure.lifetime import owner_gone

log = logging.getLogger("wif")

DEFAULT_URI = "sqlite:///mlflow.db"
EXPERIMENT_KIND_TAG = "mlflow.experimentKind"  # the UI opens training runs, not its GenAI view
BATCH_LIMIT = 100  # MLflow's log_batch accepts at most 100 params (1000 metrics) per call
METRIC_LIMIT = 1000


def default_tracking_uri() -> str:
    """As every MLflow tool: MLFLOW_TRACKING_URI when set, else a SQLite store in the working directory."""
    return os.environ.get("MLFLOW_TRACKING_URI", DEFAULT_URI)


def flatten(tree: Mapping[str, Any], prefix: str = "") -> Dict[str, Any]:
    out: Dict[str, Any] = {}
    for key, value in tree.items():
        name = f"{prefix}{key}"
        if isinstance(value, Mapping):
            out.update(flatten(value, name + "."))
        else:
            out[name] = value
    return out


def _sqlite_path(uri: str) -> Optional[Path]:
    if urlparse(uri).scheme != "sqlite" or ":memory:" in uri:
        return None
    return Path(uri[len("sqlite:///") :]).expanduser().resolve()


def _artifact_root(uri: str) -> Optional[str]:
    """Beside a SQLite file, artifacts go next to it rather than into whatever directory is current."""
    db = _sqlite_path(uri)
    return None if db is None else (db.parent / "mlartifacts").as_uri()


_SILENT: Dict[str, str] = {}  # a tracking server that gave no answer -> why; See NOTE [ Module state ]
ANSWER_WITHIN_S = 10.0  # a command's first word with the server; the watch, in the user's loop, waits 5
RETRIED = frozenset((408, 429, 500, 502, 503, 504))  # mlflow.utils.request_utils._TRANSIENT_FAILURE_RESPONSE_CODES


def check_server_answers(uri: str, within_s: float = ANSWER_WITHIN_S) -> None:
    """ConfigError, saying why, where `server_silence` finds the tracking server silent; other stores pass."""
    why = server_silence(uri, within_s)
    if why:
        raise ConfigError(why)


def server_silence(uri: str, within_s: float = ANSWER_WITHIN_S) -> str:
    """Why an http(s) tracking server cannot be used, as one line; '' where it answered, and for other stores.

    MLflow's client retries a request for minutes before it fails. So every command asks once, briefly, before it
    starts anything, and the watch asks once in the loop. An answer passes, a refusal of credentials too; silence
    fails, and so does a status MLflow would retry (a proxy's 503 while the server is down). A command's jobs keep
    MLflow's retries: they outlive a server's restart.
    """
    import requests  # as MLflow's client reaches the server: its proxies and CA bundle

    if urlparse(uri).scheme not in ("http", "https"):
        return ""
    if uri not in _SILENT:  # asked once a process: a loop that makes its data anew each epoch waits once
        try:
            with requests.get(uri.rstrip("/") + "/health", timeout=within_s) as answer:
                if answer.status_code not in RETRIED:
                    return ""
                why = f"answered HTTP {answer.status_code}, which MLflow's client would retry for minutes"
        except requests.exceptions.SSLError:  # a TLS handshake is an answer: MLflow's own settings may verify it
            return ""
        except requests.exceptions.RequestException as err:  # refused, unresolved, timed out
            why = f"gave no answer within {within_s:g} s ({type(err).__name__})"
        _SILENT[uri] = f"the tracking server {uri} {why}: start it, or set MLFLOW_TRACKING_URI to a store that answers"
    return _SILENT[uri]


@contextlib.contextmanager
def _store_lock(uri: str):
    """One process at a time opens a SQLite store for the first time: two migrating it at once break it for good."""
    db = _sqlite_path(uri)
    if db is None:
        yield
        return
    db.parent.mkdir(parents=True, exist_ok=True)
    with open(db.with_name(db.name + ".lock"), "a") as handle:
        fcntl.flock(handle, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)


class Tracker:
    def __init__(self, uri: str, experiment: str, attempts: int = 5, answer_within_s: Optional[float] = None) -> None:
        """A client on the store, the experiment made where it is not; `attempts` for a busy store or a server starting.

        With `answer_within_s`, a server that does not answer within it is a ConfigError, not minutes of retries.
        """
        self.uri = uri
        if answer_within_s is not None:
            check_server_answers(uri, answer_within_s)
        for attempt in range(attempts):
            try:
                with _store_lock(uri):
                    self.client = MlflowClient(uri)
                    self.experiment_id = self._experiment(experiment)
                break
            except Exception:  # noqa: BLE001 - e.g. a tracking server still starting, a busy database
                if attempt == attempts - 1:
                    raise
                time.sleep(0.5 * 2**attempt + random.random())

    def _experiment(self, name: str) -> str:
        exp = self.client.get_experiment_by_name(name)
        if exp is not None:
            return exp.experiment_id
        try:
            return self.client.create_experiment(
                name, artifact_location=_artifact_root(self.uri), tags={EXPERIMENT_KIND_TAG: "custom_model_development"}
            )
        except MlflowException:  # another process created it first
            exp = self.client.get_experiment_by_name(name)
            if exp is None:
                raise
            return exp.experiment_id

    def finished_runs(self, config_hash: str) -> List[str]:
        """Ids of the FINISHED runs of exactly this configuration and repeat (at most one, by design)."""
        return list(self._runs(config_hash, "FINISHED"))

    def running_runs(self, config_hash: str) -> Dict[str, Dict[str, str]]:
        """The RUNNING runs of this configuration and repeat, with their tags: live or stale (`owner_gone`)."""
        return self._runs(config_hash, "RUNNING")

    def _runs(self, config_hash: str, status: str) -> Dict[str, Dict[str, str]]:
        runs = self.client.search_runs(
            [self.experiment_id],
            filter_string=f"tags.`{names.TAG_CONFIG_HASH}` = '{config_hash}' and attributes.status = '{status}'",
        )
        return {r.info.run_id: r.data.tags for r in runs}

    def start_run(
        self, name: str, params: Mapping[str, Any], tags: Mapping[str, str], config: Mapping[str, Any]
    ) -> str:
        """Create a run with its tags, params and config.yaml; its id.

        Args:
            name: the run's name.
            params: nested params, flattened to dotted keys.
            tags: the run's tags.
            config: the composed config, logged as config.yaml.
        """
        run = self.client.create_run(self.experiment_id, run_name=name, tags={k: str(v) for k, v in tags.items()})
        run_id = run.info.run_id
        items = [Param(k, str(v)) for k, v in flatten(params).items()]
        for i in range(0, len(items), BATCH_LIMIT):
            self.client.log_batch(run_id, params=items[i : i + BATCH_LIMIT])
        self.client.log_dict(run_id, dict(config), "config.yaml")
        return run_id

    def set_tags(self, run_id: str, tags: Mapping[str, Any]) -> None:
        if tags:
            self.client.log_batch(run_id, tags=[RunTag(k, str(v)) for k, v in tags.items()])

    def log_metrics(
        self, run_id: str, metrics: Mapping[str, float], step: int = 0, tags: Optional[Mapping[str, Any]] = None
    ) -> None:
        """Log one step's metrics and tags in one batched call: per-epoch figures cost one round trip.

        Args:
            run_id: the run.
            metrics: name -> value; None values are left out.
            step: the epoch.
            tags: set with them.
        """
        self.log_steps(run_id, [(step, metrics, tags or {})])

    def log_steps(self, run_id: str, rows: Sequence[Tuple[int, Mapping[str, float], Mapping[str, Any]]]) -> None:
        """Several epochs' (step, metrics, tags) in as few calls as MLflow allows (1000 metrics, 100 tags each)."""
        now = int(time.time() * 1000)
        items = [
            Metric(k, float(v), now, step) for step, metrics, _ in rows for k, v in metrics.items() if v is not None
        ]
        tags = {k: str(v) for _, _, marks in rows for k, v in marks.items()}  # a later epoch's value wins
        marks = [RunTag(k, v) for k, v in tags.items()]
        for i in range(0, max(len(items), 1), METRIC_LIMIT):
            if items[i : i + METRIC_LIMIT] or (marks and i == 0):
                self.client.log_batch(run_id, metrics=items[i : i + METRIC_LIMIT], tags=marks if i == 0 else [])

    def end_run(self, run_id: str, status: str) -> None:
        self.client.set_terminated(run_id, status=status)


def config_hash(identity: Mapping[str, Any]) -> str:
    """Stable across processes and key order: the identity resume uses to find a finished run."""
    return hashlib.sha256(json.dumps(identity, sort_keys=True, default=str).encode()).hexdigest()[:20]


FINISHED, FAILED, KILLED = (RunStatus.to_string(s) for s in (RunStatus.FINISHED, RunStatus.FAILED, RunStatus.KILLED))


def close_stale_runs(tracker: Tracker, digest: str, label: str) -> None:
    """Mark KILLED the RUNNING runs of this job whose owner died, so the job runs again; a live owner's are left."""
    for run_id, tags in tracker.running_runs(digest).items():
        if owner_gone(tags):
            tracker.set_tags(
                run_id,
                {
                    names.TAG_ERROR: f"Orphaned: its process (pid {tags[names.TAG_PID]} on "
                    f"{tags[names.TAG_HOST]}) ended without closing the run"
                },
            )
            tracker.end_run(run_id, KILLED)
            log.warning("%s  run %s was left RUNNING by a process that no longer exists: marked KILLED", label, run_id)


# NOTE [ Sends paced to a share of a core ]
# A write to a SQLite store costs about 9 ms of CPU: 4% of a 0.25-s epoch, on a core the loop's own threads
# also use. So a watched script's epochs are sent from a thread of their own, at most a set share of a core.
# Each send's CPU time (`time.thread_time`) is measured. The next send waits until that cost is `share` of the
# time since, and takes every epoch queued meanwhile in one call. Long epochs go out one by one as they end;
# short ones go a few at a time, on a dashboard seconds later.

Row = Tuple[int, Dict[str, float], Dict[str, Any]]


class PacedSender:
    """`put` an epoch's (step, metrics, tags) and go on; `close` sends what is left and says what failed.

    See NOTE [ Sends paced to a share of a core ].
    """

    def __init__(self, tracker: Tracker, run_id: str, share: float = 0.01, name: str = "wif-watch-log") -> None:
        self.tracker, self.run_id, self.share = tracker, run_id, share
        self.inbox: "queue.SimpleQueue[Optional[Row]]" = queue.SimpleQueue()
        self.error = ""
        self.sends = 0
        self.thread = threading.Thread(target=self._run, name=name, daemon=True)
        self.thread.start()

    def put(self, step: int, metrics: Mapping[str, float], tags: Mapping[str, Any]) -> None:
        self.inbox.put((step, dict(metrics), dict(tags)))

    def close(self, timeout: float = 120) -> str:
        """Everything queued sent (or the wait ended); the first error, '' if none."""
        self.inbox.put(None)
        self.thread.join(timeout)
        return self.error

    def _run(self) -> None:
        ready_at, closing = 0.0, False
        while not closing:
            rows: List[Row] = []
            item = self.inbox.get()
            while item is not None:
                rows.append(item)
                wait = ready_at - time.monotonic()
                try:
                    item = self.inbox.get(timeout=wait) if wait > 0 else self.inbox.get_nowait()
                except queue.Empty:
                    break
            closing = item is None
            if rows:
                cpu = time.thread_time()
                try:
                    self.tracker.log_steps(self.run_id, rows)
                    self.sends += 1
                except Exception as err:  # noqa: BLE001 - the store refused: said at the end, the training goes on
                    self.error = self.error or f"{type(err).__name__}: {err}"
                ready_at = time.monotonic() + (time.thread_time() - cpu) / self.share
