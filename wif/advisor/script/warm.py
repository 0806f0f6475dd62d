"""The user's Python script started warm: forked from a server that has already imported torch and the watch.

Only this interpreter running a script or a module, with no interpreter options, starts warm. Any other
command, such as another Python, `torchrun` or a shell script, runs as it is, in a new process.
See NOTE [ Why the script starts warm ].
"""

from __future__ import annotations

import atexit
import contextlib
import multiprocessing
import os
import runpy
import shutil
import signal
import sys
import threading
from typing import Dict, List, Optional, Sequence, Tuple

from wif.watcher import hook
from wif.watcher.orders import FORKED_FROM

# NOTE [ Why the script starts warm ]
# `wif-advise -- python my_train.py ARGS` runs the command a dozen times: the probe, the measuring runs, the
# loader trials and the race. Each new interpreter pays its imports before the script's first line. Here that
# was about 5 s of a 6-s measurement: torch with its CUDA libraries, torch._dynamo at the first optimizer,
# MLflow. It is paid in no epoch, but in the advice's minutes. The study forks its runs from a warm supervisor,
# `wif.run.forking.preload`. So the script is forked from a multiprocessing forkserver whose only import is
# `wif.advisor.script.warm_preload`, and run there as Python would run it. `sys.argv`, `sys.path[0]`, the environment
# and the working directory are the command's, and `__main__` its own. Its exit code and uncaught exception
# are as they would be, and its atexit handlers run. Its RAM is counted as a forked run's is: the pages it
# still shares with the server are added back in full, `wif.measure.proctree.fork_shared_share`, as in a
# script started on its own.

Target = Tuple[str, str, List[str]]  # ("path" | "module", the script or module, its arguments)
PRELOAD = "wif.advisor.script.warm_preload"


def warm_target(command: Sequence[str]) -> Optional[Target]:
    """What the command runs, where it is this interpreter (same venv, no options) with a script or `-m`; else None."""
    if len(command) < 2 or os.environ.get("WIF_ADVISE_WARM", "1") == "0":
        return None
    found = shutil.which(command[0])
    if found is None:
        return None
    exe, ours = os.path.abspath(found), os.path.abspath(sys.executable)
    if os.path.dirname(exe) != os.path.dirname(ours) or os.path.realpath(exe) != os.path.realpath(ours):
        return None
    if command[1] == "-m":
        return ("module", command[2], list(command[3:])) if len(command) > 2 else None
    if command[1].startswith("-"):
        return None
    return ("path", command[1], list(command[2:]))


_preload: List[str] = [PRELOAD]  # and the frameworks the script imports (the probe's `modules`)


def _context() -> multiprocessing.context.BaseContext:
    """The forkserver context, with its preloads."""
    ctx = multiprocessing.get_context("forkserver")
    ctx.set_forkserver_preload(list(_preload))
    return ctx


def warm_up(frameworks: Sequence[str] = ()) -> None:
    """Start the server now, its imports under way while the advice does other work.

    `frameworks` (Lightning, transformers, accelerate: 2-4 s each) are preloaded too; a server without them restarts.
    """
    from multiprocessing import forkserver

    wanted = [PRELOAD, *frameworks]
    if wanted != _preload:
        if not stop():
            return
        _preload[:] = wanted
    _context()
    forkserver.ensure_running()


def stop() -> bool:
    """End the server now, its imports unfinished; False where one runs that cannot be stopped.

    A refused command needs none of its imports, and a restart with more preloads imports them all again.
    """
    from multiprocessing import forkserver

    server = forkserver._forkserver  # type: ignore[attr-defined]
    pid = getattr(server, "_forkserver_pid", None)
    if pid is None:
        return True
    if not hasattr(server, "_stop"):  # a private method (CPython's Lib/multiprocessing/forkserver.py)
        return False
    with contextlib.suppress(ProcessLookupError):
        os.kill(pid, signal.SIGKILL)  # it reads its stop only once its preloads are imported
    server._stop()
    return True


def start(target: Target, env: Dict[str, str], log_path: str) -> multiprocessing.process.BaseProcess:
    """The script started in a child of the server; its output goes to `log_path`."""
    proc = _context().Process(
        target=_run, args=(target, dict(env), os.getcwd(), log_path), daemon=False, name="wif-advise-script"
    )
    proc.start()
    return proc


def _as_a_main_process() -> None:
    """multiprocessing as a new interpreter has it: this process the main one, no start method chosen yet.

    So DataLoader workers fork from the script, as under `python`, and no forkserver is left behind.
    """
    import multiprocessing.process as mp_process

    from wif.advisor.script.warm_preload import MAIN

    MAIN.name = "MainProcess"  # the fork's preparation gave it the child's name
    mp_process._current_process = MAIN  # type: ignore[attr-defined]  # the server's own, a main process
    mp_process._parent_process = None  # type: ignore[attr-defined]
    mp_process._children = set()  # type: ignore[attr-defined]
    multiprocessing.set_start_method(None, force=True)


def _end_children() -> None:
    """End the script's persistent DataLoader workers still alive at its end, as an interpreter's shutdown would."""
    import psutil

    children = psutil.Process().children(recursive=True)
    for child in children:
        with contextlib.suppress(psutil.NoSuchProcess):
            child.terminate()
    for child in psutil.wait_procs(children, timeout=5)[1]:
        child.kill()


def _run(target: Target, env: Dict[str, str], cwd: str, log_path: str) -> None:
    """In the child: the script as `python` would run it; exits with its code."""
    fd = os.open(log_path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
    os.dup2(fd, 1)
    os.dup2(fd, 2)
    os.close(fd)
    sys.stdout = open(1, "w", buffering=1, closefd=False, errors="backslashreplace")
    sys.stderr = open(2, "w", buffering=1, closefd=False, errors="backslashreplace")
    os.chdir(cwd)
    os.environ.clear()
    os.environ.update(env, **{FORKED_FROM: str(os.getppid())})  # the watch adds the pages shared with it
    _as_a_main_process()
    signal.signal(signal.SIGINT, signal.default_int_handler)
    signal.signal(signal.SIGTERM, signal.SIG_DFL)
    sys.excepthook = sys.__excepthook__
    atexit._clear()  # the server's; the script's own are registered as it runs, and run at its end
    for func, args, kwargs in getattr(sys.modules.get(PRELOAD), "REGISTERED", ()):
        atexit.register(func, *args, **kwargs)  # those of the modules imported for it (MLflow's end of a run)
    hook.install()  # every DataLoader's epoch under the watch, as the boot folder on PYTHONPATH does for a new process
    kind, name, args = target
    code: object = 0
    try:
        if kind == "module":
            sys.argv = [name, *args]  # runpy puts the module's file in argv[0], as `python -m` does
            sys.path[0] = cwd
            runpy.run_module(name, run_name="__main__", alter_sys=True)
        else:
            sys.argv = [name, *args]
            sys.path[0] = os.path.dirname(os.path.abspath(name))
            runpy.run_path(name, run_name="__main__")
    except SystemExit as stop:
        code = stop.code
    except BaseException:  # noqa: BLE001 - an uncaught error: said by the excepthook (the watch's), as Python does
        sys.excepthook(*sys.exc_info())
        code = 130 if isinstance(sys.exc_info()[1], KeyboardInterrupt) else 1
    threading._shutdown()  # as Python's own exit: the script's non-daemon threads are joined, then atexit
    atexit._run_exitfuncs()
    _end_children()
    if code is None:
        code = 0
    elif not isinstance(code, int):
        print(code, file=sys.stderr)
        code = 1
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code)
