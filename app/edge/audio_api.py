"""Duplex's own OpenAI-style audio endpoints, as requests parsed into jobs (sans-I/O).

``POST /v1/audio/speech`` speaks with the server's voices and ``POST /v1/audio/transcriptions``
hears with its recogniser, so one Duplex can be the voice and ears of others (``--talker
openai``, ``--asr openai``): a deployment puts the models on a few big machines and many
light front ends before them. ``GET /v1/models`` names what it serves. Each request is
parsed here into a job, or an :class:`ApiError` in OpenAI's error shape;
:mod:`~duplex.app.edge.audio_serving` runs the jobs on the sockets.

What is taken: for speech, ``input`` (at most 4096 characters, OpenAI's bound), ``voice``
(the names a Realtime session takes, OpenAI's included), ``speed`` (0.25-4),
``response_format`` ``pcm`` (24 kHz, 16-bit, mono, little-endian) or ``wav`` (the same,
with a header whose sizes say "streaming"; the default here, where OpenAI's is mp3, which
is not made), and ``model``: :data:`SPEECH_MODELS` or the server's talker (``hibari``,
``kokoro``, ``espeak``; ``espeak`` speaks the voice with eSpeak NG). For transcriptions, a
multipart form with ``file`` (WAV, or whatever FFmpeg decodes: mp3, ogg, flac, webm...),
``model`` (any: the server's recogniser hears it), ``response_format`` ``json``, ``text``
or ``verbose_json`` and ``prompt`` and ``language`` (accepted; the recogniser is English).
"""

from __future__ import annotations

import json
import struct
from dataclasses import dataclass
from http import HTTPStatus
from typing import Any

from duplex.app.edge.http import form_fields
from duplex.pipeline.talker import OPENAI_VOICES

SPEECH_PATH = "/v1/audio/speech"
TRANSCRIPTIONS_PATH = "/v1/audio/transcriptions"
MODELS_PATH = "/v1/models"
API_PATHS = (SPEECH_PATH, TRANSCRIPTIONS_PATH)
"""The POSTs whose bodies are read and answered here, not by the WebSocket layer."""
SPEECH_RATE = 24_000
"""What ``pcm`` and ``wav`` carry (OpenAI's ``pcm`` is 24 kHz)."""
MAX_INPUT_CHARS = 4096
MAX_BODY = {SPEECH_PATH: 64 * 1024, TRANSCRIPTIONS_PATH: 16 * 1024 * 1024}
"""The largest request body each takes: a speech request is a few KB of JSON; 16 MiB is
eight minutes of 16 kHz WAV, or hours of compressed audio."""
SPEECH_MODELS = ("duplex", "tts-1", "tts-1-hd", "gpt-4o-mini-tts")
"""Model names that mean "the server's voice, as the voice name routes it"."""
ESPEAK_PREFIX = "espeak:"
SPEECH_FORMATS = ("wav", "pcm")
TRANSCRIPT_FORMATS = ("json", "text", "verbose_json")


class ApiError(Exception):
    """A request the endpoint refuses: its HTTP status and OpenAI's error object."""

    def __init__(self, status: HTTPStatus, message: str, *, param: str | None = None) -> None:
        super().__init__(message)
        self.status, self.message, self.param = status, message, param

    def body(self) -> bytes:
        kind = "invalid_request_error" if self.status < 500 else "server_error"
        return json.dumps(
            {"error": {"message": self.message, "type": kind, "param": self.param, "code": None}}
        ).encode()


@dataclass(frozen=True, slots=True)
class SpeechJob:
    """What to say, with which voice, how fast, and in what format."""

    text: str
    voice: str
    speed: float
    format: str


@dataclass(frozen=True, slots=True)
class TranscriptionJob:
    """The uploaded audio (its bytes as sent) and how to answer."""

    audio: bytes
    format: str


def parse_speech(body: bytes, *, talker: str, check_voice: Any) -> SpeechJob:
    """The speech a JSON body asks for; ``check_voice(name)`` raises ValueError for a voice
    the server cannot speak. Raises :class:`ApiError`."""
    try:
        req = json.loads(body)
    except ValueError:
        raise ApiError(HTTPStatus.BAD_REQUEST, "the body is not JSON") from None
    if not isinstance(req, dict):
        raise ApiError(HTTPStatus.BAD_REQUEST, "the body is not a JSON object")
    text = req.get("input")
    if not isinstance(text, str) or not text.strip():
        raise ApiError(HTTPStatus.BAD_REQUEST, "'input' must be non-empty text", param="input")
    if len(text) > MAX_INPUT_CHARS:
        raise ApiError(HTTPStatus.BAD_REQUEST, f"'input' is over {MAX_INPUT_CHARS} characters", param="input")
    model = req.get("model", "duplex")
    models = (*SPEECH_MODELS, talker, "hibari", "kokoro", "espeak")
    if model not in models:
        raise ApiError(
            HTTPStatus.BAD_REQUEST, f"model {model!r}: this server speaks {', '.join(models)}", param="model"
        )
    voice = req.get("voice", OPENAI_VOICES[0])
    if not isinstance(voice, str) or not voice:
        raise ApiError(HTTPStatus.BAD_REQUEST, "'voice' must be a voice name", param="voice")
    if model == "espeak" and talker != "espeak" and not voice.startswith(ESPEAK_PREFIX):
        voice = ESPEAK_PREFIX + voice
    try:
        check_voice(voice)
    except ValueError as exc:
        raise ApiError(HTTPStatus.BAD_REQUEST, f"voice {voice!r}: {exc}", param="voice") from None
    speed = req.get("speed", 1.0)
    if isinstance(speed, bool) or not isinstance(speed, int | float) or not 0.25 <= speed <= 4.0:
        raise ApiError(HTTPStatus.BAD_REQUEST, "'speed' must be a number from 0.25 to 4", param="speed")
    fmt = req.get("response_format", "wav")
    if fmt not in SPEECH_FORMATS:
        raise ApiError(
            HTTPStatus.BAD_REQUEST, f"response_format {fmt!r}: this server streams wav or pcm", param="response_format"
        )
    if req.get("stream_format", "audio") != "audio":
        raise ApiError(HTTPStatus.BAD_REQUEST, "stream_format: only 'audio' is streamed here", param="stream_format")
    return SpeechJob(text, voice, float(speed), fmt)


def parse_transcription(body: bytes, content_type: str) -> TranscriptionJob:
    """The audio a multipart form uploads. Raises :class:`ApiError`."""
    if content_type.split(";", 1)[0].strip().lower() != "multipart/form-data":
        raise ApiError(HTTPStatus.UNSUPPORTED_MEDIA_TYPE, "post the audio as multipart/form-data")
    fields = form_fields(body, content_type)
    audio = fields.get("file")
    if not audio:
        raise ApiError(HTTPStatus.BAD_REQUEST, "the form has no 'file' with audio in it", param="file")
    fmt = fields.get("response_format", b"json").decode("utf-8", "replace")
    if fmt not in TRANSCRIPT_FORMATS:
        raise ApiError(
            HTTPStatus.BAD_REQUEST,
            f"response_format {fmt!r}: this server answers {', '.join(TRANSCRIPT_FORMATS)}",
            param="response_format",
        )
    return TranscriptionJob(audio, fmt)


def transcript(text: str, seconds: float, fmt: str) -> tuple[bytes, str]:
    """The answer's body and content type."""
    if fmt == "text":
        return (text + "\n").encode(), "text/plain; charset=utf-8"
    body: dict[str, Any] = {"text": text}
    if fmt == "verbose_json":
        body |= {"task": "transcribe", "language": "english", "duration": round(seconds, 3), "segments": []}
    return json.dumps(body).encode(), "application/json"


def wav_header(rate: int = SPEECH_RATE) -> bytes:
    """A mono PCM16 WAV header for a stream of unknown length (sizes 0xFFFFFFFF, as
    streaming encoders write them; readers take the data to the end)."""
    unknown = 0xFFFFFFFF
    fmt = struct.pack("<HHIIHH", 1, 1, rate, rate * 2, 2, 16)
    return (
        b"RIFF"
        + struct.pack("<I", unknown)
        + b"WAVEfmt "
        + struct.pack("<I", 16)
        + fmt
        + b"data"
        + struct.pack("<I", unknown)
    )


def models(talker: str, recognizer: str | None) -> bytes:
    """``GET /v1/models``: the voices' model names and the recogniser's."""
    names = [*dict.fromkeys((*SPEECH_MODELS, talker))]
    if recognizer is not None:
        names += ["whisper-1", recognizer]
    data = [{"id": n, "object": "model", "owned_by": "duplex"} for n in dict.fromkeys(names)]
    return json.dumps({"object": "list", "data": data}).encode()
