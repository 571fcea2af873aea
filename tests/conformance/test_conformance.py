"""Four real third-party Realtime clients, pinned and unmodified, against the real server.

Clients: ``openai-agents`` (Python), ``agents-js`` (npm ``@openai/agents-realtime`` in
Node), ``pipecat`` (``OpenAIRealtimeLLMService`` in a bare pipeline), ``livekit``
(``livekit-plugins-openai``'s ``RealtimeModel(...).session()`` without a room). Each
runs in its own driver process (``drivers/``, ``node/driver.mjs``) through the
recording proxy (``harness.WireProxy``). Per client, five checks, each a test:

- defaults: the client's own session settings are accepted (no ``error`` reaches the
  application or the wire) and ``session.updated`` echoes the agent's instructions;
- text_audio: a typed message gets spoken audio and the assistant's transcript lands
  in the client's history;
- spoken_turn: a recorded utterance through the client's audio input ends the turn
  (``semantic_vad``), its transcript lands in the client's history, a spoken reply
  follows;
- interruption: speech over a long reply fires the client's interruption event, the
  reply is cancelled, the assistant item is cut exactly once (whether the client sent
  its own ``conversation.item.truncate`` or not) and the client's history keeps a
  prefix of the reply; the interrupting turn gets its own reply;
- tool: a message naming ``get_weather`` makes the server call it, the client's tool
  handler runs, the SDK sends ``function_call_output`` and ``response.create``, and the
  spoken reply says the tool's output.

Failures name the client, the check and the event or field that went wrong, followed
by the wire trace. Waiting is on events; every timeout is a failure bound.
"""

from __future__ import annotations

import json
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, NoReturn

import pytest

from tests.conformance.conftest import Speech
from tests.conformance.harness import Connection, Driver, WireProxy

CLIENTS = ["openai-agents", "agents-js", "pipecat", "livekit"]

INSTRUCTIONS = "You are the conformance suite's assistant. Keep answers short."
TEXT = "Hello there, this is the conformance suite checking the text path."
# Long enough that its spoken reply (~15 s) is still playing when the interruption comes.
LONG = (
    "The quick brown fox jumps over the lazy dog near the riverbank while the sun sets slowly behind "
    "the distant hills, and the farmer counts his sheep one by one before the long night begins, "
    "humming an old song about the sea, the wind and the stars that guide the sailors home."
)
TOOL_TEXT = 'Please call get_weather {"city": "Paris"}'
TOOL_ARGS = {"city": "Paris"}
TOOL_RESULT = "The weather in {city} is sunny and 21 degrees."
INTERRUPT_AFTER_MS = 1500
"""The interrupting speech starts once this much of the long reply reached the client."""
MIN_AUDIO_BYTES = 24000
"""0.5 s of PCM16 at 24 kHz: a reply, not a click."""
TIMEOUTS = {"defaults": 20, "text_audio": 30, "spoken_turn": 45, "interruption": 60, "tool": 30}
"""Each check's failure bound inside the driver (seconds; generous for a loaded 2-core CI)."""


def words(text: str) -> list[str]:
    out = []
    for raw in text.lower().split():
        w = "".join(ch for ch in raw if ch.isalnum() or ch == "'")
        if w:
            out.append(w)
    return out


def in_order(needle: list[str], hay: list[str]) -> bool:
    """Whether ``needle``'s words appear in ``hay`` in order (a subsequence)."""
    it = iter(hay)
    return all(any(w == h for h in it) for w in needle)


@dataclass
class Outcome:
    """One check's result: the driver's report and the wire of its connections."""

    client: str
    check: str
    report: dict[str, Any]
    connections: list[Connection]
    driver: Driver

    def fail(self, what: str) -> NoReturn:
        pytest.fail(f"{self.client} / {self.check}: {what}\n{self.trace()}", pytrace=False)

    def sent(self, kind: str | None = None) -> list[dict[str, Any]]:
        return [e for c in self.connections for e in c.sent(kind)]

    def received(self, kind: str | None = None) -> list[dict[str, Any]]:
        return [e for c in self.connections for e in c.received(kind)]

    def history(self, role: str) -> list[str]:
        return [i["text"] for i in self.report.get("history", []) if i.get("role") == role and i["kind"] == "message"]

    def trace(self, limit: int = 60) -> str:
        lines = []
        for c in self.connections:
            lines.append(f"--- wire {c.path} (closed: {c.closed})")
            # Runs of one kind of event (audio appends, deltas) collapse into one line.
            rows: list[list[Any]] = []
            appends = 0
            for e in c.events:
                ev = e.event
                if ev.get("type") == "input_audio_buffer.append":  # the microphone's steady stream
                    appends += 1
                    continue
                who = "C" if e.sender == "client" else "S"
                detail = {k: v for k, v in ev.items() if k in ("response_id", "item_id", "audio_end_ms", "error")}
                if ev.get("type") == "response.done":
                    detail["status"] = ev.get("response", {}).get("status")
                head = f"{who} {ev.get('type')}"
                if str(ev.get("type", "")).endswith((".delta", ".append")):
                    if rows and rows[-1][0] == head:
                        rows[-1][1] += 1
                        continue
                    rows.append([head, 1, ""])
                else:
                    rows.append([head, 1, json.dumps(detail)[:300]])
            for head, n, detail in rows[-limit:]:
                lines.append(f"{head}{f' x{n}' if n > 1 else ''} {detail}")
            lines.append(f"(and {appends} input_audio_buffer.append from the client, not shown)")
        report = {k: v for k, v in self.report.items() if k != "history"}
        lines.append(f"--- driver report: {json.dumps(report)[:1500]}")
        lines.append(f"--- client history: {json.dumps(self.report.get('history'))[:1500]}")
        return "\n".join(lines)

    # -- what every check asserts -------------------------------------------
    def expect_clean(self) -> None:
        """The check ran, nothing went wrong on the way, and nothing timed out."""
        self.expect_ran()
        self.expect_no_errors()
        self.expect_finished()

    def expect_ran(self) -> None:
        if "crash" in self.report:
            self.fail(f"the driver crashed:\n{self.report['crash']}\n{self.driver.stderr_tail()}")
        if not self.connections:
            self.fail("the client never connected (no WebSocket reached the server)")
        refused = [c.closed for c in self.connections if c.closed and c.closed.startswith("upstream")]
        if refused:
            self.fail(f"the server refused the connection: {refused[0]}")

    def expect_no_errors(self) -> None:
        for e in self.received("error"):
            err = e.get("error", {})
            self.fail(
                f"the server sent `error` code={err.get('code')!r} param={err.get('param')!r} "
                f"event_id={err.get('event_id')!r}: {err.get('message')}"
            )
        if self.report.get("errors"):
            self.fail(f"an error reached the client application: {self.report['errors'][0]}")
        if self.report.get("mic_error"):
            self.fail(f"the client's audio input failed: {self.report['mic_error']}")

    def expect_finished(self) -> None:
        if self.report.get("waiting_for"):
            self.fail(f"timed out waiting for {self.report['waiting_for']}")

    def reply_audio(self, index: int) -> int:
        replies = self.report.get("replies", [])
        return int(replies[index]["audio_bytes"]) if len(replies) > index else 0


@pytest.fixture
def run_check(
    wire: WireProxy, drivers: Callable[[str], Driver], speech: Speech, results: dict[str, Any]
) -> Callable[[str, str], Outcome]:
    def run(client: str, check: str) -> Outcome:
        driver = drivers(client)
        tag = f"{client}/{check}"
        wire.tag = tag
        request: dict[str, Any] = {
            "check": check,
            "url": f"ws://127.0.0.1:{wire.port}/v1/realtime",
            "http_url": f"http://127.0.0.1:{wire.port}/v1",
            "instructions": INSTRUCTIONS,
            "tool_result": TOOL_RESULT,
            "timeout": TIMEOUTS[check],
            "text": {"text_audio": TEXT, "interruption": LONG, "tool": TOOL_TEXT}.get(check, ""),
            "speech": {"spoken_turn": speech.turn.path, "interruption": speech.barge_in.path}.get(check, ""),
            "interrupt_after_ms": INTERRUPT_AFTER_MS,
            "min_audio_bytes": MIN_AUDIO_BYTES,
        }

        def settled() -> bool:
            """Every session.update the client sent so far has its answer, and one of
            them echoed the instructions (or was refused)."""
            conns = wire.tagged(tag)
            updates = sum(len(c.sent("session.update")) for c in conns)
            answers = [e for c in conns for e in c.received() if e.get("type") in ("session.updated", "error")]
            echoed = any(e.get("session", {}).get("instructions") == INSTRUCTIONS for e in answers)
            errors = any(e.get("type") == "error" for e in answers)
            return updates > 0 and len(answers) >= updates and (echoed or errors)

        def on_event(event: dict[str, Any]) -> None:
            # defaults: the client has connected; let it go once the wire has settled.
            wire.wait(settled, TIMEOUTS["defaults"])
            driver.send({"cmd": "finish"})

        report = driver.call(request, TIMEOUTS[check] + 60, on_event)
        out = Outcome(client, check, report, wire.tagged(tag), driver)
        results.setdefault(client, {"versions": driver.hello.get("versions")})[check] = _observed(out)
        return out

    return run


def _observed(out: Outcome) -> dict[str, Any]:
    """What the client sent and got, for the table in docs/conformance.md."""
    updates = [e.get("session", {}) for e in out.sent("session.update")]
    return {
        "session_update_keys": [sorted(u) for u in updates],
        "turn_detection": [
            u.get("audio", {}).get("input", {}).get("turn_detection", u.get("turn_detection", "-")) for u in updates
        ],
        "client_events": dict(Counter(e.get("type") for e in out.sent())),
        "server_events": dict(Counter(e.get("type") for e in out.received())),
        "truncates_sent": [e.get("audio_end_ms") for e in out.sent("conversation.item.truncate")],
        "truncated": [e.get("audio_end_ms") for e in out.received("conversation.item.truncated")],
        "retrieved": [e.get("item", {}).get("content") for e in out.received("conversation.item.retrieved")],
        "errors": [e.get("error") for e in out.received("error")] + out.report.get("errors", []),
        "interruptions": out.report.get("interruptions"),
        "history": out.report.get("history"),
        "waiting_for": out.report.get("waiting_for"),
        "paths": [c.path for c in out.connections],
    }


# ---------------------------------------------------------------------------
# a. defaults
# ---------------------------------------------------------------------------


@pytest.mark.parametrize("client", CLIENTS)
def test_defaults(client: str, run_check: Callable[[str, str], Outcome]) -> None:
    out = run_check(client, "defaults")
    out.expect_clean()
    if not out.sent("session.update"):
        out.fail("the client sent no session.update")
    updated = out.received("session.updated")
    if not updated:
        out.fail("no session.updated answered the client's session.update")
    got = updated[-1].get("session", {}).get("instructions")
    if got != INSTRUCTIONS:
        out.fail(f"session.updated.session.instructions is {got!r}, not the agent's {INSTRUCTIONS!r}")


# ---------------------------------------------------------------------------
# b. text -> audio
# ---------------------------------------------------------------------------


@pytest.mark.parametrize("client", CLIENTS)
def test_text_to_audio(client: str, run_check: Callable[[str, str], Outcome]) -> None:
    out = run_check(client, "text_audio")
    out.expect_clean()
    if out.reply_audio(0) < MIN_AUDIO_BYTES:
        out.fail(f"the client's audio events carried {out.reply_audio(0)} bytes (response.output_audio.delta)")
    said = out.history("assistant")
    if not any(in_order(words(TEXT), words(t)) for t in said):
        out.fail(f"no assistant transcript with the reply's words in the client's history (assistant: {said!r})")
    statuses = [e.get("response", {}).get("status") for e in out.received("response.done")]
    if "completed" not in statuses:
        out.fail(f"response.done.response.status: {statuses}")


# ---------------------------------------------------------------------------
# c. spoken turn
# ---------------------------------------------------------------------------


@pytest.mark.parametrize("client", CLIENTS)
def test_spoken_turn(client: str, run_check: Callable[[str, str], Outcome], speech: Speech) -> None:
    out = run_check(client, "spoken_turn")
    out.expect_clean()
    for kind in ("input_audio_buffer.speech_started", "input_audio_buffer.committed"):
        if not out.received(kind):
            out.fail(f"no {kind} from the server")
    heard = [e.get("transcript", "") for e in out.received("conversation.item.input_audio_transcription.completed")]
    # The clip's content words (the function words may be heard differently).
    key = [w for w in words(speech.turn.text) if len(w) > 4 and w.isalpha()]
    if not any(in_order(key, words(t)) for t in heard):
        out.fail(f"conversation.item.input_audio_transcription.completed.transcript {heard!r} lacks {key}")
    users = out.history("user")
    if not any(in_order(key, words(t)) for t in users):
        out.fail(f"the user's transcript is not in the client's history (user items: {users!r}, want {key})")
    if out.reply_audio(0) < MIN_AUDIO_BYTES:
        out.fail(f"the reply's audio reaching the client: {out.reply_audio(0)} bytes")
    said = out.history("assistant")
    if not any(in_order(key, words(t)) for t in said):
        out.fail(f"the reply's transcript is not in the client's history (assistant items: {said!r})")


# ---------------------------------------------------------------------------
# d. interruption
# ---------------------------------------------------------------------------


@pytest.mark.parametrize("client", CLIENTS)
def test_interruption(client: str, run_check: Callable[[str, str], Outcome], speech: Speech) -> None:
    out = run_check(client, "interruption")
    out.expect_clean()
    if not out.report.get("interruptions"):
        out.fail("the client's interruption event never fired")
    created = out.received("response.created")
    if not created:
        out.fail("no response.created for the long message")
    first = created[0]["response"]["id"]
    items = [
        e["item"]["id"]
        for e in out.received("response.output_item.added")
        if e.get("response_id") == first and e.get("item", {}).get("type") == "message"
    ]
    if not items:
        out.fail(f"no assistant message item (response.output_item.added) in response {first}")
    item = items[0]

    events = out.received()
    done = [i for i, e in enumerate(events) if e.get("type") == "response.done" and e["response"]["id"] == first]
    if not done:
        out.fail(f"no response.done for the interrupted response {first}")
    status = events[done[0]]["response"].get("status")
    if status != "cancelled":
        out.fail(f"response.done.response.status of the interrupted reply is {status!r}, not 'cancelled'")
    late = [
        e for e in events[done[0] :] if e.get("type") == "response.output_audio.delta" and e.get("response_id") == first
    ]
    if late:
        out.fail(f"{len(late)} response.output_audio.delta of {first} came after its response.done")

    cuts = [e for e in out.received("conversation.item.truncated") if e.get("item_id") == item]
    sent_ms = (
        sum(e.get("delta_bytes", 0) for e in out.received("response.output_audio.delta") if e.get("item_id") == item)
        // 48
    )
    positions = {c.get("audio_end_ms") for c in cuts}
    if len(positions) != 1:
        mine = [e.get("audio_end_ms") for e in out.sent("conversation.item.truncate") if e.get("item_id") == item]
        # Audio of the reply the server sent after it said speech_started: a client that
        # stops playback on speech_started may take it for a new reply and cut again.
        started = next((i for i, e in enumerate(events) if e.get("type") == "input_audio_buffer.speech_started"), None)
        after = [
            e
            for e in (events[started : done[0]] if started is not None else [])
            if e.get("type") == "response.output_audio.delta" and e.get("response_id") == first
        ]
        out.fail(
            f"{len(cuts)} conversation.item.truncated for {item} at {len(positions)} positions (audio_end_ms "
            f"{[c.get('audio_end_ms') for c in cuts]}; the client's own conversation.item.truncate: {mine}; "
            f"response.output_audio.delta of {first} after input_audio_buffer.speech_started: {len(after)}): "
            "the item must end with one cut"
        )
    end_ms = cuts[0].get("audio_end_ms")
    if not isinstance(end_ms, int) or not 0 < end_ms <= sent_ms:
        out.fail(f"conversation.item.truncated.audio_end_ms {end_ms} is not within the {sent_ms} ms of audio sent")

    assistant = out.history("assistant")
    if len(assistant) < 2:
        out.fail(f"the client's history lacks the interrupted reply and the next one (assistant: {assistant!r})")
    kept, full = words(assistant[0]), words(LONG)
    if not (0 < len(kept) < len(full) and full[: len(kept)] == kept):
        out.fail(f"the interrupted reply in the client's history is {assistant[0]!r}: not a cut prefix of what it said")

    # A client that asked for the item after the cut (the Agents SDKs retrieve it) must
    # hold what the server kept.
    retrieved = [e["item"] for e in out.received("conversation.item.retrieved") if e.get("item", {}).get("id") == item]
    if retrieved:
        parts = retrieved[-1].get("content", [])
        server_kept = " ".join(str(c.get("transcript") or c.get("text") or "") for c in parts)
        if words(server_kept) != kept:
            out.fail(
                f"the client's history holds {assistant[0]!r} for {item}, the server's "
                f"conversation.item.retrieved says {server_kept!r}"
            )

    key = [w for w in words(speech.barge_in.text) if len(w) > 4 and w.isalpha()]
    # Joined: on a starved CPU the interrupting turn may end early and go on as a second
    # turn; how turns are split is the spoken-turn check's business, not this one's.
    if not in_order(key, words(" ".join(out.history("user")[1:]))):
        out.fail(f"the interrupting turn is not in the client's history (user: {out.history('user')!r}, want {key})")
    later = [r["audio_bytes"] for r in out.report.get("replies", [])[1:]]
    if max(later, default=0) < MIN_AUDIO_BYTES:
        out.fail(f"no reply to the interrupting turn with audio reached the client (later replies' bytes: {later})")


# ---------------------------------------------------------------------------
# e. function tool
# ---------------------------------------------------------------------------


@pytest.mark.parametrize("client", CLIENTS)
def test_tool(client: str, run_check: Callable[[str, str], Outcome]) -> None:
    out = run_check(client, "tool")
    out.expect_ran()
    out.expect_no_errors()
    calls = out.received("response.function_call_arguments.done")
    if not calls:
        out.fail("the server never called the tool (no response.function_call_arguments.done)")
    call = calls[0]
    if call.get("name") != "get_weather" or json.loads(call.get("arguments") or "null") != TOOL_ARGS:
        out.fail(f"response.function_call_arguments.done is {call.get('name')}({call.get('arguments')})")
    out.expect_finished()
    if out.report.get("tool_calls") != [{"name": "get_weather", "arguments": TOOL_ARGS}]:
        out.fail(f"the client's tool handler ran as {out.report.get('tool_calls')}")

    sent = out.sent()
    outputs = [
        i
        for i, e in enumerate(sent)
        if e.get("type") == "conversation.item.create" and e.get("item", {}).get("type") == "function_call_output"
    ]
    if not outputs:
        out.fail("the client sent no conversation.item.create with a function_call_output")
    output = sent[outputs[0]]["item"]
    if output.get("call_id") != call.get("call_id"):
        out.fail(f"function_call_output.call_id {output.get('call_id')!r} is not the call's {call.get('call_id')!r}")
    result = TOOL_RESULT.format(**TOOL_ARGS)
    if not in_order(words(result), words(str(output.get("output")))):
        out.fail(f"function_call_output.output is {output.get('output')!r}, not the handler's {result!r}")
    if not any(e.get("type") == "response.create" for e in sent[outputs[0] :]):
        out.fail("the client sent no response.create after its function_call_output")

    if out.reply_audio(0) < MIN_AUDIO_BYTES:
        out.fail(f"the reply after the tool brought {out.reply_audio(0)} bytes of audio")
    said = out.history("assistant")
    if not any(in_order(words(result), words(t)) for t in said):
        out.fail(f"the spoken reply does not say the tool's output {result!r} (assistant items: {said!r})")
