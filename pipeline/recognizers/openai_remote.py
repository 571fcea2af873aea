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
from typing import Any

import httpx
import numpy as np
import soxr

RATE = 16000
"""What the upload is resampled to: Whisper's rate, and the smallest WAV that keeps all it hears."""
DETAIL = 200
"""Characters of a server's error message kept in ours."""


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


def reason(response: httpx.Response) -> str:
    """One line saying why the server refused: its error message if it sent one in
    a known shape (OpenAI's ``{"error": {"message"}}``, FastAPI's ``{"detail"}``), else its body."""
    message: Any = None
    try:
        body: Any = response.json()
    except ValueError:
        body = None
    # OpenAI and vLLM: {"error": {"message": ...}}; FastAPI: {"detail": ...}, which
    # faster-whisper-server fills with OpenAI's shape; older vLLM: {"message": ...}.
    for key in ("error", "detail", "error", "message"):
        if isinstance(body, dict) and key in body:
            body = body[key]
            message = body
    if not isinstance(message, str):
        message = response.text if message is None else str(message)
    line = " ".join(message.split()) or response.reason_phrase
    return line if len(line) <= DETAIL else line[: DETAIL - 3] + "..."


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

        ``GET /v1/models`` names what an OpenAI-compatible server serves. A server
        without that route (faster-whisper-server) is checked by the transcription
        alone; that server reads the model from a ``model_name`` field, not
        OpenAI's ``model``, so such a server is sent both (vLLM, which has the route,
        would log the unknown field on every request).
        """
        try:
            r = await self._client.get("/v1/models")
        except httpx.HTTPError as exc:
            raise ValueError(f"the transcription server {self.url} is not reachable: {_one_line(exc)}") from None
        if r.status_code in (404, 405):
            self._fields["model_name"] = self.model
        elif r.status_code != 200:
            raise ValueError(f"the transcription server {self.url} answered {r.status_code} to /v1/models: {reason(r)}")
        else:
            try:
                served = [m.get("id") for m in r.json().get("data", [])]
            except (ValueError, AttributeError):
                served = []
            if served and self.model not in served:
                raise ValueError(f"the transcription server {self.url} serves {served}, not {self.model!r}")
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

    async def transcribe(self, pcm: np.ndarray, rate: int, *, partial: bool = False) -> str:
        """The words in ``pcm``; raises :class:`TranscriptionError` with the server's
        reason, or saying it did not answer (within ``timeout_s``, say)."""
        if pcm.size == 0:
            return ""
        files = {"file": ("speech.wav", wav_bytes(pcm, rate), "audio/wav")}
        try:
            r = await self._client.post("/v1/audio/transcriptions", data=self._fields, files=files)
        except httpx.HTTPError as exc:
            raise TranscriptionError(self.url, None, _one_line(exc)) from None
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


def _one_line(exc: BaseException) -> str:
    return " ".join(str(exc).split()) or type(exc).__name__
