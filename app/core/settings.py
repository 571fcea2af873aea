"""Session settings and the one validator for what clients may set.

``session.update`` (GA or beta shape) and ``response.create``'s options go through
the same field checks here, so a voice or a modality list means the same thing in
both. Validation is all or nothing: the first bad field raises
:class:`ProtocolError` and nothing changes. The wire shapes of the session object
are rendered in :mod:`duplex.app.core.wire`.

Why this module is long: every field a client may set is checked here, in one place,
so that ``session.update`` and ``response.create`` cannot disagree on one; split by
field, the GA and beta shapes of the same field would be read in two modules.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field, replace
from typing import Any, Literal, cast, get_args

from duplex.app.core.protocol import ProtocolError, check_type
from duplex.app.core.tool_settings import tool_choice, tools, truncation
from duplex.pipeline.talker import DEFAULT_VOICE

Modality = Literal["audio", "text"]
MODALITIES: frozenset[Modality] = frozenset(get_args(Modality))
AudioFormat = Literal["pcm16", "pcmu", "pcma"]
"""Audio on the wire, as the session keeps it (GA and beta names map to these)."""
TurnDetectionType = Literal["server_vad", "semantic_vad"]
TURN_DETECTION_TYPES: tuple[TurnDetectionType, ...] = get_args(TurnDetectionType)
EagernessName = Literal["low", "medium", "high", "auto"]
NoiseReduction = Literal["near_field", "far_field"]
"""``near_field``: a headset or a close microphone (noise suppressed, nothing to cancel);
``far_field``: a speakerphone or a room microphone (noise suppressed, the reply's echo
cancelled)."""
NOISE_REDUCTIONS: tuple[NoiseReduction, ...] = get_args(NoiseReduction)
EAGERNESS_NAMES: tuple[EagernessName, ...] = get_args(EagernessName)
PCM_FORMATS = {"audio/pcm", "pcm16"}
G711_FORMATS: dict[str, AudioFormat] = {
    "audio/pcmu": "pcmu",
    "audio/pcma": "pcma",
    "g711_ulaw": "pcmu",
    "g711_alaw": "pcma",
}
"""G.711 by its GA and beta names: 8 kHz on the wire; heard at 16 kHz (see pipeline.g711)."""
G711_WIRE_RATE = 8000
G711_HEARD_RATE = 16000
INPUT_RATES = (16000, 24000)
OUTPUT_RATES = (8000, 16000, 22050, 24000, 44100, 48000)

VoiceCheck = Callable[[str], None]
"""Raises ValueError naming the problem when a voice is not usable (the talker's check)."""


@dataclass(frozen=True, slots=True)
class TurnDetection:
    """Turn detection, as the Realtime protocol names its knobs: ``server_vad`` ends a
    turn after ``silence_duration_ms``; ``semantic_vad`` when the speaker sounds done
    (``eagerness``: see :mod:`duplex.app.core.listening.semantic`). VAD knobs apply to both.

    Which default wins: ``server_vad`` here is the Realtime protocol's own default, what a
    session built without settings hears with; ``duplex serve`` starts every session with
    its ``--turn-detection`` instead (``semantic_vad`` unless told otherwise), so for a
    served session the server's default wins, and a client's ``session.update`` over both."""

    type: TurnDetectionType = "server_vad"
    eagerness: EagernessName = "auto"
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
    # ...and ducks the reply (plays it on this much quieter) while it is judged; None
    # pauses it instead.
    duck_db: float | None = -24.0
    # ...and speech at the user's level this long that no transcript has called a
    # backchannel pauses the ducked reply (resumed where it stopped if the speech is no
    # turn): a request falls silent before its words are known (held out, at real time,
    # 0.37 s after it began against 0.52-0.56 s for its words to cancel it); most
    # backchannels are paused too (33 of 40 held out, 0.47 s at the median). None: the
    # reply stays ducked until the words decide.
    barge_in_hold_ms: int | None = 300


@dataclass(frozen=True, slots=True)
class Pacing:
    """Extension: how far ahead of the client's playback audio may be sent."""

    enabled: bool = True
    lead_ms: int = 250


@dataclass(frozen=True, slots=True)
class SessionSettings:
    """The negotiated state of one session."""

    model: str = "duplex"
    instructions: str = ""
    output_modalities: tuple[Modality, ...] = ("audio",)
    voice: str = DEFAULT_VOICE
    speed: float = 1.0
    input_rate: int = 24000
    """The rate input is heard at (G.711 arrives at 8 kHz and is heard at 16 kHz)."""
    output_rate: int = 24000
    input_format: AudioFormat = "pcm16"
    """``pcm16``, or G.711: ``pcmu`` (μ-law) or ``pcma`` (A-law)."""
    output_format: AudioFormat = "pcm16"
    turn_detection: TurnDetection | None = field(default_factory=TurnDetection)
    transcription: dict[str, Any] | None = None
    pacing: Pacing = field(default_factory=Pacing)
    max_output_tokens: int | str = "inf"
    """The longest reply the thinker may write, in tokens (``"inf"``: the thinker's own limit)."""
    temperature: float | None = None
    """The thinker's sampling temperature (None: the server's)."""
    noise_reduction: NoiseReduction | None = None
    """The protocol's ``input_audio_noise_reduction``: what kind of microphone, so what
    to clean (None: noise is left as it is)."""
    echo_cancellation: bool = True
    """Extension: cancel the reply's echo in the microphone (the server's default;
    ``near_field`` turns it off, ``far_field`` on). See :meth:`cleaning`."""
    binary_audio: bool = False
    """Extension: microphone audio may come as binary frames of raw PCM16, and each
    audio delta goes out as its JSON header followed by one binary frame."""
    tools: tuple[dict[str, Any], ...] = ()
    """Function tools the thinker may call (the Realtime shape)."""
    tool_choice: str | dict[str, Any] = "auto"
    truncation: str | dict[str, Any] = "auto"
    """How the thinker's context is cut when the conversation outgrows it (see
    :func:`duplex.app.core.context.fit`): ``auto``, ``disabled`` or a retention ratio."""

    def cleaning(self) -> tuple[bool, bool]:
        """What the microphone's cleaner does: (cancel the echo, suppress noise)."""
        nr = self.noise_reduction
        echo = nr == "far_field" or (nr is None and self.echo_cancellation)
        return echo, nr is not None


@dataclass(frozen=True, slots=True)
class ResponseOptions:
    """What one ``response.create`` asks for, over the session's settings."""

    modalities: tuple[Modality, ...]
    voice: str
    instructions: str | None = None
    metadata: dict[str, str] | None = None
    """Echoed on the response (LiveKit finds its reply by ``metadata.client_event_id``)."""
    tools: tuple[dict[str, Any], ...] = ()
    tool_choice: str | dict[str, Any] = "auto"
    out_of_band: bool = False
    """``conversation: "none"``: the reply's items stay out of the conversation."""
    max_output_tokens: int | str = "inf"
    temperature: float | None = None


# -- fields ------------------------------------------------------------------
def _get(obj: dict[str, Any], key: str, types: tuple[type, ...], param: str) -> Any:
    value = obj[key]
    check_type(value, types, param)
    return value


def _bad(param: str, message: str, code: str = "invalid_value") -> ProtocolError:
    return ProtocolError(code, message, param=param)


def modalities(value: Any, param: str) -> tuple[Modality, ...]:
    """A non-empty list of 'audio' and/or 'text'."""
    check_type(value, (list,), param)
    if not value or not all(isinstance(m, str) for m in value) or not set(value) <= MODALITIES:
        raise _bad(param, f"{param} must be ['audio'], ['text'] or both")
    return tuple(m for m in get_args(Modality) if m in value)  # sorted, as ever: audio before text


def voice(value: Any, param: str, check_voice: VoiceCheck) -> str:
    """A voice name the talker accepts."""
    check_type(value, (str,), param)
    try:
        check_voice(value)
    except ValueError as exc:
        raise _bad(param, f"{param}: {exc}") from None
    return str(value)


def _in_range(value: Any, types: tuple[type, ...], lo: float, hi: float, param: str) -> Any:
    check_type(value, types, param)
    if value is not None and not lo <= value <= hi:
        raise _bad(param, f"{param} must be within [{lo}, {hi}]")
    return value


def _format(value: Any, param: str, rates: tuple[int, ...], current: int, g711_rate: int) -> tuple[AudioFormat, int]:
    """Validate an audio format (GA object or beta string); return its encoding and rate."""
    if isinstance(value, str):
        kind, rate = value, None
    else:
        check_type(value, (dict,), param)
        kind = _get(value, "type", (str,), f"{param}.type") if "type" in value else "audio/pcm"
        rate = _get(value, "rate", (int,), f"{param}.rate") if "rate" in value else None
    if kind in G711_FORMATS:
        if rate not in (None, G711_WIRE_RATE):
            raise _bad(f"{param}.rate", f"{param}: {kind} is {G711_WIRE_RATE} Hz", "unsupported_rate")
        return G711_FORMATS[kind], g711_rate
    if kind not in PCM_FORMATS:
        raise _bad(param, f"{param}: unknown audio format {kind!r}")
    rate = current if rate is None else rate
    if rate not in rates:
        raise _bad(f"{param}.rate", f"{param}: rate {rate} is not supported (one of {list(rates)})", "unsupported_rate")
    return "pcm16", int(rate)


def _side_format(
    update: dict[str, Any], audio_side: dict[str, Any], side: str, rates: tuple[int, ...], current: int
) -> tuple[AudioFormat, int] | None:
    """The format an update sets for one side (GA ``audio.<side>.format`` or beta
    ``<side>_audio_format`` + ``<side>_audio_rate``), or None if it sets none."""
    g711_rate = G711_HEARD_RATE if side == "input" else G711_WIRE_RATE
    chosen = None
    if "format" in audio_side:
        chosen = _format(audio_side["format"], f"session.audio.{side}.format", rates, current, g711_rate)
    if f"{side}_audio_format" in update:
        chosen = _format(update[f"{side}_audio_format"], f"session.{side}_audio_format", rates, current, g711_rate)
        if f"{side}_audio_rate" in update and chosen[0] == "pcm16":
            rate = {"rate": update[f"{side}_audio_rate"]}
            chosen = _format(rate, f"session.{side}_audio_rate", rates, current, g711_rate)
    return chosen


_TURN_RANGES: tuple[tuple[str, tuple[type, ...], float, float], ...] = (
    ("threshold", (float,), 0.0, 1.0),
    ("prefix_padding_ms", (int,), 0, 5000),
    ("silence_duration_ms", (int,), 0, 10000),
    ("idle_timeout_ms", (int, type(None)), 5000, 30 * 60 * 1000),
    ("min_speech_ms", (int,), 0, 5000),
    ("barge_in_min_ms", (int,), 0, 10000),
    ("barge_in_hold_ms", (int, type(None)), 0, 10000),
    ("duck_db", (float, type(None)), -60.0, 0.0),
)


def _turn_detection(value: Any, param: str, current: TurnDetection | None) -> TurnDetection | None:
    if value is None:
        return None
    check_type(value, (dict,), param)
    base = current or TurnDetection()
    kind = value.get("type", base.type)
    if kind not in TURN_DETECTION_TYPES:
        raise _bad(
            f"{param}.type",
            f"{param}.type {kind!r} is not supported; use server_vad or semantic_vad",
            "unsupported_value",
        )
    updates: dict[str, Any] = {"type": kind}
    if "eagerness" in value:
        eagerness = _get(value, "eagerness", (str,), f"{param}.eagerness")
        if eagerness not in EAGERNESS_NAMES:
            raise _bad(f"{param}.eagerness", f"{param}.eagerness must be one of {', '.join(EAGERNESS_NAMES)}")
        updates["eagerness"] = eagerness
    for key, types, lo, hi in _TURN_RANGES:
        if key in value:
            updates[key] = _in_range(value[key], types, lo, hi, f"{param}.{key}")
    for key in ("create_response", "interrupt_response"):
        if key in value:
            updates[key] = _get(value, key, (bool,), f"{param}.{key}")
    return replace(base, **updates)


def _noise_reduction(value: Any, param: str) -> NoiseReduction | None:
    """GA and beta alike: null, or an object whose ``type`` is near_field or far_field."""
    if value is None:
        return None
    check_type(value, (dict,), param)
    kind = value.get("type")
    if kind not in NOISE_REDUCTIONS:
        raise _bad(f"{param}.type", f"{param}.type must be one of {', '.join(NOISE_REDUCTIONS)}")
    return cast(NoiseReduction, kind)


def _pacing(value: Any, param: str, current: Pacing) -> Pacing:
    check_type(value, (dict,), param)
    enabled = _get(value, "enabled", (bool,), f"{param}.enabled") if "enabled" in value else current.enabled
    lead = _in_range(value["lead_ms"], (int,), 0, 10000, f"{param}.lead_ms") if "lead_ms" in value else current.lead_ms
    return Pacing(enabled, lead)


# -- session.update ----------------------------------------------------------
_TRANSCRIPTION = {"model": 64, "language": 16, "prompt": 4096}
"""The transcription settings kept, and the characters each may hold (other keys are
not used here, and are not stored)."""


def _transcription(value: Any, param: str) -> dict[str, Any] | None:
    if value is None:
        return None
    check_type(value, (dict,), param)
    kept: dict[str, Any] = {}
    for key, most in _TRANSCRIPTION.items():
        if value.get(key) is not None:
            check_type(value[key], (str,), f"{param}.{key}")
            if len(value[key]) > most:
                raise _bad(f"{param}.{key}", f"{param}.{key} holds more than {most} characters")
            kept[key] = value[key]
    return kept


def apply_update(
    current: SessionSettings, update: dict[str, Any], *, check_voice: VoiceCheck, audio_started: bool
) -> SessionSettings:
    """The settings after a ``session.update`` body (GA or beta shape) over ``current``."""
    s = current
    p = "session"
    if "model" in update:
        s = replace(s, model=_get(update, "model", (str,), f"{p}.model"))
    if "instructions" in update:
        s = replace(s, instructions=_get(update, "instructions", (str,), f"{p}.instructions"))
    for key in ("output_modalities", "modalities"):
        if key in update:
            s = replace(s, output_modalities=modalities(update[key], f"{p}.{key}"))
    for key in ("max_output_tokens", "max_response_output_tokens"):
        if key in update:
            s = replace(s, max_output_tokens=max_tokens(update[key], f"{p}.{key}"))
    if "temperature" in update:
        s = replace(s, temperature=temperature(update["temperature"], f"{p}.temperature"))
    audio = update.get("audio")
    if audio is not None:
        check_type(audio, (dict,), f"{p}.audio")
    audio = audio or {}
    a_in = audio.get("input") or {}
    a_out = audio.get("output") or {}
    check_type(a_in, (dict,), f"{p}.audio.input")
    check_type(a_out, (dict,), f"{p}.audio.output")

    chosen = _side_format(update, a_in, "input", INPUT_RATES, s.input_rate)
    if chosen is not None:
        if chosen != (s.input_format, s.input_rate) and audio_started:
            key = f"{p}.input_audio_format" if "input_audio_format" in update else f"{p}.audio.input.format"
            raise _bad(key, "the input format cannot change once audio has been received")
        s = replace(s, input_format=chosen[0], input_rate=chosen[1])
    chosen = _side_format(update, a_out, "output", OUTPUT_RATES, s.output_rate)
    if chosen is not None:
        s = replace(s, output_format=chosen[0], output_rate=chosen[1])
    for obj, param in ((a_out, f"{p}.audio.output"), (update, p)):
        if "voice" in obj:
            s = replace(s, voice=voice(obj["voice"], f"{param}.voice", check_voice))
        if "speed" in obj:
            s = replace(s, speed=float(_in_range(obj["speed"], (float,), 0.25, 1.5, f"{param}.speed")))
    for obj, param in ((a_in, f"{p}.audio.input"), (update, p)):
        if "turn_detection" in obj:
            td = _turn_detection(obj["turn_detection"], f"{param}.turn_detection", s.turn_detection)
            s = replace(s, turn_detection=td)
    for obj, key, param in (
        (a_in, "transcription", f"{p}.audio.input.transcription"),
        (update, "input_audio_transcription", f"{p}.input_audio_transcription"),
    ):
        if key in obj:
            s = replace(s, transcription=_transcription(obj[key], param))
    for obj, key, param in (
        (a_in, "noise_reduction", f"{p}.audio.input.noise_reduction"),
        (update, "input_audio_noise_reduction", f"{p}.input_audio_noise_reduction"),
    ):
        if key in obj:
            nr = _noise_reduction(obj[key], param)
            s = replace(s, noise_reduction=nr, echo_cancellation=nr != "near_field" if nr else s.echo_cancellation)
    if "echo_cancellation" in update:
        s = replace(s, echo_cancellation=_get(update, "echo_cancellation", (bool,), f"{p}.echo_cancellation"))
    if "binary_audio" in update:
        s = replace(s, binary_audio=_get(update, "binary_audio", (bool,), f"{p}.binary_audio"))
    if "pacing" in update:
        s = replace(s, pacing=_pacing(update["pacing"], f"{p}.pacing", s.pacing))
    if "truncation" in update:
        s = replace(s, truncation=truncation(update["truncation"], f"{p}.truncation"))
    if "tools" in update:
        s = replace(s, tools=tools(update["tools"], f"{p}.tools"))
    if "tool_choice" in update or "tools" in update:
        choice = update.get("tool_choice", s.tool_choice)
        s = replace(s, tool_choice=tool_choice(choice, f"{p}.tool_choice", s.tools))
    return s


def max_tokens(v: Any, param: str) -> int | str:
    """A reply length limit: tokens in [1, 4096], or ``"inf"``."""
    if v != "inf":
        check_type(v, (int,), param)
        if not 1 <= v <= 4096:
            raise _bad(param, f"{param} must be within [1, 4096] or 'inf'")
    return cast(int | str, v)


def temperature(v: Any, param: str) -> float | None:
    """A sampling temperature in [0, 2] (None: the server's)."""
    return None if v is None else float(_in_range(v, (int, float), 0.0, 2.0, param))


# -- response.create ---------------------------------------------------------
def response_options(current: SessionSettings, opts: dict[str, Any], *, check_voice: VoiceCheck) -> ResponseOptions:
    """What a ``response.create``'s ``response`` object asks for, over the session's settings."""
    mods = current.output_modalities
    for key in ("output_modalities", "modalities"):
        if key in opts:
            mods = modalities(opts[key], f"response.{key}")
    chosen = current.voice
    audio = opts.get("audio")
    out = audio.get("output") if isinstance(audio, dict) else None
    for obj, param in ((opts, "response.voice"), (out if isinstance(out, dict) else {}, "response.audio.output.voice")):
        if "voice" in obj:
            chosen = voice(obj["voice"], param, check_voice)
    instructions = opts.get("instructions")
    if instructions is not None:
        check_type(instructions, (str,), "response.instructions")
    metadata = opts.get("metadata")
    if metadata is not None:
        check_type(metadata, (dict,), "response.metadata")
        # OpenAI's bounds: 16 pairs, keys up to 64 characters, values up to 512.
        if len(metadata) > 16 or not all(
            isinstance(k, str) and isinstance(v, str) and len(k) <= 64 and len(v) <= 512 for k, v in metadata.items()
        ):
            raise _bad("response.metadata", "response.metadata must hold at most 16 string pairs (64/512 characters)")
    conversation = opts.get("conversation", "auto")
    if conversation not in ("auto", "none"):
        raise _bad("response.conversation", "response.conversation must be 'auto' or 'none'")
    offered = tools(opts["tools"], "response.tools") if "tools" in opts else current.tools
    choice = current.tool_choice
    if "tool_choice" in opts or "tools" in opts:
        choice = tool_choice(opts.get("tool_choice", choice), "response.tool_choice", offered)
    limit = current.max_output_tokens
    for key in ("max_output_tokens", "max_response_output_tokens"):
        if key in opts:
            limit = max_tokens(opts[key], f"response.{key}")
    warmth = temperature(opts["temperature"], "response.temperature") if "temperature" in opts else current.temperature
    return ResponseOptions(mods, chosen, instructions, metadata, offered, choice, conversation == "none", limit, warmth)
