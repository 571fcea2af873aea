"""Per-session bounds that protect the server (nested in the server's config)."""

from __future__ import annotations

from dataclasses import dataclass, field

INPUT_IDLE_S = 0.3
"""A client that sent no input for this long is no longer streaming: pacing falls back
from the input clock to the wall clock."""


@dataclass(frozen=True, slots=True)
class SessionLimits:
    """What one session may do. Fields with ``help`` are command-line flags too."""

    max_input_buffer_bytes: int = 15 * 1024 * 1024
    """Uncommitted input a client may hold while it commits by hand."""
    max_input_speed: float = field(
        default=64.0, metadata={"help": "input audio may arrive at most this many times faster than real time"}
    )
    input_burst_s: float = 30.0
    """...after a burst of this many seconds (a replay catching up, a reconnect)."""
    max_reply_s: float = field(default=300.0, metadata={"help": "longest reply, in seconds of audio"})
    max_pending_transcriptions: int = 4
    """Committed turns a session may have waiting for the recogniser at once."""
    max_item_chars: int = 32 * 1024
    """Text one item (or the instructions) may hold; more is refused with an error."""
    max_reply_chars: int = 32 * 1024
    """Text one reply may say; there it ends as incomplete, like a length limit."""
    max_items: int = 1000
    max_conversation_chars: int = 1024 * 1024
    """Bounds of a conversation: a client item beyond them is refused; the server's
    own items (turns, replies) make room by dropping the oldest (``item.deleted``)."""
