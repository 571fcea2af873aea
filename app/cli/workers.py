"""``duplex serve --workers N``: N server processes on one port, and the one that keeps them.

One event loop hears every session's microphone: at ~120 streaming sessions its thread
is a full core while the machine's others idle. So each worker is a whole server (its
own loop, models and sessions), started fresh (``spawn``: forking a process whose model
runtimes have started their thread pools is not safe), listening on the same port with
``SO_REUSEPORT``: Linux hands each new connection to one of them by the connection's
hash, and no session ever needs another worker (a session is one connection). Other
systems do not spread connections that way, so there ``--workers`` above 1 is refused.

What the workers share: one ``--max-sessions`` (:class:`~duplex.app.edge.capacity.Capacity`,
in shared memory), one ``/metrics`` (``prometheus_client``'s multiprocess files, in a
directory this process makes and removes) and the chat model's weights (llama.cpp maps the
file, so its pages are the page cache's, read once for every worker). Each loads its own
recogniser, end-of-turn model and voices: a few hundred MB each (docs/deploy.md has the
figures), against the cost of a model server every turn would wait on.

This process only keeps them: a worker that dies is replaced (its slot of the session
count zeroed, its live gauges dropped), and its sessions' connections end with it (a
client sees 1006); the others go on untouched. A worker that dies before it ever served
is a configuration the user must fix: every worker is stopped and its exit status kept.
SIGTERM or SIGINT is passed on to every worker, which drains (a second one cuts the
drains short); this process exits when they all have.
"""

from __future__ import annotations

import contextlib
import logging
import multiprocessing
import multiprocessing.connection
import os
import shutil
import signal
import socket
import sys
import tempfile
from dataclasses import dataclass, replace
from multiprocessing.process import BaseProcess
from typing import Any

from duplex.app.cli.backends import BackendChoice
from duplex.app.edge.config import ServerConfig
from duplex.app.edge.metrics import MULTIPROC_DIR

log = logging.getLogger("duplex.server")


@dataclass(frozen=True, slots=True)
class WorkerArgs:
    """What each worker is started with."""

    config: ServerConfig
    choice: BackendChoice
    log_level: str
    log_format: str


def supervise(args: WorkerArgs, workers: int) -> int:
    """Run ``workers`` servers on one port until a signal; the exit status."""
    if not sys.platform.startswith("linux"):
        print("duplex: --workers above 1 needs Linux (SO_REUSEPORT spreads the connections)", file=sys.stderr)
        return 2
    config = args.config
    if config.port == 0:  # the workers must agree on one port
        with socket.socket() as probe:
            probe.bind((config.host, 0))
            config = replace(config, port=probe.getsockname()[1])
    args = replace(args, config=config)
    ctx = multiprocessing.get_context("spawn")
    slots: Any = ctx.Array("i", workers)  # each worker's open sessions
    served: Any = ctx.Array("b", workers)  # each worker has listened once
    shared = tempfile.mkdtemp(prefix="duplex-metrics-")
    os.environ[MULTIPROC_DIR] = shared  # the workers inherit it before prometheus_client loads
    procs: list[BaseProcess] = []
    stopping = False

    def start(index: int) -> BaseProcess:
        proc = ctx.Process(target=_worker, args=(args, index, slots, served), name=f"duplex-worker-{index}")
        proc.start()
        log.info("worker %d started (pid %d)", index, proc.pid)
        return proc

    def on_signal(signum: int, _frame: Any) -> None:
        nonlocal stopping
        stopping = True
        for proc in procs:
            if proc.is_alive() and proc.pid is not None:
                with contextlib.suppress(ProcessLookupError):  # it ended meanwhile
                    os.kill(proc.pid, signal.SIGTERM)

    signal.signal(signal.SIGTERM, on_signal)
    signal.signal(signal.SIGINT, on_signal)
    status = 0
    try:
        procs += [start(i) for i in range(workers)]
        log.info("%d workers on %s:%d (their metrics in %s)", workers, config.host, config.port, shared)
        # Every worker not yet seen to end is waited on, dead or alive: a list of the live
        # ones alone lost a death to is_alive(), which reaps a worker that has just died
        # (1 run in 5 of the kill test waited on the survivor only, for good).
        ended: set[int] = set()
        while waiting := [p.sentinel for i, p in enumerate(procs) if i not in ended]:
            multiprocessing.connection.wait(waiting)  # (a dead one's sentinel stays ready)
            for index, proc in enumerate(procs):
                if index in ended or proc.exitcode is None:  # (exitcode reaps: None while it runs)
                    continue
                if stopping:
                    ended.add(index)
                    continue
                if not served[index]:
                    log.error("worker %d exited with status %s before it served: stopping", index, proc.exitcode)
                    status = proc.exitcode if proc.exitcode > 0 else 1
                    ended.add(index)
                    on_signal(signal.SIGTERM, None)
                    continue
                log.error("worker %d (pid %d) exited with status %s: replaced", index, proc.pid, proc.exitcode)
                _forget(proc, index, slots, shared)
                procs[index] = start(index)
    finally:
        for proc in procs:
            proc.join()
        shutil.rmtree(shared, ignore_errors=True)
    return status


def _forget(proc: BaseProcess, index: int, slots: Any, shared: str) -> None:
    """A dead worker's sessions stop counting, and its live gauges go."""
    from prometheus_client import multiprocess

    with slots.get_lock():
        slots[index] = 0
    if proc.pid is not None:
        multiprocess.mark_process_dead(proc.pid, shared)  # type: ignore[no-untyped-call]


def _worker(args: WorkerArgs, index: int, slots: Any, served: Any) -> None:
    """One worker: a whole server, its sessions counted in ``slots[index]``."""
    import asyncio

    from duplex.app.cli.backends import BackendError
    from duplex.app.cli.serving import serve
    from duplex.app.edge import logs
    from duplex.app.edge.capacity import Capacity

    os.setpgrp()  # a terminal's Ctrl-C reaches the supervisor alone, which passes it on once
    logs.setup(args.log_level, args.log_format)
    capacity = Capacity(args.config.max_sessions, slots, index)

    def listening() -> None:
        served[index] = 1

    try:
        asyncio.run(serve(args.config, args.choice, capacity=capacity, listening=listening))
    except BackendError as exc:
        print(f"duplex: {exc}", file=sys.stderr)
        sys.exit(2)
    except OSError as exc:
        print(f"duplex: cannot serve on {args.config.host}:{args.config.port}: {exc}", file=sys.stderr)
        sys.exit(1)
    logging.shutdown()
    os._exit(0)  # as the command does: skip the native runtimes' teardown (see main.entry)
