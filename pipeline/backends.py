"""The stages one server runs, behind their Protocols.

Every backend has one lifecycle: it is built, then ``start``-ed where its Protocol
has ``start`` (the thinker, the recogniser and the end-of-turn model, whose checks
or model loads are kept out of their constructors so a configuration fails cheaply
first), and ``aclose``-d once at shutdown. The talker, the vocoder and the voice
activity model are ready once built; their ``aclose`` is a no-op where they hold
nothing that outlives them.
"""

from __future__ import annotations

import asyncio
import logging
from dataclasses import dataclass, field
from typing import Protocol

from duplex.pipeline.arena import HoldsArena
from duplex.pipeline.echo import Cleaning
from duplex.pipeline.recognizer import Recognizer
from duplex.pipeline.talker import Talker
from duplex.pipeline.thinker import EchoThinker, Thinker
from duplex.pipeline.turn_model import TurnModel
from duplex.pipeline.vocoder import Vocoder
from duplex.pipeline.voice_activity import VoiceActivity

log = logging.getLogger("duplex.server")


class _Closable(Protocol):
    name: str

    async def aclose(self) -> None: ...


@dataclass(slots=True)
class Backends:
    """A talker and vocoder shared by every session, the thinker that decides what
    to say, and the listening parts (none: no server VAD, nothing transcribed, no
    end-of-turn model)."""

    talker: Talker
    vocoder: Vocoder
    thinker: Thinker = field(default_factory=EchoThinker)
    voice_activity: VoiceActivity | None = None
    recognizer: Recognizer | None = None
    turn_model: TurnModel | None = None
    cleaning: Cleaning | None = None
    """Cleans each session's microphone (the reply's echo, noise) before it is heard."""

    async def shrink(self) -> None:
        """Give back what the models' arenas grew to beyond the runs in progress (each
        part in turn, on a thread: ~0.5 s of one core in all; call when nobody is talking)."""
        for part in (self.turn_model, self.talker, self.voice_activity, self.recognizer, self.thinker):
            if isinstance(part, HoldsArena):
                await asyncio.to_thread(part.shrink)

    async def aclose(self) -> None:
        """Close every backend, each even if another fails; then raise the first failure.

        The listening parts go first, then the thinker (which may share the talker's
        engine), the talker, and the vocoder its audio went through.
        """
        failed: list[Exception] = []
        order: list[_Closable | None] = [
            self.turn_model,
            self.recognizer,
            self.voice_activity,
            self.thinker,
            self.talker,
            self.vocoder,
        ]
        for backend in order:
            if backend is None:
                continue
            try:
                await backend.aclose()
            except Exception as exc:  # the others still close
                if failed:
                    log.warning("closing %s also failed: %s", backend.name, exc)
                failed.append(exc)
        if failed:
            raise failed[0]
