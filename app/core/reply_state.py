"""A reply's lifecycle as data: its phases and the moves between them.

A reply is *running* from ``response.created`` to ``response.done`` (thinking, then
speaking) and then *playing out* while the client still plays what it was sent (with
pacing, up to the lead later). Speech over it ducks it (or, with ducking off, pauses
its playback) in either, until the speech is judged: resumed, or cut at what the user
had heard. Whether a reply playing out has been heard in full is a question of time
(see :class:`~duplex.app.core.pacing.Playout`), asked when it matters: the move to
HEARD is made then.
"""

from __future__ import annotations

from enum import Enum

from duplex.app.core.states import Table


class ReplyPhase(Enum):
    """Where one reply is."""

    THINKING = "thinking"
    """Created; its message not announced yet (a reply that may call a function waits for
    its first text or audio): nothing of it can have been heard."""
    SPEAKING = "speaking"
    """Running, its message announced."""
    SPEAKING_DUCKED = "speaking_ducked"
    """Running, playing on quieter while speech over it is judged."""
    SPEAKING_PAUSED = "speaking_paused"
    """Running, its output stopped while speech over it is judged (ducking off)."""
    PLAYING_OUT = "playing_out"
    """Done (``response.done`` sent); the client may still be playing it."""
    PLAYING_OUT_DUCKED = "playing_out_ducked"
    PLAYING_OUT_PAUSED = "playing_out_paused"
    HEARD = "heard"
    """Played in full before anyone spoke over it."""
    DONE = "done"
    """Done, and there is nothing to hear (text, function calls, or a client gone)."""
    CUT = "cut"
    """Truncated at what the user had heard: over."""


class ReplyEvent(Enum):
    """What happens to a reply."""

    ANNOUNCE = "announce"
    """Its message item was added (its first text or audio, or at once)."""
    DUCK = "duck"
    PAUSE = "pause"
    RESUME = "resume"
    """The speech over it was no turn: it plays on as before."""
    END = "end"
    """``response.done``, with audio to play out (completed, cancelled, failed)."""
    END_SILENT = "end_silent"
    """``response.done`` with nothing to play (a text reply, function calls alone, a
    reply cancelled before it spoke, a client that went away)."""
    PLAYED = "played"
    """The client has played everything it was sent."""
    CUT = "cut"
    """Truncated (by the user's turn over it, or by the client)."""


_P, _E = ReplyPhase, ReplyEvent
RUNNING = frozenset({_P.THINKING, _P.SPEAKING, _P.SPEAKING_DUCKED, _P.SPEAKING_PAUSED})
DUCKED = frozenset({_P.SPEAKING_DUCKED, _P.PLAYING_OUT_DUCKED})
PAUSED = frozenset({_P.SPEAKING_PAUSED, _P.PLAYING_OUT_PAUSED})
AUDIBLE = frozenset({*RUNNING - {_P.THINKING}, _P.PLAYING_OUT, *DUCKED, *PAUSED})
"""Phases in which the user may be hearing the reply (or be about to)."""

MOVES: Table[ReplyPhase, ReplyEvent] = Table(
    "reply",
    {
        (_P.THINKING, _E.ANNOUNCE): _P.SPEAKING,
        (_P.THINKING, _E.END_SILENT): _P.DONE,
        (_P.SPEAKING, _E.DUCK): _P.SPEAKING_DUCKED,
        (_P.SPEAKING, _E.PAUSE): _P.SPEAKING_PAUSED,
        (_P.SPEAKING, _E.END): _P.PLAYING_OUT,
        (_P.SPEAKING, _E.END_SILENT): _P.DONE,
        (_P.SPEAKING_DUCKED, _E.RESUME): _P.SPEAKING,
        (_P.SPEAKING_DUCKED, _E.PAUSE): _P.SPEAKING_PAUSED,
        (_P.SPEAKING_DUCKED, _E.END): _P.PLAYING_OUT_DUCKED,
        (_P.SPEAKING_DUCKED, _E.END_SILENT): _P.DONE,
        (_P.SPEAKING_PAUSED, _E.RESUME): _P.SPEAKING,
        (_P.SPEAKING_PAUSED, _E.END): _P.PLAYING_OUT_PAUSED,
        (_P.SPEAKING_PAUSED, _E.END_SILENT): _P.DONE,
        (_P.PLAYING_OUT, _E.DUCK): _P.PLAYING_OUT_DUCKED,
        (_P.PLAYING_OUT, _E.PAUSE): _P.PLAYING_OUT_PAUSED,
        (_P.PLAYING_OUT, _E.PLAYED): _P.HEARD,
        (_P.PLAYING_OUT, _E.CUT): _P.CUT,
        (_P.PLAYING_OUT_DUCKED, _E.RESUME): _P.PLAYING_OUT,
        (_P.PLAYING_OUT_DUCKED, _E.PAUSE): _P.PLAYING_OUT_PAUSED,
        (_P.PLAYING_OUT_DUCKED, _E.CUT): _P.CUT,
        (_P.PLAYING_OUT_PAUSED, _E.RESUME): _P.PLAYING_OUT,
        (_P.PLAYING_OUT_PAUSED, _E.CUT): _P.CUT,
        (_P.HEARD, _E.CUT): _P.CUT,
    },
)
"""Every move a reply can make. A running reply is never cut while it runs: it ends
(cancelled) first, then is cut. Ducked and paused go back only by RESUME (or end with
the cut), and a ducked one may pause; a reply still playing out can be ducked again by
the next speech."""
