"""``--talker openai``: any OpenAI-style ``/v1/audio/speech`` endpoint as the voice.

vLLM-Omni, Kokoro-FastAPI, OpenAI itself, or another Duplex (its own ``/v1/audio/speech``)
speaks each text segment; the answer is streamed as WAV and its PCM handed on piece by
piece as it comes, at the endpoint's own rate (the vocoder stage resamples it once to
the session's), into the same pacing and barge-in path as a local voice. Cancelling a
reply closes its generator, which closes the HTTP stream at once (the endpoint sees the
client go and can stop). A request that fails raises :class:`~duplex.pipeline.talker.TalkerError`,
so the reply ends ``failed`` with an ``error`` event, never in silence; :meth:`start` checks the
endpoint before serving (one clear line if it cannot speak).

WAV is asked for, not raw ``pcm``, because its header says the rate and the sample
format: OpenAI's ``pcm`` is 24 kHz, other servers' is not always. A WAV that is not
16-bit PCM is refused with the reason.
"""

from __future__ import annotations

import struct
from collections.abc import AsyncIterator
from dataclasses import dataclass

import httpx
import numpy as np

from duplex.pipeline.frames import AudioBuffer
from duplex.pipeline.openai_http import check_model, one_line, reason
from duplex.pipeline.talker import DEFAULT_VOICE, OPENAI_VOICES, SpeechRequest, TalkerChunk, TalkerError

READ_BYTES = 4096
"""Bytes read at a time: ~85 ms of 24 kHz PCM16, so the first audio is handed on at once."""


@dataclass(slots=True)
class WavStream:
    """A WAV arriving in pieces: its header read once, then PCM16 samples as they come."""

    rate: int = 0
    _buf: bytes = b""
    _in_data: bool = False

    def feed(self, data: bytes) -> np.ndarray:
        """The whole samples ``data`` completes (raises ValueError for what is not PCM16 WAV)."""
        self._buf += data
        if not self._in_data:
            if len(self._buf) >= 4 and self._buf[:4] != b"RIFF":
                raise ValueError("the answer is not WAV")
            at = 12
            while len(self._buf) >= at + 8:
                tag, size = self._buf[at : at + 4], struct.unpack("<I", self._buf[at + 4 : at + 8])[0]
                if tag == b"fmt ":
                    if len(self._buf) < at + 8 + 16:
                        return np.zeros(0, np.int16)
                    audio, channels, rate, _, _, bits = struct.unpack("<HHIIHH", self._buf[at + 8 : at + 24])
                    if audio != 1 or bits != 16 or channels != 1:
                        raise ValueError(f"the WAV is {bits}-bit, {channels} channels, format {audio}: want PCM16 mono")
                    self.rate = rate
                elif tag == b"data":
                    if not self.rate:
                        raise ValueError("the WAV's data comes before its format")
                    self._buf, self._in_data = self._buf[at + 8 :], True
                    break
                at += 8 + size + (size & 1)
            if not self._in_data:
                return np.zeros(0, np.int16)
        whole = len(self._buf) // 2 * 2
        samples, self._buf = np.frombuffer(self._buf[:whole], "<i2").copy(), self._buf[whole:]
        return samples


class OpenAISpeechTalker:
    """Speaks through an OpenAI-style speech endpoint."""

    name = "openai"

    def __init__(
        self,
        url: str,
        model: str,
        *,
        voice: str | None = None,
        api_key: str = "local",
        timeout_s: float = 30.0,
        connections: int = 64,
    ) -> None:
        self.url = url.rstrip("/")
        self.model = model
        self.voice = voice
        """The endpoint's voice for sessions on the server's default voice (None: that name)."""
        self.artifact_id = f"openai-speech:{model}@{self.url}"
        self._client = httpx.AsyncClient(
            base_url=self.url,
            timeout=httpx.Timeout(timeout_s, connect=5.0),
            headers={"Authorization": f"Bearer {api_key}"},
            limits=httpx.Limits(max_connections=connections, max_keepalive_connections=connections),
        )

    async def start(self) -> None:
        """Check the endpoint serves the model and speaks a word (raises ValueError saying why not)."""
        where = f"the speech endpoint {self.url}"
        await check_model(self._client, self.model, where)
        try:
            async for _ in self.speak(SpeechRequest("start", "Ready.", DEFAULT_VOICE)):
                pass
        except TalkerError as exc:
            raise ValueError(f"{where} cannot speak with model {self.model!r}: {exc}") from None

    async def speak(self, request: SpeechRequest) -> AsyncIterator[TalkerChunk]:
        voice = request.voice or DEFAULT_VOICE
        if self.voice is not None and voice == DEFAULT_VOICE:
            voice = self.voice
        body: dict[str, str | float] = {
            "model": self.model,
            "input": request.text,
            "voice": voice,
            "response_format": "wav",
        }
        if request.speed != 1.0:
            body["speed"] = request.speed
        wav = WavStream()
        try:
            async with self._client.stream("POST", "/v1/audio/speech", json=body) as r:
                if r.status_code != 200:
                    await r.aread()
                    raise TalkerError(f"the speech endpoint answered {r.status_code}: {reason(r)}")
                async for data in r.aiter_bytes(READ_BYTES):
                    samples = wav.feed(data)
                    if samples.size:
                        yield TalkerChunk(AudioBuffer.pcm(samples, wav.rate, self.name))
        except httpx.HTTPError as exc:
            raise TalkerError(f"the speech endpoint {self.url} failed: {one_line(exc)}") from None
        except ValueError as exc:
            raise TalkerError(f"the speech endpoint {self.url}: {exc}") from None

    def voices(self) -> list[str]:
        return list(OPENAI_VOICES)

    def check_voice(self, voice: str) -> None:
        """Any name: the endpoint decides (one it does not know fails that reply, with its reason)."""
        if not voice.strip():
            raise ValueError("a voice needs a name")

    def release(self, request_id: str) -> None:
        """Nothing is kept across a reply's segments."""

    async def aclose(self) -> None:
        await self._client.aclose()
