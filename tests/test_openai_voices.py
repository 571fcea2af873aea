"""OpenAI's voice names, listed once (``duplex.pipeline.talker``), and every talker
speaks each of them, so an unmodified Realtime client's choice always works."""

from __future__ import annotations

from types import SimpleNamespace

import pytest

from duplex.pipeline.talker import DEFAULT_VOICE, OPENAI_VOICES, is_openai_voice
from duplex.pipeline.talkers import espeak, kokoro
from duplex.pipeline.talkers.codec import ORPHEUS
from duplex.pipeline.talkers.espeak import EspeakTalker
from duplex.pipeline.talkers.hibari import HibariTalker
from duplex.pipeline.talkers.kokoro import KokoroTalker
from duplex.pipeline.talkers.kokoro_model import VOICES
from duplex.pipeline.talkers.vllm import CodecTalker

# Runtimes are not needed to name voices: stand-ins keep the models unloaded.
IDLE = SimpleNamespace(making=0, capacity=1)


def test_the_one_list():
    assert len(set(OPENAI_VOICES)) == len(OPENAI_VOICES) == 10
    assert DEFAULT_VOICE == "alloy" and is_openai_voice(DEFAULT_VOICE)
    assert not is_openai_voice("heart") and not is_openai_voice(None)


def test_every_mapping_is_keyed_by_the_one_list():
    assert set(espeak.VOICE_ALIASES) == set(OPENAI_VOICES)
    assert set(kokoro.VOICE_ALIASES) == set(OPENAI_VOICES)
    assert set(kokoro.VOICE_ALIASES.values()) <= set(VOICES)


@pytest.mark.parametrize("name", OPENAI_VOICES)
def test_every_talker_speaks_every_openai_voice(name: str, talker: EspeakTalker):
    talker.check_voice(name)
    assert talker.resolve_voice(name) != name, "an eSpeak NG voice of its own"
    neural = KokoroTalker(IDLE, talker)
    neural.check_voice(name)
    assert neural.resolve_voice(name) in VOICES
    for kokoro_talker in (None, neural):
        hibari = HibariTalker(IDLE, talker, kokoro=kokoro_talker)
        hibari.check_voice(name)
        assert name in hibari.names()
    codec = CodecTalker(SimpleNamespace(artifact_id="test"), ORPHEUS)
    codec.check_voice(name)
    assert codec.resolve_voice(name) == ORPHEUS.default_voice
