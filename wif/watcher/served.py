"""Loader-only trials served in one process: after each candidate, the next one's orders, or leave.

See NOTE [ Trials in one process ].
"""

from __future__ import annotations

import json
import os
import time
from typing import Any, Dict, Optional

import psutil

from wif.watcher import ranks
from wif.watcher.found import Found, find_dataloader
from wif.watcher.orders import Orders, write_json

# NOTE [ Trials in one process ]
# A loader-only trial never runs the step, so one process of the script can time every candidate in turn:
# the script's start (its imports, data and model) is paid once, not once a candidate. wif-advise gives the
# first candidate's orders with `serve`, a folder. When a candidate has what it needs, its record is
# finished (its run read at once), `done-K.json` is written there, and the watch waits for `order-K+1.json`:
# the next candidate's orders, or none, to leave. Between candidates the last loader's workers are ended,
# and the next one is rebuilt from the script's own DataLoader, so each is timed from a cold start as in a
# process of its own. The watch leaves too when wif-advise is gone, or no order comes within SERVE_WAIT_S.
# A distributed script leaves after each candidate, as before. wif-advise's side is wif.advisor.script.command.
# A candidate at num_workers=0 is its process's last. Its fetch runs in the main process, and a dataset that opens
# its file lazily (h5py, LMDB) opens it there. A later candidate's workers would fork holding that handle: a
# file shared across processes, which neither h5py nor LMDB supports. So the next candidate starts a new process.

SERVE_POLL_S = 0.01  # how often the next order is looked for
SERVE_WAIT_S = 600.0  # no order within this long: wif-advise is taken to be done


def next_order(spec: Dict[str, Any]) -> Optional[Dict[str, Any]]:
    """This candidate's end handed to wif-advise, and the next candidate's orders; None: leave."""
    where, k = spec["serve"], int(spec.get("serve_index", 0))
    write_json(os.path.join(where, f"done-{k}.json"), {"run_id": spec["run_id"]})
    path = os.path.join(where, f"order-{k + 1}.json")
    t_end, server = time.monotonic() + SERVE_WAIT_S, spec.get("serve_pid")
    while not os.path.exists(path):
        if time.monotonic() > t_end or (server and not psutil.pid_exists(int(server))):  # wif-advise is gone
            return None
        time.sleep(SERVE_POLL_S)
    with open(path) as f:
        return json.load(f).get("orders")


def next_orders(orders: Orders, record: Any, batches: Any) -> Orders:
    """After a candidate: its run finished, its workers ended, and the next one's Orders; leaves where none comes."""
    if not orders.spec.get("serve") or ranks.world()[1] > 1:  # a distributed script's ranks leave together
        orders.leave(record)
    record.finish()  # its run is read as soon as wif-advise hears it is done
    found = find_dataloader(batches)  # the script's own where no setting was ordered: its workers end too
    end_workers(orders.rebuilt, found.loader if found else None)  # before the next order is awaited
    spec = next_order(orders.spec)
    if spec is None:
        orders.leave(record)
    return follow(orders, spec, batches)


def follow(last: Orders, spec: Dict[str, Any], batches: Any) -> Orders:
    """The next candidate's Orders, its loader rebuilt from the script's own, not from the last candidate's."""
    orders = Orders(spec)
    found, own = find_dataloader(batches), last.script_loader
    if found is not None and own is not None:
        if found.holder is not None and found.attribute:
            setattr(found.holder, found.attribute, own)  # the script's own again, where no setting is ordered
        found = Found(found.holder, found.attribute, own)
    orders.take(batches, found)
    orders.script_loader = own
    return orders


def end_workers(*loaders: Any) -> None:
    """Each loader's persistent workers ended now: the iterator DataLoader keeps for them, shut down and dropped."""
    for loader in loaders:
        iterator = getattr(loader, "_iterator", None)
        if iterator is not None:
            iterator._shutdown_workers()  # torch's own clean-up, as the iterator's __del__ runs it
            loader._iterator = None
