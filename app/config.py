"""Server configuration: every limit explicit, with defaults a laptop can live with."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from pipeline.engine import EngineConfig

DEFAULT_HOST = "127.0.0.1"
DEFAULT_PORT = 8765
WEB_DIR = Path(__file__).resolve().parent.parent / "web"


@dataclass(slots=True)
class ServerConfig:
    """How the server listens and what it allows."""

    host: str = DEFAULT_HOST
    port: int = DEFAULT_PORT
    web_dir: Path = WEB_DIR
    max_message_bytes: int = 2 * 1024 * 1024
    """A larger message gets an ``error`` event and is dropped; the session lives on."""
    max_frame_bytes: int = 16 * 1024 * 1024
    """Beyond this the WebSocket layer refuses to buffer the frame and closes (1009)."""
    max_sessions: int = 200
    max_input_buffer_bytes: int = 15 * 1024 * 1024
    input_idle_s: float = 0.3
    """A client that sent no input for this long is no longer streaming: pacing
    falls back from the input clock to the wall clock."""
    write_limit: int = 64 * 1024
    """High-water mark of a connection's socket write buffer."""
    engine: EngineConfig = field(default_factory=EngineConfig)
    voice: str = "alloy"
    # Access
    api_key: str | None = None
    """When set, a session needs it (Bearer header, api_key query or key subprotocol)."""
    allowed_origins: tuple[str, ...] = ()
    """Browser origins that may open sessions; empty: the server's own page only."""
    # Limits
    max_input_speed: float = 64.0
    """Input audio may arrive at most this many times faster than real time..."""
    input_burst_s: float = 30.0
    """...after a burst of this many seconds (a replay catching up, a reconnect)."""
    max_reply_s: float = 300.0
    """A reply stops (status incomplete) after this much audio."""
    idle_timeout_s: float = 600.0
    """A session that sends nothing for this long is closed."""
    stall_timeout_s: float = 30.0
    """A client that stops reading is closed once a send has waited this long."""
    asr_workers: int = 2
    """Recognition worker processes (one decoder, ~100 MB, each); turns queue for them."""
