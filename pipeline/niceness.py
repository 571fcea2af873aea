"""Thread priorities for the voices' synthesis threads.

Linux keeps a nice value per thread, and the threads a thread starts inherit it, so a
model built on a niced thread has its native thread pool niced too (Kokoro's threads
make way for the listening when the CPU is short).

The listening models (Whisper, Smart Turn) are not niced, though it was tried: at
nice 5, twenty sessions' end of turn went from 3.0 to 1.4 s median and their duck from
2.3 s to 0.13 s (the event loop, which hears every session, was served first), but
one session's held-out end of turn waited 1.81 s on the models instead of 0.20 s.
"""

from __future__ import annotations

import contextlib
import os
import threading
from collections.abc import Callable
from typing import TypeVar

T = TypeVar("T")


def set_nice(nice: int) -> None:
    """Give the calling thread ``nice`` (Linux keeps one per thread; threads it starts inherit it)."""
    with contextlib.suppress(OSError, AttributeError):  # not Linux, or not allowed: as is
        os.setpriority(os.PRIO_PROCESS, threading.get_native_id(), nice)


def built_at(nice: int, make: Callable[[], T], name: str) -> T:
    """``make()`` run on a fresh thread at ``nice`` (blocking): the threads it starts
    (onnxruntime's) inherit it, and the caller's own priority is untouched."""
    out: list[T | BaseException] = []

    def run() -> None:
        try:
            set_nice(nice)
            out.append(make())
        except BaseException as exc:  # raised again on the caller's thread
            out.append(exc)

    t = threading.Thread(target=run, name=name)
    t.start()
    t.join()
    result = out[0]
    if isinstance(result, BaseException):
        raise result
    return result
