"""The session's side of a reply: its events, its playback, its pause, cancel and truncation.

Sans-I/O like the session it belongs to: methods return server events and
actions; time comes in as arguments. A reply is *active* from
``response.created`` to ``response.done``, and *heard* until the client has
played everything it was sent, which with pacing is up to the lead later. A
barge-in can land in either: an active reply is cancelled and truncated, a
reply still being heard is truncated.
"""

from __future__ import annotations

import base64
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from app.conversation import Item
from app.pacing import Playout
from app.protocol import ProtocolError
from pipeline.engine import OutputChunk
from pipeline.stream import ChunkEvent
from pipeline.talker import SpeechRequest
from pipeline.thinker import ThinkRequest

if TYPE_CHECKING:
    from app.session import Output, Session


@dataclass(frozen=True, slots=True)
class StartReply:
    """Edge: run the engine for this reply (the thinker answers ``think``; with audio,
    the talker speaks it) and feed its chunks to ``on_output``."""

    response_id: str
    epoch: int
    request: SpeechRequest
    output_rate: int
    think: ThinkRequest
    audio: bool = True


@dataclass(frozen=True, slots=True)
class CancelReply:
    """Edge: retire and cancel the running reply, and wait for it to stop, before
    sending what follows."""

    response_id: str
    epoch: int
    reason: str


@dataclass(slots=True)
class Reply:
    """One reply as the session sees it."""

    id: str
    item: Item
    epoch: int
    modalities: tuple[str, ...]
    text: str
    voice: str
    playout: Playout
    started: float
    transcript_sent: int = 0
    first_audio: float | None = None
    active: bool = True
    deltas: int = 0
    """Audio deltas sent: their ``seq`` on the wire (gap-free per reply)."""


class Speaker:
    """Begins, streams, pauses, resumes, cancels and truncates the session's replies."""

    def __init__(self, session: Session) -> None:
        self.s = session
        self.active: Reply | None = None
        self.heard: Reply | None = None  # the latest reply with audio, while it may still be playing
        self.epoch = 0
        self.stale_dropped = 0
        self.cancels: dict[str, int] = {}

    def _ids(self, r: Reply) -> dict[str, Any]:
        return {"response_id": r.id, "item_id": r.item.id, "output_index": 0, "content_index": 0}

    def _t(self, now: float) -> float:
        return self.s.clock.now(now)

    # -- lifecycle -------------------------------------------------------------
    def begin(self, messages: tuple[dict[str, str], ...], modalities: tuple[str, ...], voice: str,
              now: float) -> Output:
        """``response.created`` and friends, then the engine: the thinker answers the
        conversation and, for audio, the talker speaks what it says."""
        s = self.s
        self.epoch += 1
        audio = "audio" in modalities
        part = {"type": "output_audio", "transcript": ""} if audio else {"type": "output_text", "text": ""}
        item = Item(s.new_id("item"), "assistant", [], status="in_progress",
                    audio_rate=s.settings.output_rate if audio else 0)
        rid = s.new_id("resp")
        lead = s.settings.pacing.lead_ms / 1000
        r = Reply(rid, item, self.epoch, modalities, "", voice, Playout(s.settings.output_rate, lead), now)
        self.active = r
        if audio:
            self.heard = r
        prev = s.conversation.add(item)
        out: Output = [
            s.event("response.created", response=self._object(r, "in_progress")),
            s.event("response.output_item.added", response_id=rid, output_index=0, item=item.to_wire()),
            s.event("conversation.item.added", previous_item_id=prev, item=item.to_wire()),
            s.event("response.content_part.added", **self._ids(r), part=dict(part)),
        ]
        item.content.append(part)
        request = SpeechRequest(rid, "", voice, s.settings.speed, s.state)
        out.append(StartReply(rid, r.epoch, request, s.settings.output_rate, ThinkRequest(rid, messages), audio))
        return out

    def _object(self, r: Reply, status: str, details: dict[str, Any] | None = None,
                timings: dict[str, float] | None = None) -> dict[str, Any]:
        rate = self.s.settings.output_rate
        extra = {"timings": timings} if timings else {}
        return {
            "object": "realtime.response",
            "id": r.id,
            "status": status,
            "status_details": details,
            "output": [r.item.to_wire()] if status != "in_progress" else [],
            "conversation_id": self.s.id,
            "output_modalities": list(r.modalities),
            "modalities": list(r.modalities),
            "audio": {"output": {"format": {"type": "audio/pcm", "rate": rate}, "voice": r.voice}},
            "usage": {"total_tokens": 0, "input_tokens": 0, "output_tokens": 0},
            "metadata": None,
            **extra,
        }

    def finish(self, r: Reply, status: str, details: dict[str, Any] | None = None,
               timings: dict[str, float] | None = None) -> Output:
        """Close the reply's content, item and response, once."""
        s = self.s
        r.active = False
        if self.active is r:
            self.active = None
        item = r.item
        item.status = "completed" if status == "completed" else "incomplete"
        out: Output = []
        part = item.content[0]
        if "transcript" in part:
            part["transcript"] = r.text if status == "completed" else r.text[: r.transcript_sent]
            out.append(s.event("response.output_audio.done", **self._ids(r)))
            out.append(s.event("response.output_audio_transcript.done", **self._ids(r), transcript=part["transcript"]))
        else:
            out.append(s.event("response.output_text.done", **self._ids(r), text=part["text"]))
        if r.first_audio is not None:
            timings = {**(timings or {}), "first_audio": round((r.first_audio - r.started) * 1000, 2)}
        out += [
            s.event("response.content_part.done", **self._ids(r), part=dict(part)),
            s.event("response.output_item.done", response_id=r.id, output_index=0, item=item.to_wire()),
            s.event("conversation.item.done", item=item.to_wire()),
            s.event("response.done", response=self._object(r, status, details, timings)),
        ]
        return out

    def cancel(self, r: Reply, reason: str) -> Output:
        """Retire the reply's epoch and end it as cancelled."""
        self.cancels[reason] = self.cancels.get(reason, 0) + 1
        self.s.state = self.s.state.next_epoch()
        details = {"type": "cancelled", "reason": reason}
        return [CancelReply(r.id, r.epoch, reason), *self.finish(r, "cancelled", details)]

    def disconnect(self) -> Output:
        """The client went away: stop the running reply, tell nobody."""
        r = self.active
        if r is None:
            return []
        r.active = False
        self.active = None
        self.cancels["client_disconnected"] = self.cancels.get("client_disconnected", 0) + 1
        return [CancelReply(r.id, r.epoch, "client_disconnected")]

    # -- engine side -------------------------------------------------------------
    def output_wait(self, samples: int, now: float) -> float:
        """Wall seconds before ``samples`` more of the active reply may go out (0: now)."""
        r = self.active
        if r is None or not self.s.settings.pacing.enabled:
            return 0.0
        need = r.playout.seconds_until(samples, self._t(now))
        if need == 0.0 or need == float("inf"):
            return need
        # While the client streams, only its input moves session time: re-check.
        return min(need, self.s.clock.idle_s) if self.s.clock.streaming(now) else need

    def on_output(self, event: ChunkEvent, now: float) -> list[dict[str, Any]]:
        """Audio and the transcript it speaks for one engine chunk; nothing if stale."""
        r = self.active
        if r is None or event.epoch != r.epoch or event.request_id != r.id:
            self.stale_dropped += 1
            return []
        s = self.s
        chunk: OutputChunk = event.payload
        out: list[dict[str, Any]] = []
        if chunk.text:  # the thinker's text arrives with the audio that says it
            r.text += chunk.text
            r.item.full_text = r.text
            if "audio" not in r.modalities:
                r.item.content[0]["text"] = r.text
                out.append(s.event("response.output_text.delta", **self._ids(r), delta=chunk.text))
        n = chunk.audio.length
        if n:
            if r.first_audio is None:
                r.first_audio = now
            fields = {"epoch": r.epoch, "seq": r.deltas, "input_watermark": event.input_watermark,
                      "audio_start_ms": chunk.start * 1000 // chunk.audio.rate}
            if s.settings.binary_audio:  # the edge sends the PCM as the next binary frame
                out.append(s.event("response.output_audio.delta", **self._ids(r), **fields, binary=True,
                                   audio_bytes=chunk.audio.to_bytes()))
            else:
                out.append(s.event("response.output_audio.delta", **self._ids(r), **fields,
                                   delta=base64.b64encode(chunk.audio.to_bytes()).decode("ascii")))
            r.playout.on_sent(n, self._t(now))
            r.item.audio_samples += n
            r.deltas += 1
            if r.item.audio_samples >= s.limits.max_reply_s * s.settings.output_rate:
                # Long enough: end it like a length limit (the edge stops the engine).
                return out + self.finish(r, "incomplete", {"type": "incomplete", "reason": "max_output_tokens"})
        if chunk.words:
            r.item.words.extend(chunk.words)
            upto = max(w.end for w in chunk.words)
            if upto > r.transcript_sent:
                out.append(s.event("response.output_audio_transcript.delta", **self._ids(r),
                                   delta=r.text[r.transcript_sent:upto]))
                r.transcript_sent = upto
        return out

    def on_finished(self, response_id: str, timings: dict[str, float] | None = None) -> list[dict[str, Any]]:
        r = self.active
        if r is None or r.id != response_id:
            return []
        out: list[dict[str, Any]] = []
        if "audio" in r.modalities and r.transcript_sent < len(r.text):
            out.append(self.s.event("response.output_audio_transcript.delta", **self._ids(r),
                                    delta=r.text[r.transcript_sent:]))
            r.transcript_sent = len(r.text)
        return out + self.finish(r, "completed", timings=timings)  # type: ignore[return-value]

    def on_failed(self, response_id: str, message: str) -> list[dict[str, Any]]:
        r = self.active
        if r is None or r.id != response_id:
            return []
        err = ProtocolError("reply_failed", f"the reply failed: {message}", error_type="server_error")
        details = {"type": "failed", "error": {"type": "server_error", "code": "reply_failed", "message": message}}
        return self.s.error(err) + self.finish(r, "failed", details)  # type: ignore[return-value]

    def on_ack(self, response_id: str, played: int, input_samples: int) -> None:
        r = self.heard
        if r is not None and r.id == response_id:
            r.playout.on_ack(played, self.s.clock.time_of_input(input_samples, self.s.settings.input_rate))

    # -- barge-in ----------------------------------------------------------------
    def being_heard(self, now: float) -> Reply | None:
        """The reply the user hears (or is about to) now, if any."""
        r = self.heard
        if r is None or r.item.truncated_ms is not None:
            return None
        if r.active or not r.playout.finished(self._t(now)):
            return r
        return None

    def pause(self, onset: int, now: float) -> list[dict[str, Any]]:
        r = self.being_heard(now)
        if r is None or r.playout.paused:
            return []
        r.playout.pause(self._t(now))
        at = self._played_ms(r, onset)
        rate = self.s.settings.input_rate
        after = (self.s.input_samples - onset) * 1000 // rate  # how long after the onset this was decided
        return [self.s.event("response.output_audio.paused", **self._ids(r), epoch=r.epoch, audio_end_ms=at,
                             detected_after_ms=after)]

    def resume(self, now: float) -> list[dict[str, Any]]:
        r = self.heard
        if r is None or not r.playout.paused or r.item.truncated_ms is not None:
            return []
        r.playout.resume(self._t(now))
        return [self.s.event("response.output_audio.resumed", **self._ids(r), epoch=r.epoch)]

    def _played_ms(self, r: Reply, onset: int) -> int:
        t = self.s.clock.time_of_input(onset, self.s.settings.input_rate)
        return r.playout.played(t) * 1000 // r.playout.rate

    def interrupt(self, onset: int, now: float) -> Output:
        """The user took the turn at input sample ``onset``: cancel the reply if it is
        still running and truncate it at what had been played by then."""
        r = self.heard
        if r is None or r.item.truncated_ms is not None:
            return []
        if not r.active and not r.playout.paused and r.playout.finished(self._t(now)):
            return []  # it had been heard in full before the user spoke
        out: Output = []
        if r.active:
            out += self.cancel(r, "turn_detected")
        end_ms = min(self._played_ms(r, onset), r.item.audio_ms)
        r.item.truncate(end_ms)
        out.append(self.s.event("conversation.item.truncated", item_id=r.item.id, content_index=0, audio_end_ms=end_ms))
        return out
