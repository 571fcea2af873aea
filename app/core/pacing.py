"""Session time and where the client's playback is: the basis of paced output.

Sans-I/O: every method takes the wall time it should consider, so tests drive
time exactly and a replay faster than real time behaves like one in real time.
"""

from __future__ import annotations

from bisect import bisect_right
from collections import deque
from dataclasses import dataclass

from duplex.app.core.limits import INPUT_IDLE_S

MAX_BREAKS = 256
"""Offset changes remembered for mapping past input samples (only recent ones matter)."""


class SessionClock:
    """Session time in seconds: the input sample clock while the client streams
    microphone audio, the wall clock while it does not.

    While input keeps arriving (no gap longer than ``idle_s``), time is the
    amount of input received, so it advances exactly as fast as the client's
    capture does, however fast the client sends it. When input stops, time
    carries on from there at wall speed; when it resumes, time never steps back.

    Each resumption moves the offset between input time and session time forward
    for the input that follows; input captured before keeps the offset it had, so
    the session time of an earlier sample (a barge-in's onset) never moves.
    """

    def __init__(self, start_wall: float, *, idle_s: float = INPUT_IDLE_S) -> None:
        self.idle_s = idle_s
        self.input_only = False
        """Set when the client declares its input clock is its only clock (it uses
        ``session.sync`` to replay faster than real time): wall time never counts."""
        self._input_s = 0.0
        self._offset = 0.0
        self._break_at = [0.0]  # input seconds from which ...
        self._break_offset = [0.0]  # ... this offset applies
        self._ref_wall = start_wall
        self._streaming_ever = False

    def use_input_only(self, wall: float) -> None:
        """From now on only input moves time (time stays where it is now)."""
        if not self.input_only:
            self._set_offset(max(self._offset, self.now(wall) - self._input_s), self._input_s)
            self.input_only = True

    def _set_offset(self, offset: float, from_input_s: float) -> None:
        """Input from ``from_input_s`` on maps to session time with ``offset``."""
        if offset == self._offset:
            return
        self._offset = offset
        if self._break_at[-1] == from_input_s:
            self._break_offset[-1] = offset
        else:
            self._break_at.append(from_input_s)
            self._break_offset.append(offset)
        if len(self._break_at) > 2 * MAX_BREAKS:
            del self._break_at[:MAX_BREAKS], self._break_offset[:MAX_BREAKS]

    def streaming(self, wall: float) -> bool:
        """Whether the client is streaming input now."""
        if self.input_only:
            return True
        return self._streaming_ever and wall - self._ref_wall <= self.idle_s

    def on_input(self, seconds: float, wall: float) -> None:
        """``seconds`` of input audio arrived at ``wall``."""
        was_streaming = self.streaming(wall)
        extrapolated = self.now(wall)
        start = self._input_s
        self._input_s += seconds
        if not was_streaming:
            # Resuming after a gap: keep time monotonic without counting the gap twice.
            self._set_offset(max(self._offset, extrapolated - self._input_s), start)
        self._ref_wall = wall
        self._streaming_ever = True

    def now(self, wall: float) -> float:
        """Session time at ``wall``."""
        t = self._input_s + self._offset
        if self.streaming(wall):
            return t
        return t + max(0.0, wall - self._ref_wall)

    def time_of_input(self, samples: int, rate: int) -> float:
        """Session time at which input sample ``samples`` was captured (with the offset
        in force when it arrived, however many gaps came after it)."""
        s = samples / rate
        i = bisect_right(self._break_at, s + 1e-6) - 1  # input seconds are summed floats: allow their drift
        return s + self._break_offset[max(i, 0)]


@dataclass(slots=True)
class _Ack:
    played: int
    at: float


class Playout:
    """Where the client's playback of one reply is, in output samples.

    Without acknowledgements the client is modelled as a playout buffer that
    starts playing each chunk when it arrives (or when the previous one ends)
    and drains at real time. An acknowledgement (played samples at a session
    time) replaces the model: playback advances in real time from it, never past
    what was sent. While paused, playback stands still.
    """

    def __init__(self, rate: int, lead_s: float) -> None:
        self.rate = rate
        self.lead = int(round(lead_s * rate))
        self.sent = 0
        self._play_end: float | None = None
        # Recent acks, oldest first: a barge-in asks where playback was a little
        # while ago, and acks that arrived since must not move that answer.
        self._acks: deque[_Ack] = deque(maxlen=128)
        self._paused_at: float | None = None
        self._paused_played = 0

    def on_sent(self, samples: int, t: float) -> None:
        """``samples`` were released to the client at session time ``t``."""
        start = t if self._play_end is None else max(t, self._play_end)
        self._play_end = start + samples / self.rate
        self.sent += samples

    def on_ack(self, played: int, t: float) -> None:
        """The client had played ``played`` samples at session time ``t``."""
        played = max(0, min(played, self.sent))
        if not self._acks or (played >= self._acks[-1].played and t >= self._acks[-1].at):
            self._acks.append(_Ack(played, t))

    def played(self, t: float) -> int:
        """Samples of this reply the client has played by session time ``t``."""
        if self._paused_at is not None and t >= self._paused_at:
            return self._paused_played
        return self._running(t)

    def _running(self, t: float) -> int:
        before = [a for a in self._acks if a.at <= t]
        if before:
            ack = before[-1]
            later = len(before) < len(self._acks)
            ceiling = self._acks[len(before)].played if later else self.sent
            p = ack.played + round((t - ack.at) * self.rate)
            return max(ack.played, min(p, ceiling, self.sent))
        if self._acks:  # asked about a time before the first ack: no more than it says
            return min(self._model(t), self._acks[0].played)
        return self._model(t)

    def _model(self, t: float) -> int:
        if self._play_end is None:
            return 0
        buffered = max(0.0, self._play_end - t) * self.rate
        return max(0, min(self.sent, round(self.sent - buffered)))

    def pause(self, t: float) -> None:
        """Freeze playback where it is (the client stopped output)."""
        if self._paused_at is None:
            self._paused_played = self._running(t)
            self._paused_at = t

    def resume(self, t: float) -> None:
        """Playback continues from where it was paused."""
        if self._paused_at is None:
            return
        # The client may have played a little past the pause point before it heard
        # of the pause; its acks say so.
        held = max(self._paused_played, self._acks[-1].played if self._acks else 0)
        self._paused_at = None
        # What was buffered at the client resumes playing from now.
        self._acks.append(_Ack(held, t))
        self._play_end = t + (self.sent - held) / self.rate

    @property
    def paused(self) -> bool:
        return self._paused_at is not None

    def finished(self, t: float) -> bool:
        """Whether everything sent has been played by ``t``."""
        return self.played(t) >= self.sent

    def may_send(self, samples: int, t: float) -> bool:
        """Whether ``samples`` more may go out now without exceeding the lead."""
        if self.paused:
            return False
        played = self.played(t)
        return self.sent <= played or self.sent + samples <= played + self.lead

    def seconds_until(self, samples: int, t: float) -> float:
        """Session seconds until ``samples`` more may go out (0 if now, inf if paused)."""
        if self.paused:
            return float("inf")
        if self.may_send(samples, t):
            return 0.0
        # may_send allows a chunk once playback reaches either point: all sent so far
        # played (a chunk larger than the lead), or the chunk fitting within the lead.
        need = min(self.sent, self.sent + samples - self.lead)
        return max(0.0, (need - self.played(t)) / self.rate)
