"""A worker's fd-sharing thread whose peer leaves mid-handshake (Ctrl-C reaches the run and its workers at once)
prints no traceback under wif's worker_init_fn, and still does without it: real multiprocessing, in a subprocess."""

from __future__ import annotations

import subprocess
import sys

import pytest

SHARER = """
import os, socket, sys, time
from multiprocessing import reduction, resource_sharer
from wif.measure.lifetime import dataloader_worker_init
if sys.argv[1] == "wif":
    dataloader_worker_init(0)
r, w = os.pipe()
reduction.DupFd(r)  # a batch's fd registered: the sharer's serving thread starts
s = socket.socket(socket.AF_UNIX)
s.connect(resource_sharer._resource_sharer._address)
s.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, b"\\x01" + b"\\x00" * 7)  # close resets the connection
s.close()
time.sleep(1.0)
print("done")
"""


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="fd sharing over a Unix socket: Linux")
@pytest.mark.parametrize("init", ["wif", "none"])
def test_a_peer_that_leaves_mid_handshake_prints_no_traceback_in_a_wif_worker(init: str) -> None:
    done = subprocess.run([sys.executable, "-c", SHARER, init], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0 and "done" in done.stdout, done.stderr[-2000:]
    assert ("Traceback" in done.stderr) == (init == "none"), done.stderr[-2000:]
