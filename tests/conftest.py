"""Shared fixtures: the real built-in voice, real listening parts, and a real server on a loopback port."""

from __future__ import annotations

import logging
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from contextlib import AsyncExitStack
from typing import Any

import pytest

from duplex.app.edge.config import ServerConfig
from duplex.app.edge.server import DuplexServer
from duplex.app.harness.servers import serving
from duplex.pipeline.backends import Backends
from duplex.pipeline.detectors.silero_vad import SileroVad
from duplex.pipeline.detectors.smart_turn import SmartTurn
from duplex.pipeline.recognizers.whisper import WhisperRecognizer
from duplex.pipeline.talkers.espeak import EspeakRuntime, EspeakTalker
from duplex.pipeline.vocoders.pcm import PcmVocoder


@pytest.fixture(scope="session")
def espeak_runtime() -> Iterator[EspeakRuntime]:
    runtime = EspeakRuntime()
    yield runtime
    runtime.close()


@pytest.fixture(scope="session")
def vad_model() -> SileroVad:
    return SileroVad()


@pytest.fixture(scope="session")
def recognizer() -> WhisperRecognizer:
    """Whisper tiny.en, loaded once for the whole run."""
    recognizer = WhisperRecognizer("tiny.en")
    recognizer.load()
    return recognizer


@pytest.fixture(scope="session")
def turn_model() -> SmartTurn:
    """Smart Turn v3.2, loaded once for the whole run."""
    model = SmartTurn()
    model.load()
    return model


@pytest.fixture
def talker(espeak_runtime: EspeakRuntime) -> EspeakTalker:
    return EspeakTalker(espeak_runtime)


@pytest.fixture
def backends(
    talker: EspeakTalker, vad_model: SileroVad, recognizer: WhisperRecognizer, turn_model: SmartTurn
) -> Backends:
    """The embedded default: eSpeak, PCM, echo, Silero, Whisper tiny.en, Smart Turn."""
    return Backends(talker, PcmVocoder(), voice_activity=vad_model, recognizer=recognizer, turn_model=turn_model)


# The eSpeak-driven tests exercise the silence-window detector (Smart Turn is at chance on
# robotic speech); semantic_vad, the served default, is tested on natural voices.
TEST_SERVER = {"host": "127.0.0.1", "port": 0, "turn_detection": "server_vad"}


@pytest.fixture
def server_config() -> ServerConfig:
    return ServerConfig(**TEST_SERVER)


@pytest.fixture
async def server(backends: Backends, server_config: ServerConfig) -> AsyncIterator[DuplexServer]:
    async with serving(backends, server_config) as srv:
        yield srv


@pytest.fixture
async def make_server(backends: Backends) -> AsyncIterator[Callable[..., Awaitable[DuplexServer]]]:
    """Start servers with custom configuration; all are closed afterwards."""
    async with AsyncExitStack() as started:

        async def make(**config: Any) -> DuplexServer:
            return await started.enter_async_context(serving(backends, ServerConfig(**{**TEST_SERVER, **config})))

        yield make


class _Tracebacks(logging.Handler):
    """Collects every log record that carries a traceback."""

    def __init__(self) -> None:
        super().__init__(logging.DEBUG)
        self.records: list[logging.LogRecord] = []

    def emit(self, record: logging.LogRecord) -> None:
        if record.exc_info or record.levelno >= logging.ERROR:
            self.records.append(record)


@pytest.fixture(autouse=True)
def no_traceback_in_the_log() -> Iterator[None]:
    """Bad input gets an error event, never a traceback: any test that makes the
    server (or the WebSocket library under it) log one fails."""
    handler = _Tracebacks()
    root = logging.getLogger()
    root.addHandler(handler)
    try:
        yield
    finally:
        root.removeHandler(handler)
    if handler.records:
        r = handler.records[0]
        pytest.fail(
            f"{len(handler.records)} log record(s) with a traceback or error, first: {r.name}: {r.getMessage()}",
            pytrace=False,
        )
