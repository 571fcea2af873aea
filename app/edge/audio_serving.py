"""The audio endpoints on the sockets (:mod:`~duplex.app.edge.audio_api` parses them).

A speech request runs the server's own reply stages with no thinker (the talker, the
vocoder, 24 kHz out) and streams each piece as it is made, chunked, with the socket's
flow control: a client that stops reading holds the voice back, and is let go after
``--stall-timeout``. A client that goes away cancels its request at once (the voice stops
at its next chunk). A transcription is decoded (WAV, or whatever FFmpeg reads), cut into
windows Whisper takes whole, and heard on the server's recogniser, round-robin with the
sessions' turns. Every answer ends the connection (``Connection: close``).
"""

from __future__ import annotations

import asyncio
import io
import logging
import uuid
import wave
from collections.abc import Awaitable
from http import HTTPStatus
from typing import Protocol

import numpy as np
import soxr

from duplex.app.edge import access
from duplex.app.edge.audio_api import (
    SPEECH_PATH,
    SPEECH_RATE,
    ApiError,
    SpeechJob,
    TranscriptionJob,
    parse_speech,
    parse_transcription,
    transcript,
    wav_header,
)
from duplex.app.edge.config import ServerConfig
from duplex.app.edge.drain import RETRY_AFTER_S, Drain
from duplex.app.edge.fairness import FairQueue
from duplex.app.edge.metrics import Metrics
from duplex.app.edge.transport import ApiRequest, GuardedConnection
from duplex.pipeline.backends import Backends
from duplex.pipeline.stages import OutputChunk, ReplyStages
from duplex.pipeline.stream import ChunkEvent
from duplex.pipeline.talker import SpeechRequest

log = logging.getLogger("duplex.server")

HEAR_RATE = 16_000
WINDOW_S = 28.0
"""The longest piece heard at once (Whisper hears 30 s); a longer upload is cut at its
quietest 100 ms in the window's last 5 s."""


class ApiHost(Protocol):
    """What the endpoints need of the server."""

    config: ServerConfig
    backends: Backends
    metrics: Metrics
    recognitions: FairQueue

    @property
    def port(self) -> int: ...

    draining: Drain

    def refuse(self, who: str, kind: str, reason: str) -> None: ...


class HttpOut:
    """An HTTP/1.1 answer written straight to a connection's transport."""

    def __init__(self, conn: GuardedConnection, stall_s: float) -> None:
        self.conn, self.stall_s = conn, stall_s
        self.started = False

    def _head(self, status: HTTPStatus, headers: dict[str, str]) -> None:
        self.started = True
        lines = [f"HTTP/1.1 {status.value} {status.phrase}", *(f"{k}: {v}" for k, v in headers.items())]
        self.conn.transport.write(
            ("\r\n".join([*lines, "Connection: close", "Cache-Control: no-cache"]) + "\r\n\r\n").encode("latin-1")
        )

    def whole(self, status: HTTPStatus, body: bytes, ctype: str, extra: dict[str, str] | None = None) -> None:
        self._head(status, {"Content-Type": ctype, "Content-Length": str(len(body)), **(extra or {})})
        self.conn.transport.write(body)

    def begin(self, ctype: str) -> None:
        self._head(HTTPStatus.OK, {"Content-Type": ctype, "Transfer-Encoding": "chunked"})

    async def chunk(self, data: bytes) -> None:
        """One chunk, once the client has taken enough of the last ones."""
        if data:
            self.conn.transport.write(b"%x\r\n%b\r\n" % (len(data), data))
            async with asyncio.timeout(self.stall_s):
                await self.conn.drain()

    def end(self) -> None:
        self.conn.transport.write(b"0\r\n\r\n")


class AudioEndpoints:
    """Answers the audio endpoints, each request in a task of its own (cancelled when its
    client goes, or the server closes)."""

    def __init__(self, host: ApiHost) -> None:
        self.host = host
        self.tasks: set[asyncio.Task[None]] = set()

    def start(self, conn: GuardedConnection, req: ApiRequest) -> asyncio.Task[None]:
        task = asyncio.get_running_loop().create_task(self._answer(conn, req), name="audio-api")
        self.tasks.add(task)
        task.add_done_callback(self.tasks.discard)
        return task

    async def aclose(self) -> None:
        for task in self.tasks:
            task.cancel()
        await asyncio.gather(*self.tasks, return_exceptions=True)

    async def _answer(self, conn: GuardedConnection, req: ApiRequest) -> None:
        host, path = self.host, req.request.path.split("?", 1)[0]
        address = conn.remote_address
        peer = f"{address[0]}:{address[1]}" if address else "?:?"
        out = HttpOut(conn, host.config.stall_timeout_s)
        kind = "speech" if path == SPEECH_PATH else "transcription"
        outcome = "failed"
        try:
            cfg = host.config
            refusal = access.check(
                req.request,
                api_key=cfg.api_key,
                origins=access.allowed_origins(cfg.allowed_origins, cfg.host, host.port),
            )
            if refusal is not None:
                host.refuse(
                    peer, "unauthorized" if refusal.status == HTTPStatus.UNAUTHORIZED else "forbidden", refusal.reason
                )
                raise ApiError(refusal.status, refusal.reason)
            if host.draining.active:
                host.refuse(peer, "draining", f"a {kind} request while draining")
                busy = ApiError(HTTPStatus.SERVICE_UNAVAILABLE, "the server is draining (shutting down)")
                out.whole(busy.status, busy.body(), "application/json", {"Retry-After": str(RETRY_AFTER_S)})
                outcome = "refused"
                return
            if path == SPEECH_PATH:
                talker = host.backends.talker
                await self._speak(out, parse_speech(req.body, talker=talker.name, check_voice=talker.check_voice))
            else:
                await self._hear(out, conn, parse_transcription(req.body, req.request.headers.get("Content-Type", "")))
            outcome = "done"
        except ApiError as err:
            out.whole(err.status, err.body(), "application/json")
            outcome = "refused"
        except asyncio.CancelledError:
            outcome = "cancelled"  # the client went away (or the server closes): nothing to tell
            raise
        except Exception as exc:
            log.exception("%s request failed", kind)
            if not out.started:
                failed = ApiError(HTTPStatus.INTERNAL_SERVER_ERROR, f"the {kind} failed: {exc}")
                out.whole(failed.status, failed.body(), "application/json")
            else:
                conn.transport.abort()  # a stream cut short, never one that looks complete
        finally:
            host.metrics.inc(f"duplex_{kind}_requests_total", outcome=outcome)
            conn.transport.close()

    async def _speak(self, out: HttpOut, job: SpeechJob) -> None:
        b = self.host.backends
        request = SpeechRequest("speech_" + uuid.uuid4().hex[:16], job.text, job.voice, job.speed)
        stages = ReplyStages(
            b.talker, b.vocoder, request, epoch=0, output_rate=SPEECH_RATE, queues=self.host.config.queues
        )
        out.begin("audio/wav" if job.format == "wav" else "audio/pcm")
        if job.format == "wav":
            await out.chunk(wav_header())

        async def sink(event: ChunkEvent) -> None:
            if isinstance(event.payload, OutputChunk):
                await out.chunk(event.payload.audio.to_bytes())

        try:
            await stages.run(sink)
        finally:
            stages.retire()
        out.end()

    async def _hear(self, out: HttpOut, conn: GuardedConnection, job: TranscriptionJob) -> None:
        recognizer = self.host.backends.recognizer
        if recognizer is None:
            raise ApiError(HTTPStatus.NOT_FOUND, "this server hears nothing (--asr none)")
        pcm = decode_audio(job.audio)
        texts: list[str] = []
        for piece in windows(pcm):

            def hear(p: np.ndarray = piece) -> Awaitable[str]:
                return recognizer.transcribe(p, HEAR_RATE)

            texts.append(await self.host.recognitions.run(conn, hear))
        body, ctype = transcript(" ".join(t for t in texts if t), pcm.size / HEAR_RATE, job.format)
        out.whole(HTTPStatus.OK, body, ctype)


def decode_audio(data: bytes) -> np.ndarray:
    """PCM16 mono at :data:`HEAR_RATE` from an uploaded file (raises ApiError)."""
    try:
        with wave.open(io.BytesIO(data)) as w:
            if w.getsampwidth() != 2:
                raise wave.Error("not 16-bit")
            pcm = np.frombuffer(w.readframes(w.getnframes()), "<i2").reshape(-1, w.getnchannels())
            rate = w.getframerate()
        mono = pcm.mean(axis=1).astype(np.float32) / 32768.0
    except (wave.Error, EOFError, ValueError):
        mono, rate = _decoded(data)
    if rate != HEAR_RATE and mono.size:
        mono = soxr.resample(mono, rate, HEAR_RATE)
    pcm16: np.ndarray = np.clip(np.rint(mono * 32767.0), -32768, 32767).astype(np.int16)
    return pcm16


def _decoded(data: bytes) -> tuple[np.ndarray, int]:
    """Any format FFmpeg reads (PyAV, which WebRTC's Opus already brings)."""
    import av

    try:
        with av.open(io.BytesIO(data), mode="r") as container:
            stream = container.streams.audio[0]
            resampler = av.AudioResampler(format="flt", layout="mono", rate=HEAR_RATE)
            parts = [
                f.to_ndarray().reshape(-1) for frame in container.decode(stream) for f in resampler.resample(frame)
            ]
            parts += [f.to_ndarray().reshape(-1) for f in resampler.resample(None)]
    except (av.FFmpegError, IndexError, ValueError) as exc:
        raise ApiError(
            HTTPStatus.BAD_REQUEST, f"the file is not audio this server can read ({exc})", param="file"
        ) from None
    return (np.concatenate(parts) if parts else np.zeros(0, np.float32)), HEAR_RATE


def windows(pcm: np.ndarray) -> list[np.ndarray]:
    """``pcm`` cut into pieces of at most :data:`WINDOW_S`, each cut at its quietest 100 ms
    among the last 5 s (not through a word, where it can help it)."""
    size, look, step = int(WINDOW_S * HEAR_RATE), 5 * HEAR_RATE, HEAR_RATE // 10
    pieces: list[np.ndarray] = []
    while pcm.size > size:
        tail = pcm[size - look : size].astype(np.float32).reshape(-1, step)
        cut = size - look + (int(np.argmin((tail**2).mean(axis=1))) + 1) * step
        pieces.append(pcm[:cut])
        pcm = pcm[cut:]
    return [*pieces, pcm] if pcm.size else pieces
