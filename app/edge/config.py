"""Server configuration: every limit explicit, with defaults a laptop can live with.

This is the one source of truth for the server's settings: a field declared with
:func:`option` is also a ``duplex serve`` flag (its name, default and help come
from here), and the per-session limits are nested, not copied.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from duplex.app.core.limits import SessionLimits
from duplex.app.core.protocol import DEFAULT_PORT
from duplex.app.edge.http import web_root
from duplex.pipeline.stages import StageQueues

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
    voice: str = option("alloy", "default voice (an OpenAI voice name such as alloy, or an eSpeak NG voice)")
    max_sessions: int = option(200, "sessions at once; more are refused with 503")
    max_message_bytes: int = option(2 * 1024 * 1024, "a larger client message gets an error event and is dropped")
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
    limits: SessionLimits = field(default_factory=SessionLimits)
    """What each session may do."""
    # Not flags: the edge's own buffers and where the page lives.
    web_dir: Path = field(default_factory=web_root)
    max_frame_bytes: int = 16 * 1024 * 1024
    """Beyond this the WebSocket layer refuses to buffer the frame and closes (1009)."""
    input_idle_s: float = 0.3
    """A client that sent no input for this long is no longer streaming: pacing
    falls back from the input clock to the wall clock."""
    write_limit: int = 64 * 1024
    """High-water mark of a connection's socket write buffer."""
    queues: StageQueues = field(default_factory=StageQueues)
    """Bounds of the queues between a reply's stages."""
