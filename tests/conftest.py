"""Shared fixtures: the real built-in voice, real listening parts, and a real server on a loopback port."""

from __future__ import annotations

import logging
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from contextlib import AsyncExitStack
from pathlib import Path
from typing import Any

import pytest

from duplex.app.edge.config import ServerConfig
from duplex.app.edge.server import DuplexServer
from duplex.pipeline.backends import Backends
from duplex.pipeline.detectors.silero_vad import SileroVad
from duplex.pipeline.detectors.smart_turn import SmartTurn
from duplex.pipeline.recognizers.whisper import WhisperRecognizer
from duplex.pipeline.talkers.espeak import EspeakRuntime, EspeakTalker
from duplex.pipeline.vocoders.pcm import PcmVocoder
from lab.servers import serving

TESTS = Path(__file__).parent


# Every test module in exactly one part, by its path under tests/ (no ``.py``): the
# part is its marker, so ``pytest -m core`` runs the core's tests (tests/test_groups.py
# keeps this table whole). The markers are registered in pyproject.toml.
GROUPS: dict[str, tuple[str, ...]] = {
    # The sans-I/O core: session, replies, listening, hearing, the wire, pacing, states.
    "core": (
        "test_context",
        "test_core_docs",
        "test_eot_fit",
        "test_floor",
        "test_fuzz",
        "test_hearing",
        "test_intake",
        "test_levels",
        "test_listening",
        "test_names",
        "test_pacing",
        "test_replies",
        "test_session",
        "test_stall",
        "test_states",
        "test_tool_settings",
        "test_tools",
        "test_turn_taking",
        "test_wire",
    ),
    # Backends and the pipeline: talkers, vocoders, recognisers, VAD, vLLM, stages, stream.
    "backends": (
        "test_asr_remote",
        "test_chat_weights",
        "test_contracts",
        "test_enhancer",
        "test_engine_cache",
        "test_stages",
        "test_espeak",
        "test_hibari",
        "test_kokoro",
        "test_lifecycle",
        "test_local_thinker",
        "test_openai_http",
        "test_openai_voices",
        "test_recognition",
        "test_resampling",
        "test_schedule",
        "test_segmenter",
        "test_stream",
        "test_talker_pool",
        "test_vad",
        "test_vllm",
        "test_vllm_remote",
        "test_vocoder",
    ),
    # The server over real sockets.
    "server": (
        "test_audio_api",
        "test_calls",
        "test_cli",
        "test_drain",
        "test_workers",
        "test_conversation",
        "test_duplex",
        "test_echo_canceller",
        "test_linear_echo",
        "test_hearing_e2e",
        "test_realtime_features",
        "test_scenarios",
        "test_server",
    ),
    # Attacks, fuzzing over HTTP, resources, fairness, hardening.
    "hardening": (
        "test_attacks",
        "test_attacks_surfaces",
        "test_fairness",
        "test_fuzz_http",
        "test_hardening",
        "test_hearing_budget",
        "test_resources",
    ),
    # Duplex's own clients and the official SDK.
    "clients": (
        "test_browser",
        "test_browser_sdk",
        "test_mic",
        "test_server_sdk",
    ),
    # Third-party Realtime clients, pinned and unmodified.
    "conformance": ("conformance/test_conformance", "conformance/test_conformance_model"),
    # The wheel, the architecture, the static checks, the test corpus and this table.
    "packaging": (
        "test_architecture",
        "test_groups",
        "test_static",
        "test_voices_corpus",
        "test_wheel",
    ),
}

_GROUP_OF = {module: group for group, modules in GROUPS.items() for module in modules}


def module_name(path: Path) -> str | None:
    """A test file's name in :data:`GROUPS` (None outside tests/)."""
    try:
        return path.resolve().relative_to(TESTS.resolve()).with_suffix("").as_posix()
    except ValueError:
        return None


@pytest.hookimpl(tryfirst=True)  # before ``-m`` deselects by marker
def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Mark every test with its module's part."""
    for item in items:
        group = _GROUP_OF.get(module_name(item.path) or "")
        if group is not None:
            item.add_marker(getattr(pytest.mark, group))


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
