"""Which talker and vocoder the server runs, checked before anything starts."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any


class BackendError(ValueError):
    """A configuration the user can fix; printed as one clear line."""


@dataclass(frozen=True, slots=True)
class BackendChoice:
    talker: str = "espeak"  # espeak | vllm
    model: str | None = None
    remote_url: str | None = None
    remote_model: str | None = None
    codec_layout: str = "orpheus"
    vocoder: str | None = None  # pcm | snac; default follows the talker
    vocoder_weights: str | None = None
    dtype: str = "float32"
    max_model_len: int = 4096


async def build(choice: BackendChoice) -> tuple[Any, Any]:
    """(talker, vocoder), validated and started; raises BackendError with the reason."""
    if choice.talker == "espeak":
        if choice.vocoder not in (None, "pcm"):
            raise BackendError("the built-in voice makes PCM: use --vocoder pcm (the default)")
        from pipeline.talkers.espeak import EspeakTalker
        from pipeline.vocoders.pcm import PcmVocoder

        return EspeakTalker(), PcmVocoder()
    if choice.talker != "vllm":
        raise BackendError(f"unknown talker {choice.talker!r} (espeak or vllm)")
    if (choice.vocoder or "snac") != "snac":
        raise BackendError("a codec talker needs a codec vocoder: use --vocoder snac")
    if not choice.vocoder_weights:
        raise BackendError("--vocoder snac needs --vocoder-weights PATH (a local SNAC checkpoint directory)")
    if not Path(choice.vocoder_weights).is_dir():
        raise BackendError(f"--vocoder-weights {choice.vocoder_weights}: no such directory")
    if bool(choice.model) == bool(choice.remote_url):
        raise BackendError("--talker vllm needs either --model PATH (in process) or --remote-url URL")
    try:
        from pipeline.talkers.codec import CodecLayout
        from pipeline.talkers.vllm import CodecTalker, LocalEngine, RemoteEngine, check_model_dir
        from pipeline.vocoders.snac import SnacVocoder
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
        engine = RemoteEngine(choice.remote_url, choice.remote_model)
    try:
        await engine.start()
    except ValueError as exc:
        raise BackendError(str(exc)) from None
    return CodecTalker(engine, layout), vocoder
