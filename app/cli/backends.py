"""Which backends the server runs, built from the user's choice and checked before anything starts."""

from __future__ import annotations

import asyncio
import importlib.util
import json
import logging
import os
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from duplex.app.edge.config import option
from duplex.pipeline.backends import Backends
from duplex.pipeline.echo import Cleaning
from duplex.pipeline.recognizer import Recognizer
from duplex.pipeline.talker import Talker
from duplex.pipeline.thinker import Thinker
from duplex.pipeline.thinkers.chat_models import DEFAULT_MODEL as DEFAULT_CHAT_MODEL
from duplex.pipeline.thinkers.chat_models import MODELS as CHAT_MODELS
from duplex.pipeline.vocoder import Vocoder
from duplex.pipeline.weights import WeightsError

if TYPE_CHECKING:
    from duplex.pipeline.talkers.kokoro import KokoroTalker

TALKERS = ("hibari", "kokoro", "espeak", "vllm", "openai")
VOCODERS = ("pcm", "snac")
THINKERS = ("local", "echo", "openai", "vllm")
RECOGNIZERS = ("whisper", "openai", "pocketsphinx", "none")


log = logging.getLogger("duplex.server")


class BackendError(ValueError):
    """A configuration the user can fix; printed as one clear line."""


@dataclass(frozen=True, slots=True)
class BackendChoice:
    """The backends to build. Fields with help are ``duplex serve`` flags."""

    talker: str = option(
        "hibari",
        "hibari: the neural offline voice (Kokoro's af_heart distilled, shipped weights; Kokoro-82M for the "
        "other voices, eSpeak NG as espeak:<voice>); kokoro: Kokoro-82M alone; espeak: the eSpeak NG voice alone; "
        "vllm: a codec-token model served by vLLM; openai: an OpenAI-style /v1/audio/speech endpoint (--tts-url)",
        choices=TALKERS,
    )
    tts_url: str | None = option(None, "--talker openai: the speech endpoint's base URL (e.g. http://host:8000)")
    tts_model: str = option("tts-1", "--talker openai: the model it serves (key: $DUPLEX_TTS_API_KEY)")
    tts_voice: str | None = option(None, "--talker openai: its voice for sessions on the default voice")
    hibari_capacity: int = option(
        16, "--talker hibari: replies made at once; more speak with eSpeak NG (2 cores make 16 in real time)"
    )
    kokoro_voices: bool = option(
        True, "--talker hibari: load Kokoro-82M for the voices beyond alloy (marin, cedar, ...; +250 MB)"
    )
    kokoro_threads: int = option(2, "Kokoro-82M: threads one synthesis uses")
    kokoro_capacity: int = option(
        1, "Kokoro-82M: replies made at once; more speak with hibari (or eSpeak NG with --talker kokoro)"
    )
    model: str | None = option(None, "--talker vllm: a local checkpoint directory (run in this process)")
    remote_url: str | None = option(None, "--talker vllm: a vLLM OpenAI-compatible server instead of --model")
    remote_model: str | None = option(None, "the model name that server serves")
    codec_layout: str = option("orpheus", "prompt and token layout: 'orpheus' or a JSON file")
    vocoder: str | None = option(None, "default: pcm for espeak, snac for vllm", choices=VOCODERS)
    vocoder_weights: str | None = option(None, "--vocoder snac: a local SNAC checkpoint directory")
    dtype: str = option("float32", "vLLM weights dtype (float32 is safe on any CPU)")
    max_model_len: int = 4096
    thinker: str = option(
        "local",
        "what to say: local (a chat model in this process on llama.cpp, weights shipped), echo (say back what was "
        "heard), openai (an OpenAI-compatible chat endpoint) or vllm (a vLLM chat model in process)",
        choices=THINKERS,
    )
    thinker_url: str | None = option(None, "--thinker openai: the endpoint's base URL (e.g. http://host:8000)")
    thinker_model: str | None = option(
        None,
        f"--thinker local: a shipped model ({', '.join(CHAT_MODELS)}; default {DEFAULT_CHAT_MODEL}) or a .gguf "
        "file; --thinker openai: the model name; --thinker vllm: a local path",
    )
    thinker_slots: int = option(4, "--thinker local: conversations the model decodes at once (more wait their turn)")
    thinker_threads: int = option(2, "--thinker local: threads the model uses")
    thinker_context: int = option(4096, "--thinker local: context tokens each conversation keeps")
    system_prompt: str = option(
        "",
        "the thinker's system prompt (--thinker local: replaces the spoken-answer prompt; session instructions "
        "come after it; other thinkers: session instructions win)",
    )
    temperature: float = option(
        0.2, "the thinker's sampling temperature (low: a small model answers facts more reliably)"
    )
    max_tokens: int = option(256, "the thinker's reply length limit")
    thinker_sampling: str = option("", "more sampling parameters for the thinker, as JSON")
    tool_parser: str = option(
        "hermes",
        "--thinker vllm: the vLLM tool parser that reads the model's own function calls (tool_choice auto)",
    )
    asr: str = option(
        "whisper",
        "speech recogniser: whisper (offline, shipped weights), openai (an OpenAI-compatible "
        "/v1/audio/transcriptions server), pocketsphinx (offline, weaker) or none",
        choices=RECOGNIZERS,
    )
    asr_model: str | None = option(
        None,
        "--asr whisper: auto (default: base for turns while the CPU has room, tiny.en otherwise), tiny.en or base; "
        "--asr openai: the model name the server serves",
    )
    asr_url: str | None = option(None, "--asr openai: the server's base URL (e.g. http://host:8000)")
    turn_model: str = option(
        "smart-turn",
        "end-of-turn model for semantic_vad: smart-turn (Smart Turn v3.2 by Daily, weights shipped in Duplex) or none "
        "(the transcript and the silence decide)",
        choices=("smart-turn", "none"),
    )
    asr_workers: int = option(2, "speech recognition workers (whisper: decoding threads; openai: requests at once)")
    asr_enhancer: str = option(
        "hush",
        "--asr whisper: what cleans noisy speech before it is decoded: hush (a learned enhancer for voices over "
        "babble, weights shipped in Duplex; only on audio with a bed of sound under it) or none",
        choices=("hush", "none"),
    )


def _cleaning() -> Cleaning | None:
    """WebRTC's echo canceller and noise suppressor, loaded; None (with one line) where
    its library cannot load: the server then hears the microphone as it comes."""
    from duplex.pipeline.webrtc_apm import WebRtcCleaning

    cleaning = WebRtcCleaning()
    try:
        cleaning.warm()
    except Exception as exc:  # a platform the binary wheel does not cover
        log.warning("no echo cancellation or noise reduction: WebRTC's audio processing did not load (%s)", exc)
        return None
    return cleaning


async def build(choice: BackendChoice) -> Backends:
    """Every backend, validated and started; raises BackendError with the reason.

    The talker and vocoder are ready once built; the thinker, the recogniser and the
    end-of-turn model are started here (see :mod:`duplex.pipeline.backends`)."""
    recognizer = _recognizer(choice)  # checked first: it starts nothing yet
    talker, vocoder = await _voice(choice)
    try:
        thinker = await _thinker(choice, talker)
    except BaseException:
        await Backends(talker, vocoder).aclose()  # started already: stop them rather than leak them
        raise
    from duplex.pipeline.detectors.silero_vad import SileroVad

    turn_model = None
    if choice.turn_model == "smart-turn":
        from duplex.pipeline.detectors.smart_turn import SmartTurn

        turn_model = SmartTurn()
    backends = Backends(talker, vocoder, thinker, SileroVad(), recognizer, turn_model, _cleaning())
    if recognizer is not None or turn_model is not None:
        try:
            # Every model up front: the server's memory is what it will be under load.
            if turn_model is not None:
                await turn_model.start()
            if recognizer is not None:
                await recognizer.start()
        except BaseException as exc:
            await backends.aclose()
            if isinstance(exc, WeightsError):  # missing or changed weights: one line
                raise BackendError(str(exc)) from None
            if isinstance(exc, ValueError):  # a wrong model, a server not there: one line
                raise BackendError(f"--asr {choice.asr}: {exc}") from None
            raise
    return backends


def _recognizer(choice: BackendChoice) -> Recognizer | None:
    if choice.asr == "none":
        return None
    if choice.asr not in RECOGNIZERS:
        raise BackendError(f"unknown recogniser {choice.asr!r} ({', '.join(RECOGNIZERS)})")
    if choice.asr_workers < 1:
        raise BackendError("--asr-workers must be at least 1")
    if choice.asr != "openai" and choice.asr_url:
        raise BackendError("--asr-url is for --asr openai")
    if choice.asr == "whisper":
        from duplex.pipeline.enhancer import Hush
        from duplex.pipeline.recognizers.tiered import TieredWhisper
        from duplex.pipeline.recognizers.whisper import MODELS, WhisperRecognizer

        model = choice.asr_model or "auto"
        enhancer = Hush() if choice.asr_enhancer == "hush" else None
        if model == "auto":
            return TieredWhisper(workers=choice.asr_workers, enhancer=enhancer)
        if model not in MODELS:
            raise BackendError(f"--asr-model {model!r}: Whisper models shipped are auto, {', '.join(MODELS)}")
        return WhisperRecognizer(model, workers=choice.asr_workers, enhancer=enhancer)
    if choice.asr == "openai":
        from duplex.pipeline.recognizers.openai_remote import OpenAIRecognizer

        if not choice.asr_url or not choice.asr_model:
            raise BackendError("--asr openai needs --asr-url URL and --asr-model NAME")
        return OpenAIRecognizer(choice.asr_url, choice.asr_model, concurrency=choice.asr_workers)
    if choice.asr_model:
        raise BackendError("--asr pocketsphinx has one model: drop --asr-model")
    if importlib.util.find_spec("pocketsphinx") is None:
        raise BackendError("--asr pocketsphinx is not installed: pip install 'duplex[pocketsphinx]'")
    from duplex.pipeline.recognizers.pocketsphinx import PocketsphinxRecognizer

    return PocketsphinxRecognizer(workers=choice.asr_workers)


async def _thinker(choice: BackendChoice, talker: Talker) -> Thinker:
    from duplex.pipeline.thinker import EchoThinker

    try:
        sampling = json.loads(choice.thinker_sampling) if choice.thinker_sampling else {}
    except ValueError as exc:
        raise BackendError(f"--thinker-sampling is not JSON: {exc}") from None
    if not isinstance(sampling, dict):
        raise BackendError("--thinker-sampling must be a JSON object")
    if choice.thinker == "echo":
        return EchoThinker()
    if choice.thinker == "local":
        return await _local_thinker(choice, sampling)
    settings: dict[str, Any] = {
        "system_prompt": choice.system_prompt,
        "temperature": choice.temperature,
        "max_tokens": choice.max_tokens,
    }
    if choice.thinker == "openai":
        from duplex.pipeline.thinkers.openai_chat import OpenAIChatThinker

        if not choice.thinker_url or not choice.thinker_model:
            raise BackendError("--thinker openai needs --thinker-url URL and --thinker-model NAME")
        thinker = OpenAIChatThinker(choice.thinker_url, choice.thinker_model, extra_body=sampling, **settings)
        try:
            await thinker.start()
        except ValueError as exc:
            raise BackendError(str(exc)) from None
        return thinker
    if choice.thinker != "vllm":
        raise BackendError(f"unknown thinker {choice.thinker!r} ({', '.join(THINKERS)})")
    if not choice.thinker_model:
        raise BackendError("--thinker vllm needs --thinker-model PATH (a local chat model directory)")
    try:
        from vllm.tool_parsers import ToolParserManager

        from duplex.pipeline.talkers.vllm import LocalEngine, check_model_dir
        from duplex.pipeline.thinkers.vllm_chat import VllmChatThinker
    except ImportError as exc:
        raise BackendError(f"the vLLM backend is not installed ({exc.name}): pip install -e '.[vllm]'") from None

    try:
        ToolParserManager.get_tool_parser(choice.tool_parser)
    except KeyError:
        raise BackendError(f"--tool-parser {choice.tool_parser!r} is not one of vLLM's tool parsers") from None
    path = Path(choice.thinker_model)
    try:
        check_model_dir(path)
    except ValueError as exc:
        raise BackendError(f"--thinker-model: {exc}") from None
    tokenizer_config = path / "tokenizer_config.json"
    has_template = (path / "chat_template.jinja").is_file() or (
        tokenizer_config.is_file() and "chat_template" in tokenizer_config.read_text()
    )
    if not has_template:
        raise BackendError(f"--thinker-model {path}: the model has no chat template")
    engine = getattr(talker, "engine", None)
    if isinstance(engine, LocalEngine) and engine.model.resolve() == path.resolve():
        # One checkpoint for both: the thinker shares the talker's engine.
        return VllmChatThinker(engine, owns_engine=False, sampling=sampling, tool_parser=choice.tool_parser, **settings)
    engine = LocalEngine(path, dtype=choice.dtype, max_model_len=choice.max_model_len)
    await engine.start()
    return VllmChatThinker(engine, sampling=sampling, tool_parser=choice.tool_parser, **settings)


async def _local_thinker(choice: BackendChoice, sampling: dict[str, Any]) -> Thinker:
    from duplex.pipeline.thinkers.local import SPEECH_PROMPT, LocalChatThinker

    if choice.thinker_url:
        raise BackendError("--thinker-url is for --thinker openai")
    if min(choice.thinker_slots, choice.thinker_threads) < 1 or choice.thinker_context < 256:
        raise BackendError("--thinker-slots and --thinker-threads must be at least 1, --thinker-context 256")
    try:
        thinker = LocalChatThinker(
            choice.thinker_model or DEFAULT_CHAT_MODEL,
            slots=choice.thinker_slots,
            threads=choice.thinker_threads,
            context=choice.thinker_context,
            system_prompt=choice.system_prompt or SPEECH_PROMPT,
            temperature=choice.temperature,
            max_tokens=choice.max_tokens,
            extra_body=sampling,
        )
        await thinker.start()
    except ImportError as exc:
        raise BackendError(f"--thinker local needs {exc.name}: reinstall duplex, or use --thinker echo") from None
    except WeightsError as exc:
        raise BackendError(f"--thinker local: {exc}") from None
    return thinker


async def _voice(choice: BackendChoice) -> tuple[Talker, Vocoder]:
    if choice.talker in ("hibari", "kokoro", "espeak"):
        if choice.vocoder not in (None, "pcm"):
            raise BackendError("the built-in voices make PCM: use --vocoder pcm (the default)")
        from duplex.pipeline.talkers.espeak import EspeakTalker
        from duplex.pipeline.vocoders.pcm import PcmVocoder

        if choice.talker == "espeak":
            return EspeakTalker(), PcmVocoder()
        if min(choice.kokoro_threads, choice.kokoro_capacity, choice.hibari_capacity) < 1:
            raise BackendError("--kokoro-threads, --kokoro-capacity and --hibari-capacity must be at least 1")
        kokoro = await _kokoro(choice) if choice.talker == "kokoro" or choice.kokoro_voices else None
        if choice.talker == "kokoro":
            return kokoro or EspeakTalker(), PcmVocoder()
        from duplex.pipeline.talkers.hibari import HibariRuntime, HibariTalker

        try:
            runtime = await asyncio.to_thread(HibariRuntime, capacity=choice.hibari_capacity)
            await asyncio.to_thread(runtime.warm)
        except WeightsError as exc:
            log.warning("hibari cannot start (%s): speaking with %s", exc, "Kokoro-82M" if kokoro else "eSpeak NG")
            return kokoro or EspeakTalker(), PcmVocoder()
        # One eSpeak NG for both (Kokoro's, closed with it).
        return HibariTalker(runtime, kokoro.fallback if kokoro else None, kokoro=kokoro), PcmVocoder()
    if choice.talker == "openai":
        return await _remote_voice(choice)
    if choice.talker != "vllm":
        raise BackendError(f"unknown talker {choice.talker!r} ({', '.join(TALKERS)})")
    if (choice.vocoder or "snac") != "snac":
        raise BackendError("a codec talker needs a codec vocoder: use --vocoder snac")
    if not choice.vocoder_weights:
        raise BackendError("--vocoder snac needs --vocoder-weights PATH (a local SNAC checkpoint directory)")
    if not Path(choice.vocoder_weights).is_dir():
        raise BackendError(f"--vocoder-weights {choice.vocoder_weights}: no such directory")
    if bool(choice.model) == bool(choice.remote_url):
        raise BackendError("--talker vllm needs either --model PATH (in process) or --remote-url URL")
    try:
        from duplex.pipeline.talkers.codec import CodecLayout
        from duplex.pipeline.talkers.vllm import CodecTalker, LocalEngine, RemoteEngine, check_model_dir
        from duplex.pipeline.vocoders.snac import SnacVocoder
    except ImportError as exc:
        raise BackendError(f"the vLLM backend is not installed ({exc.name}): pip install -e '.[vllm]'") from None
    try:
        layout = CodecLayout.load(choice.codec_layout)
        if choice.model:
            check_model_dir(choice.model, layout)
        vocoder = SnacVocoder(choice.vocoder_weights)
    except ValueError as exc:
        raise BackendError(str(exc)) from None
    if choice.model:
        engine: Any = LocalEngine(choice.model, dtype=choice.dtype, max_model_len=choice.max_model_len)
    else:
        if not choice.remote_model:
            raise BackendError("--remote-url needs --remote-model NAME (the model the server serves)")
        engine = RemoteEngine(choice.remote_url or "", choice.remote_model)
    try:
        await engine.start()
    except ValueError as exc:
        raise BackendError(str(exc)) from None
    return CodecTalker(engine, layout), vocoder


async def _remote_voice(choice: BackendChoice) -> tuple[Talker, Vocoder]:
    """A speech endpoint, checked now: one line and exit 2 if it cannot speak."""
    from duplex.pipeline.talkers.openai_speech import OpenAISpeechTalker
    from duplex.pipeline.vocoders.pcm import PcmVocoder

    if not choice.tts_url:
        raise BackendError("--talker openai needs --tts-url URL (an OpenAI-style /v1/audio/speech server)")
    key = os.environ.get("DUPLEX_TTS_API_KEY") or "local"
    talker = OpenAISpeechTalker(choice.tts_url, choice.tts_model, voice=choice.tts_voice, api_key=key)
    try:
        await talker.start()
    except ValueError as exc:
        await talker.aclose()
        raise BackendError(str(exc)) from None
    return talker, PcmVocoder()


async def _kokoro(choice: BackendChoice) -> KokoroTalker | None:
    """Kokoro-82M (with its own eSpeak NG for beyond its capacity), or None, with a warning,
    if its weights are missing or changed."""
    from duplex.pipeline.talkers.kokoro import KokoroRuntime, KokoroTalker

    try:
        runtime = await asyncio.to_thread(KokoroRuntime, threads=choice.kokoro_threads, capacity=choice.kokoro_capacity)
        await asyncio.to_thread(runtime.warm)
    except WeightsError as exc:
        instead = "speaking with eSpeak NG" if choice.talker == "kokoro" else "its voices speak with hibari"
        log.warning("the Kokoro voice cannot start (%s): %s", exc, instead)
        return None
    return KokoroTalker(runtime)
