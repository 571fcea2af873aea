"""The stages one server runs, behind their Protocols."""

from __future__ import annotations

from dataclasses import dataclass, field

from duplex.pipeline.recognizer import Recognizer
from duplex.pipeline.talker import Talker
from duplex.pipeline.thinker import EchoThinker, Thinker
from duplex.pipeline.turn_model import TurnModel
from duplex.pipeline.vocoder import Vocoder
from duplex.pipeline.voice_activity import VoiceActivity


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

    async def aclose(self) -> None:
        """Stop every backend that holds workers or an engine."""
        try:
            if self.turn_model is not None:
                await self.turn_model.aclose()
            if self.recognizer is not None:
                await self.recognizer.aclose()
            await self.thinker.aclose()
        finally:
            await self.talker.aclose()
