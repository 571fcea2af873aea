"""WebRTC calls: ``POST /v1/realtime/calls`` (an SDP offer in, the answer out), as a
browser's Realtime client makes them.

A call is a peer connection (aiortc) bridged to a session of this server: the
caller's microphone track (Opus) becomes the session's input, its replies play on a
track the server holds (:mod:`~duplex.app.edge.call_media`), and events travel on
the ``oai-events`` data channel. The bridge speaks to the session as any client does,
over a WebSocket on loopback with Duplex's extensions and binary audio: the same
admission, barge-in, truncation at the heard sample and epochs; the playback position
comes from the track's own clock (``playback.ack``). What only WebRTC has is done
here: ``output_audio_buffer.started|stopped|cleared``, and the caller's
``output_audio_buffer.clear``.

The offer comes as ``application/sdp``, or as the unified form
(``multipart/form-data`` with ``sdp`` and ``session``, the session's configuration).
The answer is ``201`` with ``Location: /v1/realtime/calls/{call_id}``;
``POST /v1/realtime/calls/{call_id}/hangup`` ends the call.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import uuid
from dataclasses import dataclass
from http import HTTPStatus
from typing import TYPE_CHECKING, Any

import numpy as np
import websockets

from duplex.app.edge.http import form_fields
from duplex.app.edge.transport import CALLS_PATH

if TYPE_CHECKING:
    from duplex.app.edge.call_media import ReplyTrack

log = logging.getLogger("duplex.server")

ACK_S = 0.1
"""How often the track's playback position goes to the session."""
EXTENSION_EVENTS = frozenset(
    {"response.output_audio.ducked", "response.output_audio.paused", "response.output_audio.resumed", "session.synced"}
)
"""Duplex's own events: the bridge acts on them; the caller is not told."""
TRANSPORT_FIELDS = ("input_audio_format", "output_audio_format", "binary_audio", "pacing")
"""Session fields that belong to the transport: on a call, Opus both ways, set here."""


class CallError(ValueError):
    """A request for a call that cannot be taken: its status and a message."""

    def __init__(self, status: HTTPStatus, message: str) -> None:
        super().__init__(message)
        self.status = status


@dataclass(frozen=True, slots=True)
class CallRequest:
    """What a caller posted: the SDP offer and, in the unified form, a session."""

    offer: str
    session: dict[str, Any] | None = None


def parse_call(body: bytes, content_type: str) -> CallRequest:
    """The call a POST body asks for (raises :class:`CallError`)."""
    kind = content_type.split(";", 1)[0].strip().lower()
    if kind == "application/sdp":
        return CallRequest(_sdp(body.decode("utf-8", "replace")))
    if kind != "multipart/form-data":
        raise CallError(
            HTTPStatus.UNSUPPORTED_MEDIA_TYPE, "post the SDP offer as application/sdp or multipart/form-data"
        )
    fields = {name: value.decode("utf-8", "replace") for name, value in form_fields(body, content_type).items()}
    if "sdp" not in fields:
        raise CallError(HTTPStatus.BAD_REQUEST, "the form has no 'sdp' field")
    session = None
    if "session" in fields:
        try:
            session = json.loads(fields["session"])
        except ValueError:
            raise CallError(HTTPStatus.BAD_REQUEST, "the form's 'session' is not JSON") from None
        if not isinstance(session, dict):
            raise CallError(HTTPStatus.BAD_REQUEST, "the form's 'session' is not an object")
    return CallRequest(_sdp(fields["sdp"]), session)


def _sdp(text: str) -> str:
    if not text.startswith("v=0") or "m=audio" not in text:
        raise CallError(HTTPStatus.BAD_REQUEST, "not an SDP offer with an audio section")
    return text


def without_transport(session: dict[str, Any]) -> dict[str, Any]:
    """A session configuration less what the call's transport decides (formats, pacing)."""
    kept = {k: v for k, v in session.items() if k not in TRANSPORT_FIELDS}
    audio = kept.get("audio")
    if isinstance(audio, dict):
        kept["audio"] = {
            side: ({k: v for k, v in cfg.items() if k != "format"} if isinstance(cfg, dict) else cfg)
            for side, cfg in audio.items()
        }
    return kept


PLAYOUT_S = 5.0
"""How long a call outlives its session to play what it was sent (the session's lead
ahead of playback: a fraction of a second)."""


class Call:
    """One WebRTC call bridged to one session."""

    def __init__(self, call_id: str, url: str, headers: dict[str, str]) -> None:
        from aiortc import RTCConfiguration, RTCPeerConnection  # WebRTC loads with the first call

        from duplex.app.edge.call_media import ReplyTrack

        self.id = call_id
        self._url, self._headers = url, headers
        # No STUN server: nothing beyond this machine is reached (host candidates serve
        # a browser on this machine or its network).
        self.pc = RTCPeerConnection(RTCConfiguration(iceServers=[]))
        self.track: ReplyTrack = ReplyTrack(
            lambda rid: self._send_caller({"type": "output_audio_buffer.started", "response_id": rid}),
            lambda rid: self._send_caller({"type": "output_audio_buffer.stopped", "response_id": rid}),
        )
        self.pc.addTrack(self.track)
        self._ws: Any = None
        self._channel: Any = None
        self._to_caller: list[str] = []  # events before the data channel opened
        self._audio_for: str | None = None  # the reply whose binary frame comes next
        self._mic_samples = 0
        self._ended = asyncio.Event()
        self._task: asyncio.Task[None] | None = None
        self._jobs: set[asyncio.Future[Any]] = set()

    async def answer(self, request: CallRequest) -> str:
        """Open the session and answer the offer (raises CallError if the session is refused)."""
        from aiortc import RTCSessionDescription

        from duplex.app.edge.call_media import RATE

        try:
            self._ws = await websockets.connect(self._url, additional_headers=self._headers, max_size=None)
        except websockets.InvalidStatus as exc:
            status = HTTPStatus(exc.response.status_code)
            raise CallError(status, exc.response.body.decode("utf-8", "replace").strip() or status.phrase) from None
        update: dict[str, Any] = {
            "binary_audio": True,
            "audio": {"output": {"format": {"type": "audio/pcm", "rate": RATE}}},
        }
        await self._ws.send(json.dumps({"type": "session.update", "session": update}))
        if request.session:
            await self._ws.send(json.dumps({"type": "session.update", "session": without_transport(request.session)}))

        @self.pc.on("datachannel")
        def on_datachannel(channel: Any) -> None:
            if channel.label != "oai-events":
                return
            self._channel = channel
            channel.on("message", self._from_caller)
            channel.on("close", self._ended.set)
            for text in self._to_caller:
                channel.send(text)
            self._to_caller.clear()

        @self.pc.on("track")
        def on_track(track: Any) -> None:
            if track.kind == "audio":
                self._spawn(self._microphone(track))

        @self.pc.on("connectionstatechange")
        def on_state() -> None:
            if self.pc.connectionState in ("failed", "closed"):
                self._ended.set()

        await self.pc.setRemoteDescription(RTCSessionDescription(request.offer, "offer"))
        jitter_buffers(self.pc, packets=1)
        await self.pc.setLocalDescription(await self.pc.createAnswer())
        return str(self.pc.localDescription.sdp)

    def start(self, on_end: Any) -> None:
        """Run the bridge until either side hangs up."""
        self._task = asyncio.create_task(self._run(on_end), name=f"call-{self.id}")

    def _spawn(self, job: Any) -> None:
        task = asyncio.ensure_future(job)
        self._jobs.add(task)
        task.add_done_callback(self._job_done)

    def _job_done(self, task: asyncio.Future[Any]) -> None:
        self._jobs.discard(task)
        if not task.cancelled() and task.exception() is not None:
            self._ended.set()  # a side failed: the call is over

    async def _run(self, on_end: Any) -> None:
        try:
            async with asyncio.TaskGroup() as tg:
                reader = tg.create_task(self._from_session())
                acks = tg.create_task(self._acks())
                await self._ended.wait()
                reader.cancel()
                acks.cancel()
        except Exception:
            log.exception("call %s failed", self.id)
        finally:
            await self.close()
            on_end(self)

    async def close(self) -> None:
        self._ended.set()
        for task in list(self._jobs):
            task.cancel()
        with contextlib.suppress(Exception):
            await self._ws.close()
        with contextlib.suppress(Exception):
            await self.pc.close()

    # -- the session's side ----------------------------------------------------
    async def _from_session(self) -> None:
        try:
            async for message in self._ws:
                if isinstance(message, bytes):
                    if self._audio_for is not None:
                        self.track.push(self._audio_for, np.frombuffer(message, "<i2").copy())
                    continue
                self._on_session_event(message)
        except websockets.ConnectionClosed:
            pass
        # The session ended (a drain closes it after its reply's response.done): what the
        # caller was sent still plays to its end before the call does.
        with contextlib.suppress(TimeoutError):
            async with asyncio.timeout(PLAYOUT_S):
                await self.track.played_out.wait()
        self._ended.set()

    def _on_session_event(self, text: str) -> None:
        event = json.loads(text)
        etype = event.get("type")
        if etype in ("response.output_audio.delta", "response.audio.delta"):
            self._audio_for = event["response_id"]  # its PCM is the next binary frame
            return
        if etype == "response.output_audio.ducked":
            self.track.duck(event["response_id"], 10 ** (float(event["gain_db"]) / 20))
        elif etype == "response.output_audio.paused":
            self.track.pause(event["response_id"])
        elif etype == "response.output_audio.resumed":
            self.track.resume()
        elif etype == "response.done":
            rid = event["response"]["id"]
            if event["response"]["status"] == "completed":
                self.track.end(rid)
            elif self.track.drop(rid):
                self._send_caller({"type": "output_audio_buffer.cleared", "response_id": rid})
        elif etype == "conversation.item.truncated":
            rid = self.track.current
            if rid is not None and self.track.drop(rid):
                self._send_caller({"type": "output_audio_buffer.cleared", "response_id": rid})
        if etype not in EXTENSION_EVENTS:
            self._send_caller_text(text)

    async def _acks(self) -> None:
        """The track's playback position, as a client's acks would say it (until the session ends)."""
        with contextlib.suppress(websockets.ConnectionClosed):
            await self._ack_forever()

    async def _ack_forever(self) -> None:
        while True:
            await asyncio.sleep(ACK_S)  # a report period, like any client's
            rid = self.track.current
            if rid is not None:
                ack = {"type": "playback.ack", "response_id": rid, "played_samples": self.track.played(rid)}
                await self._ws.send(json.dumps({**ack, "input_samples": self._mic_samples}))

    # -- the caller's side -----------------------------------------------------
    async def _microphone(self, track: Any) -> None:
        from aiortc.mediastreams import MediaStreamError

        from duplex.app.edge.call_media import Microphone

        mic = Microphone()
        with contextlib.suppress(MediaStreamError, websockets.ConnectionClosed):
            while True:
                pcm = mic.pcm(await track.recv())
                if pcm.size:
                    self._mic_samples += pcm.size
                    await self._ws.send(pcm.astype("<i2").tobytes())

    def _from_caller(self, message: str | bytes) -> None:
        if not isinstance(message, str):
            return
        try:
            event = json.loads(message)
        except ValueError:
            event = None
        if isinstance(event, dict) and event.get("type") == "output_audio_buffer.clear":
            rid = self.track.current
            if rid is not None and self.track.drop(rid):
                self._send_caller({"type": "output_audio_buffer.cleared", "response_id": rid})
            message = json.dumps({"type": "response.cancel"})
        elif (
            isinstance(event, dict) and event.get("type") == "session.update" and isinstance(event.get("session"), dict)
        ):
            message = json.dumps({**event, "session": without_transport(event["session"])})
        self._spawn(self._ws.send(message))

    def _send_caller(self, event: dict[str, Any]) -> None:
        self._send_caller_text(json.dumps({"event_id": "event_" + uuid.uuid4().hex[:20], **event}))

    def _send_caller_text(self, text: str) -> None:
        if self._channel is not None and self._channel.readyState == "open":
            self._channel.send(text)
        else:
            self._to_caller.append(text)


def jitter_buffers(pc: Any, *, packets: int) -> None:
    """The audio receivers' jitter buffers set to hold ``packets`` before they play; the
    server's microphone holds one, down from aiortc's four (80 ms): every millisecond of
    it is a millisecond later that a barge-in is heard (a browser on a loopback or a LAN
    delivers its packets evenly; a late one is a gap the listener hears as a short
    silence). aiortc fixes the four in its receiver's constructor, so the receiver's
    buffer is replaced here, where aiortc (pinned below 2) keeps it."""
    from aiortc.jitterbuffer import JitterBuffer

    for transceiver in pc.getTransceivers():
        receiver = transceiver.receiver
        if transceiver.kind == "audio" and hasattr(receiver, "_RTCRtpReceiver__jitter_buffer"):
            receiver._RTCRtpReceiver__jitter_buffer = JitterBuffer(capacity=16, prefetch=packets)


class Calls:
    """The server's calls, by id."""

    def __init__(self) -> None:
        self.calls: dict[str, Call] = {}

    async def post(
        self, path: str, body: bytes, content_type: str, headers: dict[str, str], url: str
    ) -> tuple[HTTPStatus, str, bytes, dict[str, str]]:
        """(status, content type, body, extra headers) for a POST under :data:`CALLS_PATH`."""
        rest = path[len(CALLS_PATH) :].strip("/")
        if rest:
            call_id, _, action = rest.partition("/")
            call = self.calls.get(call_id)
            if action != "hangup" or call is None:
                return HTTPStatus.NOT_FOUND, "text/plain", b"no such call\n", {}
            await call.close()
            return HTTPStatus.OK, "text/plain", b"", {}
        try:
            request = parse_call(body, content_type)
            call = Call("rtc_" + uuid.uuid4().hex[:20], url, headers)
            try:
                answer = await call.answer(request)
            except BaseException:
                await call.close()
                raise
        except CallError as err:
            return err.status, "text/plain", (str(err) + "\n").encode(), {}
        self.calls[call.id] = call
        call.start(lambda c: self.calls.pop(c.id, None))
        return HTTPStatus.CREATED, "application/sdp", answer.encode(), {"Location": f"{CALLS_PATH}/{call.id}"}

    async def ended(self) -> None:
        """Until every call has ended by itself (its session closed, its reply played out)."""
        tasks = {c._task for c in self.calls.values() if c._task is not None}
        if tasks:
            await asyncio.wait(tasks)

    async def aclose(self) -> None:
        for call in list(self.calls.values()):
            await call.close()
