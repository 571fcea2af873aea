"""Server configuration: every limit explicit, with defaults a laptop can live with.

This is the one source of truth for the server's settings: a field declared with
:func:`option` is also a ``duplex serve`` flag (its name, default and help come
from here), and the per-session limits are nested, not copied.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from duplex.app.core.limits import INPUT_IDLE_S, SessionLimits
from duplex.app.core.protocol import DEFAULT_PORT
from duplex.app.core.settings import TurnDetectionType
from duplex.app.edge.http import web_root
from duplex.pipeline.stages import StageQueues
from duplex.pipeline.talker import DEFAULT_VOICE

DEFAULT_HOST = "127.0.0.1"


def option(default: Any, help: str, **flag: Any) -> Any:
    """A config field that is also a command-line flag. ``flag`` may set ``name``
    (default: ``--field-name``), ``env`` (an environment variable to default from),
    ``choices`` and ``metavar``."""
    meta = {"help": help, **flag}
    if isinstance(default, (list, dict, set)):
        raise TypeError("mutable defaults need a factory")
    return field(default=default, metadata=meta)


@dataclass(slots=True)
class ServerConfig:
    """How the server listens and what it allows."""

    host: str = option(DEFAULT_HOST, "address to bind")
    port: int = option(DEFAULT_PORT, "port")
    voice: str = option(
        DEFAULT_VOICE,
        "default voice: an OpenAI voice name (alloy, marin, cedar, ...), a Kokoro voice, or espeak:<voice>",
    )
    turn_detection: TurnDetectionType = option(
        "semantic_vad",
        "how a new session hears the end of a turn: semantic_vad (an end-of-turn model and the transcript) "
        "or server_vad (a fixed silence); a client may choose per session",
    )
    """Every served session starts with this, not the core's (the protocol's) server_vad:
    see :class:`~duplex.app.core.settings.TurnDetection`."""
    echo_cancellation: bool = option(
        True,
        "cancel the reply's echo in a session's microphone (a speakerphone; WebRTC's AEC3, with the reply "
        "as played for its reference); a client may choose per session (echo_cancellation, or "
        "noise_reduction near_field: off, far_field: on)",
    )
    max_sessions: int = option(200, "sessions at once, all workers together; more are refused with 503")
    workers: int = option(
        1,
        "server processes on the port (Linux: SO_REUSEPORT), each with its own event loop and models; one "
        "session limit and one /metrics for all; a worker that dies is replaced",
    )
    max_message_bytes: int = option(
        2 * 1024 * 1024, "largest client message; a larger one closes the session (1009) before it is buffered"
    )
    api_key: str | None = option(
        None,
        "require this key (Bearer header, api_key query, or key subprotocol); default: $DUPLEX_API_KEY, else none",
        env="DUPLEX_API_KEY",
    )
    allowed_origins: tuple[str, ...] = option(
        (),
        "a browser origin allowed to open sessions (repeatable; '*' for any); default: the server's own page",
        name="--allow-origin",
    )
    idle_timeout_s: float = option(600.0, "close a session that sends nothing this long (s)", name="--idle-timeout")
    stall_timeout_s: float = option(30.0, "close a client that has not read for this long (s)", name="--stall-timeout")
    loop_share: float = option(
        0.5,
        "share of the event loop that handling client messages may take, all sessions together; each "
        "session gets an even part of it (a session streaming in real time needs under 1%%)",
    )
    hearing_budget: float = option(
        0.35,
        "share of the event loop that hearing real-time microphones may take, all sessions together: "
        "beyond it new sessions are refused (503), and beyond 1.5 times it the newest streaming one is "
        "closed (1013)",
    )
    """Measured (scripts/bench_microphones.py, 2 cores): 20 microphones of quiet noise took 0.31
    of the loop with a victim's round trip at idle; 30 took 0.54 and tripled it."""
    memory_budget_mb: int = option(
        1024, "memory sessions may add to the server; beyond it new sessions are refused (503)"
    )
    audio_api: bool = option(
        True,
        "also serve OpenAI's POST /v1/audio/speech (streamed from this server's voices) and "
        "/v1/audio/transcriptions (its recogniser), under the same key: other Duplex front ends' --talker openai "
        "and --asr openai",
    )
    drain_timeout_s: float = option(
        30.0,
        "on SIGTERM or POST /admin/drain: how long replies in progress may go on before every session is "
        "closed (s); new sessions are refused meanwhile (503)",
        name="--drain-timeout",
    )
    limits: SessionLimits = field(default_factory=SessionLimits)
    """What each session may do."""
    # Not flags: the edge's own buffers and where the page lives.
    web_dir: Path = field(default_factory=web_root)
    max_queued_messages: int = 4
    """Messages the WebSocket layer holds while a session is busy; then it stops reading
    (with messages of at most ``max_message_bytes``, a bound on what a client can park)."""
    max_unsent_bytes: int = 1024 * 1024
    """Bytes a client may leave unread (replies, pongs, anything); over it, it is dropped."""
    input_idle_s: float = INPUT_IDLE_S
    """A client that sent no input for this long is no longer streaming: pacing
    falls back from the input clock to the wall clock."""
    write_limit: int = 64 * 1024
    """High-water mark of a connection's socket write buffer."""
    queues: StageQueues = field(default_factory=StageQueues)
    """Bounds of the queues between a reply's stages."""
