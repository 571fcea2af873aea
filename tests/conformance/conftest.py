"""Fixtures of the conformance suite: one real ``duplex serve``, the recording proxy in
front of it, the four client drivers (started on first use) and the speech they send.
Module-scoped: all of it goes when the suite's tests are done, before the rest of the
test run.

The server is a child process (``ServerProcess``): the Node client needs a real port,
and the clients must not share the server's GIL. It runs the offline defaults
(echo thinker, Whisper tiny.en, Smart Turn with ``semantic_vad``) with the eSpeak
voice: the protocol is the same as with Kokoro, and eSpeak's near-zero CPU leaves the
2-core CI machine to the four clients and the recogniser.
"""

from __future__ import annotations

import importlib.util
import json
import shutil
import sys
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from lab.servers import ServerProcess
from tests.conformance.harness import Driver, WireProxy, pcm24k
from tests.util import need

HERE = Path(__file__).parent
REPO = HERE.parent.parent
VOICES = REPO / "tests" / "voices"
AGENTS_VENV = HERE / ".venv-agents"
NODE_DIR = HERE / "node"
INSTALL = "bash tests/conformance/install.sh"


@dataclass(frozen=True)
class Utterance:
    path: str
    """Raw PCM16, 24 kHz mono."""
    text: str
    """What the clip says (the corpus manifest)."""


@dataclass(frozen=True)
class Speech:
    turn: Utterance
    """A clear, finished request: the spoken turn."""
    barge_in: Utterance
    """Said over the long reply: the interruption."""


def _python_has(*modules: str) -> bool:
    return all(importlib.util.find_spec(m) is not None for m in modules)


def _launch(client: str) -> tuple[list[str], bool, str]:
    """How to start ``client``'s driver, whether it is installed, and what is missing."""
    drivers = HERE / "drivers"
    if client == "openai-agents":
        python = AGENTS_VENV / "bin" / "python"
        return [str(python), str(drivers / "agents_driver.py")], python.exists(), f"{AGENTS_VENV} ({INSTALL})"
    if client == "agents-js":
        installed = shutil.which("node") is not None and (NODE_DIR / "node_modules" / "@openai").is_dir()
        return ["node", str(NODE_DIR / "driver.mjs")], installed, f"node and {NODE_DIR}/node_modules ({INSTALL})"
    if client == "pipecat":
        ok = _python_has("pipecat", "wait_for2", "loudness", "sentencex", "aiofiles", "loguru")
        return (
            [sys.executable, str(drivers / "pipecat_driver.py")],
            ok,
            f"pipecat-ai's realtime dependencies ({INSTALL})",
        )
    if client == "livekit":
        ok = _python_has("livekit.plugins.openai")
        return [sys.executable, str(drivers / "livekit_driver.py")], ok, f"livekit-plugins-openai ({INSTALL})"
    raise ValueError(client)


@pytest.fixture(scope="session")
def conformance_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("conformance")


@pytest.fixture(scope="module")
def duplex(conformance_dir: Path) -> Iterator[ServerProcess]:
    log = conformance_dir / "server.log"
    # The echo thinker: each check looks for the user's own words (or the tool's output)
    # in the reply, which only a thinker that says them back gives every time. The shipped
    # chat model is driven by the same clients in test_conformance_model.py.
    server = ServerProcess("--talker", "espeak", "--thinker", "echo", log=log)
    try:
        server.start()
    except RuntimeError as exc:
        tail = log.read_text(errors="replace")[-3000:] if log.exists() else ""
        raise RuntimeError(f"{exc}\n--- server log (tail) ---\n{tail}") from exc
    try:
        yield server
    finally:
        server.stop()


@pytest.fixture(scope="module")
def wire(duplex: ServerProcess) -> Iterator[WireProxy]:
    proxy = WireProxy(duplex.port)
    proxy.start()
    try:
        yield proxy
    finally:
        proxy.stop()


@pytest.fixture(scope="session")
def speech(conformance_dir: Path) -> Speech:
    manifest = {c["file"]: c for c in json.loads((VOICES / "manifest.json").read_text())["clips"]}

    def utterance(name: str) -> Utterance:
        out = pcm24k(VOICES / name, conformance_dir / name.replace(".wav", ".pcm"))
        return Utterance(str(out), manifest[name]["text"])

    # Kokoro voices Whisper tiny.en hears word for word (see tests/voices/README.md).
    return Speech(turn=utterance("turn_14_bm_george.wav"), barge_in=utterance("turn_06_am_michael.wav"))


@pytest.fixture(scope="module")
def drivers(conformance_dir: Path) -> Iterator[Callable[[str], Driver]]:
    """``drivers(client)``: the client's driver process, started on first use."""
    started: dict[str, Driver] = {}

    def get(client: str) -> Driver:
        argv, installed, missing = _launch(client)
        need(installed, f"{client}: not installed: {missing}")
        if client not in started:
            driver = Driver(client, argv, REPO, conformance_dir / f"driver-{client}.log")
            started[client] = driver
            driver.start()
        return started[client]

    try:
        yield get
    finally:
        for driver in started.values():
            driver.stop()


@pytest.fixture(scope="module")
def results() -> Iterator[dict[str, Any]]:
    """Per client and check: what was observed (written to artifacts/ for docs/conformance.md)."""
    table: dict[str, Any] = {}
    yield table
    if table:
        out = REPO / "artifacts" / "conformance.json"
        out.parent.mkdir(exist_ok=True)
        out.write_text(json.dumps(table, indent=2, sort_keys=True))
