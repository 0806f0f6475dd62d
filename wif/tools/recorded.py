"""One supervised run with an MLflow record of its own, opened before the fork and closed with its outcome.

A tool's trial runs so: `wif-tune`'s, `wif-advise`'s. Unlike a sweep's job (wif.sweep.job), the record
exists before the run starts. A refusal from inside the run, such as a failing data factory, then ends it
FAILED, not absent.
"""

from __future__ import annotations

from typing import Dict, Tuple

from wif.config import Config, as_plain
from wif.measure import names
from wif.measure.contention import is_contended
from wif.measure.tracking import FAILED, FINISHED, Tracker
from wif.run.supervise import REFUSED, Outcome, supervise


def run_recorded(
    tracker: Tracker, conf: Config, device: str, name: str, tags: Dict[str, str], label: str
) -> Tuple[str, Outcome, str]:
    """(run id, outcome, its error in one line or ''): one run supervised and recorded.

    FINISHED logs the summary and tags `wif.contended`; any other outcome tags `wif.error`. A KILLED outcome,
    by Ctrl-C, is the caller's to act on, once it has kept what it needs.

    Args:
        tracker: the MLflow store the run is recorded in.
        conf: the run's configuration.
        device: "cuda" or "cpu".
        name: the run's name.
        tags: the run's tags.
        label: how the run's lines name it.
    """
    plain = as_plain(conf)
    run_id = tracker.start_run(name, plain, tags, plain)
    outcome = supervise(conf=conf, device=device, tracker=tracker, open_run=lambda: run_id, label=label, tags=tags)
    if outcome.status == REFUSED:  # the record exists already: the run failed
        outcome = Outcome(FAILED, outcome.error)
    error = outcome.error or {}
    text = f"{error.get('type')}: {error.get('message')}" if error else ""
    if outcome.status == FINISHED:
        tracker.log_metrics(run_id, outcome.summary)
        contended = is_contended(outcome.summary, conf.measure.contended_pct)
        tracker.set_tags(run_id, {names.TAG_CONTENDED: str(contended).lower()})  # as a sweep's job is tagged
    else:
        tracker.set_tags(run_id, {names.TAG_ERROR: text[:4000]})
    tracker.end_run(run_id, outcome.status)
    return run_id, outcome, text
