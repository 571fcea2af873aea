"""Shared fixtures: the real built-in voice and a real server on a loopback port."""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterator
from contextlib import AsyncExitStack

import pytest

from app.config import ServerConfig
from app.server import DuplexServer
from pipeline.asr import PocketsphinxRecognizer
from pipeline.talkers.espeak import EspeakRuntime, EspeakTalker
from pipeline.vad import SileroModel
from pipeline.vocoders.pcm import PcmVocoder
from tests.util import serving


@pytest.fixture(scope="session")
def espeak_runtime() -> Iterator[EspeakRuntime]:
    runtime = EspeakRuntime()
    yield runtime
    runtime.close()


@pytest.fixture(scope="session")
def vad_model() -> SileroModel:
    return SileroModel()


@pytest.fixture(scope="session")
def recognizer() -> Iterator[PocketsphinxRecognizer]:
    recognizer = PocketsphinxRecognizer(workers=1)
    yield recognizer
    recognizer.close()


@pytest.fixture
def talker(espeak_runtime: EspeakRuntime) -> EspeakTalker:
    return EspeakTalker(espeak_runtime)


@pytest.fixture
def server_config() -> ServerConfig:
    return ServerConfig(host="127.0.0.1", port=0)


@pytest.fixture
async def server(talker: EspeakTalker, server_config: ServerConfig, vad_model, recognizer) -> AsyncIterator[DuplexServer]:
    async with serving(talker, PcmVocoder(), config=server_config, vad_model=vad_model, recognizer=recognizer) as srv:
        yield srv


@pytest.fixture
async def make_server(talker: EspeakTalker, vad_model, recognizer) -> AsyncIterator:
    """Start servers with custom configuration; all are closed afterwards."""
    async with AsyncExitStack() as started:
        async def make(**config) -> DuplexServer:
            return await started.enter_async_context(serving(
                talker, PcmVocoder(), config=ServerConfig(**{"host": "127.0.0.1", "port": 0, **config}),
                vad_model=vad_model, recognizer=recognizer))

        yield make

