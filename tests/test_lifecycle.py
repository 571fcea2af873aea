"""Every backend has the one lifecycle its Protocol says (``aclose`` on all six kinds,
``start`` where loading or checking is kept out of the constructor), and
``Backends.aclose`` closes every one of them, whichever fails."""

from __future__ import annotations

import inspect
import logging

import pytest

from duplex.pipeline.backends import Backends
from duplex.pipeline.detectors.silero_vad import SileroVad
from duplex.pipeline.detectors.smart_turn import SmartTurn
from duplex.pipeline.recognizer import Recognizer
from duplex.pipeline.recognizers.openai_remote import OpenAIRecognizer
from duplex.pipeline.recognizers.pocketsphinx import PocketsphinxRecognizer
from duplex.pipeline.recognizers.tiered import TieredWhisper
from duplex.pipeline.recognizers.whisper import WhisperRecognizer
from duplex.pipeline.talker import Talker
from duplex.pipeline.talkers.espeak import EspeakTalker
from duplex.pipeline.talkers.hibari import HibariTalker
from duplex.pipeline.talkers.kokoro import KokoroTalker
from duplex.pipeline.talkers.vllm import CodecTalker
from duplex.pipeline.thinker import EchoThinker, Thinker
from duplex.pipeline.thinkers.openai_chat import OpenAIChatThinker
from duplex.pipeline.thinkers.vllm_chat import VllmChatThinker
from duplex.pipeline.turn_model import TurnModel
from duplex.pipeline.vocoder import Vocoder
from duplex.pipeline.vocoders.pcm import PcmVocoder
from duplex.pipeline.vocoders.snac import SnacVocoder
from duplex.pipeline.voice_activity import VoiceActivity

KINDS: dict[type, tuple[type, ...]] = {
    Talker: (EspeakTalker, KokoroTalker, HibariTalker, CodecTalker),
    Vocoder: (PcmVocoder, SnacVocoder),
    Thinker: (EchoThinker, OpenAIChatThinker, VllmChatThinker),
    Recognizer: (TieredWhisper, WhisperRecognizer, OpenAIRecognizer, PocketsphinxRecognizer),
    VoiceActivity: (SileroVad,),
    TurnModel: (SmartTurn,),
}
STARTED = {Thinker, Recognizer, TurnModel}


@pytest.mark.parametrize("protocol", list(KINDS), ids=lambda p: p.__name__)
def test_every_backend_has_its_protocols_lifecycle(protocol: type):
    assert inspect.iscoroutinefunction(protocol.aclose)
    assert hasattr(protocol, "start") == (protocol in STARTED)
    for impl in KINDS[protocol]:
        assert inspect.iscoroutinefunction(impl.aclose), impl
        if protocol in STARTED:
            assert inspect.iscoroutinefunction(impl.start), impl


class _Part:
    """Any backend: records its close in ``closed``, failing if told to."""

    def __init__(self, name: str, closed: list[str], fail: bool = False) -> None:
        self.name = name
        self._closed = closed
        self._fail = fail

    async def aclose(self) -> None:
        self._closed.append(self.name)
        if self._fail:
            raise RuntimeError(f"{self.name} would not close")


def _backends(closed: list[str], *failing: str) -> Backends:
    names = ("talker", "vocoder", "thinker", "voice_activity", "recognizer", "turn_model")
    parts = [_Part(n, closed, n in failing) for n in names]
    return Backends(*parts)


async def test_backends_close_every_backend():
    closed: list[str] = []
    await _backends(closed).aclose()
    assert closed == ["turn_model", "recognizer", "voice_activity", "thinker", "talker", "vocoder"]


async def test_one_failing_close_skips_none_of_the_others(caplog):
    closed: list[str] = []
    with caplog.at_level(logging.WARNING), pytest.raises(RuntimeError, match="recognizer would not close"):
        await _backends(closed, "recognizer", "talker").aclose()
    assert closed == ["turn_model", "recognizer", "voice_activity", "thinker", "talker", "vocoder"]
    assert "talker would not close" in caplog.text, "a second failure is logged, not lost"


async def test_backends_without_listening_parts_close_the_rest():
    closed: list[str] = []
    await Backends(_Part("talker", closed), _Part("vocoder", closed)).aclose()
    assert closed == ["talker", "vocoder"]
