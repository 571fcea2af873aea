"""Speech recognition on another machine: any OpenAI-compatible
``POST /v1/audio/transcriptions`` server (``vllm serve`` with a Whisper model,
faster-whisper-server, ...), so recognition scales out apart from the voice servers.

Each finished turn is uploaded once, as a 16 kHz PCM16 mono WAV made in memory.
No partial transcripts (``partials = False``): a partial is a whole upload and a
decode of the turn so far, asked for every few hundred milliseconds while the
user speaks, on a server every voice server shares; it would multiply that
server's load several times over for a display nicety, and the turn's final
transcript is what the reply is made from.
"""

from __future__ import annotations

import io
import wave
from collections.abc import Callable

import httpx
import numpy as np
import soxr

from duplex.pipeline.openai_http import check_model, one_line, reason

RATE = 16000
"""What the upload is resampled to: Whisper's rate, and the smallest WAV that keeps all it hears."""


class TranscriptionError(RuntimeError):
    """A transcription request failed: the server's error (``status`` and its
    reason, ``detail``), or no answer at all (``status`` is None)."""

    def __init__(self, url: str, status: int | None, detail: str) -> None:
        super().__init__(f"{url} answered {status}: {detail}" if status else f"{url} did not answer: {detail}")
        self.status = status
        self.detail = detail


def wav_bytes(pcm: np.ndarray, rate: int) -> bytes:
    """``pcm`` (PCM16 mono at ``rate``) as a 16 kHz PCM16 mono WAV file."""
    if rate != RATE:
        y = soxr.resample(pcm.astype(np.float32) / 32768.0, rate, RATE)
        pcm = np.clip(np.rint(y * 32767.0), -32768, 32767)
    buf = io.BytesIO()
    with wave.open(buf, "wb") as w:
        w.setnchannels(1)
        w.setsampwidth(2)
        w.setframerate(RATE)
        w.writeframes(np.asarray(pcm, dtype="<i2").tobytes())
    return buf.getvalue()


class OpenAIRecognizer:
    """Transcribes turns on an OpenAI-compatible transcription server."""

    name = "openai"
    partials = False

    def __init__(
        self, url: str, model: str, *, concurrency: int = 2, timeout_s: float = 30.0, api_key: str = "local"
    ) -> None:
        self.url = url.rstrip("/")
        self.model = model
        self.workers = concurrency
        self.timeout_s = timeout_s
        self._fields = {"model": model, "response_format": "json", "language": "en"}
        self._client = httpx.AsyncClient(
            base_url=self.url,
            timeout=httpx.Timeout(timeout_s, connect=5.0),
            headers={"Authorization": f"Bearer {api_key}"},
            limits=httpx.Limits(max_connections=concurrency, max_keepalive_connections=concurrency),
        )

    @property
    def concurrency(self) -> int:
        """Requests in flight at once (the server queues or batches them)."""
        return self.workers

    async def start(self) -> None:
        """Check the server answers and serves the model, then transcribe half a second
        of silence (which also loads a lazily loaded model before the first turn).

        ``GET /v1/models`` names what an OpenAI-compatible server serves (checked as
        :mod:`~duplex.pipeline.openai_http` says). A server without that route
        (faster-whisper-server) is checked by the transcription alone; that server
        reads the model from a ``model_name`` field, not OpenAI's ``model``, so such a
        server is sent both (vLLM, which has the route, would log the unknown field
        on every request).
        """
        if not await check_model(self._client, self.model, f"the transcription server {self.url}"):
            self._fields["model_name"] = self.model
        try:
            await self.transcribe(np.zeros(RATE // 2, np.int16), RATE)
        except TranscriptionError as exc:
            if exc.status is None:
                failed = f"did not answer a test transcription: {exc.detail}"
            elif exc.status < 500:
                failed = f"refused model {self.model!r} ({exc.status}: {exc.detail})"
            else:
                failed = f"failed a test transcription with model {self.model!r} ({exc.status}: {exc.detail})"
            raise ValueError(f"the transcription server {self.url} {failed}") from None

    async def transcribe(
        self, pcm: np.ndarray, rate: int, *, partial: bool = False, go_on: Callable[[], None] | None = None
    ) -> str:
        """The words in ``pcm``; raises :class:`TranscriptionError` with the server's
        reason, or saying it did not answer (within ``timeout_s``, say)."""
        if pcm.size == 0:
            return ""
        files = {"file": ("speech.wav", wav_bytes(pcm, rate), "audio/wav")}
        try:
            r = await self._client.post("/v1/audio/transcriptions", data=self._fields, files=files)
        except httpx.HTTPError as exc:
            raise TranscriptionError(self.url, None, one_line(exc)) from None
        if r.status_code != 200:
            raise TranscriptionError(self.url, r.status_code, reason(r))
        try:
            text = r.json()["text"]
        except (ValueError, KeyError, TypeError):
            raise TranscriptionError(self.url, r.status_code, f"no transcript in {reason(r)}") from None
        return str(text).strip()

    async def aclose(self) -> None:
        """Close the connections."""
        await self._client.aclose()
