"""Session settings: what ``session.update`` may change, validated, in GA and beta shapes."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import asdict, dataclass, field, replace
from typing import Any

from app.protocol import ProtocolError, check_type

PCM_FORMATS = {"audio/pcm", "pcm16"}
G711_FORMATS = {"audio/pcmu", "audio/pcma", "g711_ulaw", "g711_alaw"}
INPUT_RATES = (16000, 24000)
OUTPUT_RATES = (8000, 16000, 22050, 24000, 44100, 48000)
MODALITIES = ({"audio"}, {"text"}, {"audio", "text"})


@dataclass(frozen=True, slots=True)
class TurnDetection:
    """``server_vad`` turn detection, as the Realtime protocol names its knobs."""

    type: str = "server_vad"
    threshold: float = 0.5
    prefix_padding_ms: int = 300
    silence_duration_ms: int = 500
    create_response: bool = True
    interrupt_response: bool = True
    idle_timeout_ms: int | None = None
    # Extensions: speech shorter than this is not a turn (a click, a breath)...
    min_speech_ms: int = 150
    # ...and speech over a reply must last this long to cancel it; shorter
    # speech (a cough, an "uh-huh") only pauses the reply, which then resumes.
    # Silero holds speech ~100-200 ms past its end, so eSpeak's "mhm" (560 ms)
    # measures ~670 ms: 800 keeps backchannels from killing replies.
    barge_in_min_ms: int = 800


@dataclass(frozen=True, slots=True)
class Pacing:
    """Extension: how far ahead of the client's playback audio may be sent."""

    enabled: bool = True
    lead_ms: int = 250


@dataclass(frozen=True, slots=True)
class SessionSettings:
    """The negotiated state of one session."""

    model: str = "duplex-espeak"
    instructions: str = ""
    output_modalities: tuple[str, ...] = ("audio",)
    voice: str = "alloy"
    speed: float = 1.0
    input_rate: int = 24000
    output_rate: int = 24000
    turn_detection: TurnDetection | None = field(default_factory=TurnDetection)
    transcription: dict[str, Any] | None = None
    pacing: Pacing = field(default_factory=Pacing)
    max_output_tokens: int | str = "inf"
    binary_audio: bool = False
    """Extension: microphone audio may come as binary frames of raw PCM16, and each
    audio delta goes out as its JSON header followed by one binary frame."""

    def to_ga(self, session_id: str) -> dict[str, Any]:
        """The GA ``session`` object."""
        return {
            "type": "realtime",
            "object": "realtime.session",
            "id": session_id,
            "model": self.model,
            "output_modalities": list(self.output_modalities),
            "instructions": self.instructions,
            "audio": {
                "input": {
                    "format": {"type": "audio/pcm", "rate": self.input_rate},
                    "transcription": self.transcription,
                    "turn_detection": _turn_dict(self.turn_detection),
                },
                "output": {
                    "format": {"type": "audio/pcm", "rate": self.output_rate},
                    "voice": self.voice,
                    "speed": self.speed,
                },
            },
            "max_output_tokens": self.max_output_tokens,
            "pacing": asdict(self.pacing),
            "binary_audio": self.binary_audio,
        }

    def to_beta(self, session_id: str) -> dict[str, Any]:
        """The beta ``session`` object."""
        return {
            "id": session_id,
            "object": "realtime.session",
            "model": self.model,
            "modalities": list(self.output_modalities),
            "instructions": self.instructions,
            "voice": self.voice,
            "speed": self.speed,
            "input_audio_format": "pcm16",
            "output_audio_format": "pcm16",
            "input_audio_transcription": self.transcription,
            "turn_detection": _turn_dict(self.turn_detection),
            "max_response_output_tokens": self.max_output_tokens,
            "pacing": asdict(self.pacing),
            "binary_audio": self.binary_audio,
            "input_audio_rate": self.input_rate,
            "output_audio_rate": self.output_rate,
        }


def _turn_dict(td: TurnDetection | None) -> dict[str, Any] | None:
    return None if td is None else asdict(td)


def _get(obj: dict[str, Any], key: str, types: tuple[type, ...], param: str) -> Any:
    value = obj[key]
    check_type(value, types, param)
    return value


def _format(value: Any, param: str, rates: tuple[int, ...], current: int) -> int:
    """Validate an audio format (GA object or beta string); return its rate."""
    if isinstance(value, str):
        kind, rate = value, current
    else:
        check_type(value, (dict,), param)
        kind = _get(value, "type", (str,), f"{param}.type") if "type" in value else "audio/pcm"
        rate = _get(value, "rate", (int,), f"{param}.rate") if "rate" in value else current
    if kind in G711_FORMATS:
        raise ProtocolError("unsupported_format", f"{param}: {kind} is not supported; use audio/pcm", param=param)
    if kind not in PCM_FORMATS:
        raise ProtocolError("invalid_value", f"{param}: unknown audio format {kind!r}", param=param)
    if rate not in rates:
        raise ProtocolError(
            "unsupported_rate", f"{param}: rate {rate} is not supported (one of {list(rates)})", param=f"{param}.rate"
        )
    return rate


def _side_rate(update: dict[str, Any], audio_side: dict[str, Any], side: str, rates: tuple[int, ...],
               current: int) -> int | None:
    """The rate an update sets for one side (GA ``audio.<side>.format`` or beta
    ``<side>_audio_format`` + ``<side>_audio_rate``), or None if it sets none."""
    rate = None
    if "format" in audio_side:
        rate = _format(audio_side["format"], f"session.audio.{side}.format", rates, current)
    if f"{side}_audio_format" in update:
        rate = _format(update[f"{side}_audio_format"], f"session.{side}_audio_format", rates, current)
        if f"{side}_audio_rate" in update:
            rate = _format({"rate": update[f"{side}_audio_rate"]}, f"session.{side}_audio_rate", rates, current)
    return rate


def _turn_detection(value: Any, param: str, current: TurnDetection | None) -> TurnDetection | None:
    if value is None:
        return None
    check_type(value, (dict,), param)
    kind = value.get("type", "server_vad")
    if kind != "server_vad":
        raise ProtocolError("unsupported_value", f"{param}.type {kind!r} is not supported; use server_vad", param=f"{param}.type")
    td = current or TurnDetection()
    updates: dict[str, Any] = {}
    for key, types, lo, hi in (
        ("threshold", (float,), 0.0, 1.0),
        ("prefix_padding_ms", (int,), 0, 5000),
        ("silence_duration_ms", (int,), 0, 10000),
        ("idle_timeout_ms", (int, type(None)), 5000, 30 * 60 * 1000),
        ("min_speech_ms", (int,), 0, 5000),
        ("barge_in_min_ms", (int,), 0, 10000),
    ):
        if key in value:
            v = _get(value, key, types, f"{param}.{key}")
            if v is not None and not lo <= v <= hi:
                raise ProtocolError("invalid_value", f"{param}.{key} must be within [{lo}, {hi}]", param=f"{param}.{key}")
            updates[key] = v
    for key in ("create_response", "interrupt_response"):
        if key in value:
            updates[key] = _get(value, key, (bool,), f"{param}.{key}")
    return replace(td, **updates)


def apply_update(
    current: SessionSettings, update: dict[str, Any], *, check_voice: Callable[[str], None], audio_started: bool
) -> SessionSettings:
    """Validate a ``session.update`` body (GA or beta shape) against ``current``.

    All or nothing: the first bad field raises ProtocolError and nothing changes.
    """
    s = current
    p = "session"
    if "model" in update:
        s = replace(s, model=_get(update, "model", (str,), f"{p}.model"))
    if "instructions" in update:
        s = replace(s, instructions=_get(update, "instructions", (str,), f"{p}.instructions"))
    for key in ("output_modalities", "modalities"):
        if key in update:
            mods = _get(update, key, (list,), f"{p}.{key}")
            if not all(isinstance(m, str) for m in mods) or set(mods) not in MODALITIES:
                raise ProtocolError("invalid_value", f"{p}.{key} must be ['audio'], ['text'] or both", param=f"{p}.{key}")
            s = replace(s, output_modalities=tuple(sorted(set(mods))))
    for key in ("max_output_tokens", "max_response_output_tokens"):
        if key in update:
            v = update[key]
            if v != "inf":
                check_type(v, (int,), f"{p}.{key}")
                if not 1 <= v <= 4096:
                    raise ProtocolError("invalid_value", f"{p}.{key} must be within [1, 4096] or 'inf'", param=f"{p}.{key}")
            s = replace(s, max_output_tokens=v)
    audio = update.get("audio")
    if audio is not None:
        check_type(audio, (dict,), f"{p}.audio")
    audio = audio or {}
    a_in = audio.get("input") or {}
    a_out = audio.get("output") or {}
    check_type(a_in, (dict,), f"{p}.audio.input")
    check_type(a_out, (dict,), f"{p}.audio.output")

    for side, obj, rates in (("input", a_in, INPUT_RATES), ("output", a_out, OUTPUT_RATES)):
        current = s.input_rate if side == "input" else s.output_rate
        rate = _side_rate(update, obj, side, rates, current)
        if rate is None:
            continue
        if side == "input":
            if rate != s.input_rate and audio_started:
                raise ProtocolError("invalid_value", "the input rate cannot change once audio has been received",
                                    param=f"{p}.audio.input.format")
            s = replace(s, input_rate=rate)
        else:
            s = replace(s, output_rate=rate)
    for obj, param in ((a_out, f"{p}.audio.output"), (update, p)):
        if "voice" in obj:
            voice = _get(obj, "voice", (str,), f"{param}.voice")
            try:
                check_voice(voice)
            except ValueError as exc:
                raise ProtocolError("invalid_value", f"{param}.voice: {exc}", param=f"{param}.voice") from None
            s = replace(s, voice=voice)
        if "speed" in obj:
            speed = _get(obj, "speed", (float,), f"{param}.speed")
            if not 0.25 <= speed <= 1.5:
                raise ProtocolError("invalid_value", f"{param}.speed must be within [0.25, 1.5]", param=f"{param}.speed")
            s = replace(s, speed=float(speed))
    for obj, param in ((a_in, f"{p}.audio.input"), (update, p)):
        if "turn_detection" in obj:
            s = replace(s, turn_detection=_turn_detection(obj["turn_detection"], f"{param}.turn_detection", s.turn_detection))
    for obj, key, param in ((a_in, "transcription", f"{p}.audio.input.transcription"),
                            (update, "input_audio_transcription", f"{p}.input_audio_transcription")):
        if key in obj:
            value = obj[key]
            if value is not None:
                check_type(value, (dict,), param)
            s = replace(s, transcription=value)
    if "binary_audio" in update:
        s = replace(s, binary_audio=_get(update, "binary_audio", (bool,), f"{p}.binary_audio"))
    if "pacing" in update:
        pacing = _get(update, "pacing", (dict,), f"{p}.pacing")
        enabled = _get(pacing, "enabled", (bool,), f"{p}.pacing.enabled") if "enabled" in pacing else s.pacing.enabled
        lead = _get(pacing, "lead_ms", (int,), f"{p}.pacing.lead_ms") if "lead_ms" in pacing else s.pacing.lead_ms
        if not 0 <= lead <= 10000:
            raise ProtocolError("invalid_value", f"{p}.pacing.lead_ms must be within [0, 10000]", param=f"{p}.pacing.lead_ms")
        s = replace(s, pacing=Pacing(enabled, lead))
    return s
