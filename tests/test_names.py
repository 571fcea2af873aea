"""Closed sets of names, defined once: every table keyed by one covers it all."""

from __future__ import annotations

from duplex.app.core.listening import DETECTORS
from duplex.app.core.listening.semantic import EAGERNESS
from duplex.app.core.settings import EAGERNESS_NAMES, TURN_DETECTION_TYPES, SessionSettings, TurnDetection
from duplex.app.edge.config import ServerConfig
from duplex.pipeline.talker import DEFAULT_VOICE, OPENAI_VOICES


def test_every_turn_detection_type_has_a_detector_and_every_eagerness_a_policy():
    assert set(DETECTORS) == set(TURN_DETECTION_TYPES)
    assert set(EAGERNESS) == set(EAGERNESS_NAMES)


def test_the_defaults_are_stated_once_and_the_servers_turn_detection_wins_for_a_served_session():
    assert SessionSettings().voice == ServerConfig().voice == DEFAULT_VOICE and DEFAULT_VOICE in OPENAI_VOICES
    assert TurnDetection().type == "server_vad", "the protocol's default, for a session built bare"
    assert ServerConfig().turn_detection == "semantic_vad", "what `duplex serve` starts every session with"
