"""One supervised run with an MLflow record of its own, opened before the fork and closed with its outcome:
a tool's trial (`wif-tune`, `wif-advise`). Unlike a sweep's job (wif.sweep.job), the record exists before the
run starts, so a refusal from inside the run (a failing data factory) ends it FAILED, not absent."""

from __future__ import annotations

from typing import Dict, Tuple

from wif.config import Config, as_plain
from wif.measure.contention import is_contended
from wif.measure.tracking import FAILED, FINISHED, Tracker
from wif.run.supervise import REFUSED, Outcome, supervise


def run_recorded(
    tracker: Tracker, conf: Config, device: str, name: str, tags: Dict[str, str], label: str
) -> Tuple[str, Outcome, str]:
    """(run id, outcome, its error in one line or ''): the summary logged and `wif.contended` tagged when
    FINISHED, else `wif.error`.
    A KILLED outcome (Ctrl-C) is the caller's to act on, once it has kept what it needs."""
    plain = as_plain(conf)
    run_id = tracker.start_run(name, plain, tags, plain)
    outcome = supervise(conf, device, tracker, lambda: run_id, label, tags)
    if outcome.status == REFUSED:  # the record exists already: the run failed
        outcome = Outcome(FAILED, outcome.error)
    error = outcome.error or {}
    text = f"{error.get('type')}: {error.get('message')}" if error else ""
    if outcome.status == FINISHED:
        tracker.log_metrics(run_id, outcome.summary)
        contended = is_contended(outcome.summary.get("host_other_cpu_pct"), conf.measure.contended_pct)
        tracker.set_tags(run_id, {"wif.contended": str(contended).lower()})  # as a sweep's job is tagged
    else:
        tracker.set_tags(run_id, {"wif.error": text[:4000]})
    tracker.end_run(run_id, outcome.status)
    return run_id, outcome, text
