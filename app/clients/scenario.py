"""Scenario files: a scripted conversation and what the server must do in it.

A scenario is a TOML file (``tests/scenarios/README.md`` documents the format):
the client's settings, a ``session.update`` to send first, the user's side as
ordered ``[[step]]`` tables (speech to synthesise, WAV files, silence, noise,
coughs, typed messages, raw events, waits on server events, disconnects, a
stalled reader) and ``[[expect]]`` tables checked after the run. Parsing is
strict: an unknown key is an error naming the file and the step, so a typo
cannot silently weaken a test.
"""

from __future__ import annotations

import tomllib
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

ACTIONS = ("say", "wav", "silence", "noise", "cough", "message", "send", "wait", "disconnect", "stop_reading")
WAITS = ("first_audio", "heard", "remaining", "idle", "answered")
_STEP_OPTIONS = {
    "say": {"voice", "speed"},
    "wav": set(),
    "silence": set(),
    "noise": {"level", "seed"},
    "cough": set(),
    "message": {"respond"},
    "send": set(),
    "wait": {"seconds", "after", "timeout", "count", "where"},
    "disconnect": set(),
    "stop_reading": set(),
}
EXPECT_KINDS = (
    "event",
    "no_event",
    "transcript",
    "reply",
    "latency",
    "truncation",
    "stale_bytes",
    "reply_complete",
    "replies",
)
_EXPECT_OPTIONS = {
    "event": {"count", "min", "max", "where"},
    "no_event": {"where"},
    "transcript": {"max_wer"},
    "reply": {"max_wer"},
    "latency": {"max_ms", "min_ms"},
    "truncation": {"tolerance_ms"},
    "stale_bytes": set(),
    "reply_complete": set(),
    "replies": {"status"},
}
LATENCIES = ("response", "stop", "cancel", "first_audio")


class ScenarioError(ValueError):
    """A scenario file that cannot be run as written."""


@dataclass(frozen=True, slots=True)
class Step:
    """One thing the user (or the user's client) does."""

    action: str
    value: Any
    options: dict[str, Any] = field(default_factory=dict)


@dataclass(frozen=True, slots=True)
class Expectation:
    """One thing the server must have done by the end of the scenario."""

    kind: str
    value: Any
    options: dict[str, Any] = field(default_factory=dict)


@dataclass(frozen=True, slots=True)
class ClientSettings:
    """How the simulated client behaves."""

    frame_ms: int = 20
    ack_every_ms: int | None = 100
    input_rate: int = 24000
    output_rate: int = 24000
    voice: str = "en-us+klatt2"
    tail_s: float = 1.0
    """Silence streamed after the last step."""
    lead_in_s: float = 0.5
    """Silence streamed before the first step: a microphone is live before anyone speaks."""


@dataclass(frozen=True, slots=True)
class Scenario:
    name: str
    path: Path | None
    description: str
    client: ClientSettings
    session: dict[str, Any]
    steps: tuple[Step, ...]
    expects: tuple[Expectation, ...]
    tags: tuple[str, ...] = ()


def _fail(where: str, message: str) -> ScenarioError:
    return ScenarioError(f"{where}: {message}")


def _parse_step(raw: Any, where: str, base: Path | None) -> Step:
    if not isinstance(raw, dict):
        raise _fail(where, "a step must be a table")
    actions = [k for k in raw if k in ACTIONS]
    if len(actions) != 1:
        raise _fail(where, f"a step needs exactly one of {', '.join(ACTIONS)}; got {sorted(raw)}")
    action = actions[0]
    options = {k: v for k, v in raw.items() if k != action}
    unknown = set(options) - _STEP_OPTIONS[action]
    if unknown:
        raise _fail(where, f"{action} takes no {sorted(unknown)} (allowed: {sorted(_STEP_OPTIONS[action])})")
    value = raw[action]
    if action in ("say", "message") and not (isinstance(value, str) and value.strip()):
        raise _fail(where, f"{action} needs text")
    if action in ("silence", "cough", "noise", "stop_reading") and not (
        isinstance(value, (int, float)) and not isinstance(value, bool) and value > 0
    ):
        raise _fail(where, f"{action} needs a positive number of seconds")
    if action == "wav":
        if not isinstance(value, str):
            raise _fail(where, "wav needs a file path")
        path = Path(value) if Path(value).is_absolute() or base is None else base / value
        if not path.is_file():
            raise _fail(where, f"no WAV file at {path}")
        value = str(path)
    if action == "send" and not (isinstance(value, dict) and isinstance(value.get("type"), str)):
        raise _fail(where, "send needs an event table with a type")
    if action == "wait" and not isinstance(value, str):
        raise _fail(where, f"wait needs a trigger: one of {', '.join(WAITS)} or a server event type")
    if action == "wait" and value in ("heard", "remaining") and "seconds" not in options:
        raise _fail(where, f"wait = {value!r} needs seconds")
    if action in ("disconnect",) and value is not True:
        raise _fail(where, "disconnect = true")
    return Step(action, value, options)


def _parse_expect(raw: Any, where: str) -> Expectation:
    if not isinstance(raw, dict):
        raise _fail(where, "an expectation must be a table")
    kinds = [k for k in raw if k in EXPECT_KINDS]
    if len(kinds) != 1:
        raise _fail(where, f"an expectation needs exactly one of {', '.join(EXPECT_KINDS)}; got {sorted(raw)}")
    kind = kinds[0]
    options = {k: v for k, v in raw.items() if k != kind}
    unknown = set(options) - _EXPECT_OPTIONS[kind]
    if unknown:
        raise _fail(where, f"{kind} takes no {sorted(unknown)} (allowed: {sorted(_EXPECT_OPTIONS[kind])})")
    if kind == "latency" and raw[kind] not in LATENCIES:
        raise _fail(where, f"latency must be one of {', '.join(LATENCIES)}")
    if kind == "latency" and "max_ms" not in options and "min_ms" not in options:
        raise _fail(where, "latency needs max_ms or min_ms")
    return Expectation(kind, raw[kind], options)


def parse(data: dict[str, Any], *, name: str = "scenario", path: Path | None = None) -> Scenario:
    """Validate a scenario's parsed TOML."""
    where = str(path) if path else name
    known = {"name", "description", "tags", "client", "session", "step", "expect"}
    unknown = set(data) - known
    if unknown:
        raise _fail(where, f"unknown keys {sorted(unknown)}")
    client_raw = data.get("client", {})
    try:
        client = ClientSettings(**client_raw)
    except TypeError as exc:
        raise _fail(where, f"[client]: {exc}") from None
    base = path.parent if path else None
    steps = tuple(_parse_step(s, f"{where} step {i + 1}", base) for i, s in enumerate(data.get("step", [])))
    if not steps:
        raise _fail(where, "a scenario needs at least one [[step]]")
    expects = tuple(_parse_expect(e, f"{where} expect {i + 1}") for i, e in enumerate(data.get("expect", [])))
    session = data.get("session", {})
    if not isinstance(session, dict):
        raise _fail(where, "[session] must be a table")
    return Scenario(
        name=str(data.get("name", name)),
        path=path,
        description=str(data.get("description", "")),
        client=client,
        session=session,
        steps=steps,
        expects=expects,
        tags=tuple(data.get("tags", ())),
    )


def load(path: str | Path) -> Scenario:
    """Read and validate a scenario file."""
    p = Path(path)
    try:
        data = tomllib.loads(p.read_text())
    except (OSError, tomllib.TOMLDecodeError) as exc:
        raise ScenarioError(f"{p}: {exc}") from None
    return parse(data, name=p.stem, path=p)
