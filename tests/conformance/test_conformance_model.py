"""The OpenAI Agents SDKs' tool flow against the default server: the shipped chat model,
not the echo, decides to call the agent's ``@function_tool``, writes its arguments, and
speaks an answer from its output. The same drivers and checks as test_conformance.py
(the server fixture is this module's own: every default but the voice, eSpeak for speed)."""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from lab.servers import ServerProcess
from tests.conformance.test_conformance import (  # noqa: F401 (run_check: the fixture)
    MIN_AUDIO_BYTES,
    TIMEOUTS,
    Outcome,
    run_check,
)


@pytest.fixture(autouse=True)
def model_time(monkeypatch: pytest.MonkeyPatch) -> None:
    """The shipped model reads the tools' schemas and writes its call on two shared cores,
    beside a suite's other servers: its bound is 90 s, not the echo's 30 (a failure bound;
    nothing waits for it when the model is quick)."""
    monkeypatch.setitem(TIMEOUTS, "tool", 90)


@pytest.fixture(scope="module")
def duplex(conformance_dir: Path) -> Iterator[ServerProcess]:
    log = conformance_dir / "server-model.log"
    server = ServerProcess("--talker", "espeak", log=log)
    try:
        server.start()
    except RuntimeError as exc:
        tail = log.read_text(errors="replace")[-3000:] if log.exists() else ""
        raise RuntimeError(f"{exc}\n--- server log (tail) ---\n{tail}") from exc
    try:
        yield server
    finally:
        server.stop()


@pytest.mark.parametrize("client", ["openai-agents", "agents-js"])
def test_the_agents_tool_flow_with_the_shipped_model(client: str, run_check: Callable[[str, str], Outcome]) -> None:  # noqa: F811
    out = run_check(client, "tool")
    out.expect_ran()
    out.expect_no_errors()
    calls = out.received("response.function_call_arguments.done")
    if not calls or calls[0].get("name") != "get_weather":
        out.fail(f"the model did not call get_weather: {calls}")
    args = json.loads(calls[0].get("arguments") or "null")
    if not isinstance(args, dict) or str(args.get("city", "")).lower() != "paris":
        out.fail(f"the model called get_weather({calls[0].get('arguments')}), not with Paris")
    out.expect_finished()
    if out.reply_audio(0) < MIN_AUDIO_BYTES:
        out.fail(f"the reply after the tool brought {out.reply_audio(0)} bytes of audio")
    said = " ".join(out.history("assistant")).lower()
    if not any(w in said for w in ("sunny", "21", "twenty")):
        out.fail(f"the spoken reply does not tell the tool's output (assistant items: {out.history('assistant')!r})")


@pytest.fixture(scope="module")
def results() -> dict[str, object]:
    """(Not written out: docs/conformance.md's table is the echo server's.)"""
    return {}
