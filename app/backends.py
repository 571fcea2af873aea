"""Which talker and vocoder the server runs, checked before anything starts."""

from __future__ import annotations

import json
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
    thinker: str = "echo"  # echo | openai | vllm
    thinker_url: str | None = None
    thinker_model: str | None = None  # openai: the served model name; vllm: a local checkpoint directory
    system_prompt: str = ""
    temperature: float = 0.7
    max_tokens: int = 256
    thinker_sampling: str = ""  # JSON: more sampling parameters (top_k, stop, allowed_token_ids, ...)


async def build(choice: BackendChoice) -> tuple[Any, Any, Any]:
    """(talker, vocoder, thinker), validated and started; raises BackendError with the reason."""
    talker, vocoder = await _voice(choice)
    try:
        return talker, vocoder, await _thinker(choice, talker)
    except BaseException:
        await talker.aclose()  # started already: stop it rather than leak it
        raise


async def _thinker(choice: BackendChoice, talker: Any) -> Any:
    from pipeline.thinker import EchoThinker

    try:
        sampling = json.loads(choice.thinker_sampling) if choice.thinker_sampling else {}
    except ValueError as exc:
        raise BackendError(f"--thinker-sampling is not JSON: {exc}") from None
    if not isinstance(sampling, dict):
        raise BackendError("--thinker-sampling must be a JSON object")
    if choice.thinker == "echo":
        return EchoThinker()
    settings = {"system_prompt": choice.system_prompt, "temperature": choice.temperature,
                "max_tokens": choice.max_tokens}
    if choice.thinker == "openai":
        from pipeline.thinkers.openai_chat import OpenAIChatThinker

        if not choice.thinker_url or not choice.thinker_model:
            raise BackendError("--thinker openai needs --thinker-url URL and --thinker-model NAME")
        thinker = OpenAIChatThinker(choice.thinker_url, choice.thinker_model, extra_body=sampling, **settings)
        try:
            await thinker.start()
        except ValueError as exc:
            raise BackendError(str(exc)) from None
        return thinker
    if choice.thinker != "vllm":
        raise BackendError(f"unknown thinker {choice.thinker!r} (echo, openai or vllm)")
    if not choice.thinker_model:
        raise BackendError("--thinker vllm needs --thinker-model PATH (a local chat model directory)")
    try:
        from pipeline.talkers.vllm import LocalEngine, check_model_dir
        from pipeline.thinkers.vllm_chat import VllmChatThinker
    except ImportError as exc:
        raise BackendError(f"the vLLM backend is not installed ({exc.name}): pip install -e '.[vllm]'") from None
    path = Path(choice.thinker_model)
    try:
        check_model_dir(path)
    except ValueError as exc:
        raise BackendError(f"--thinker-model: {exc}") from None
    tokenizer_config = path / "tokenizer_config.json"
    has_template = (path / "chat_template.jinja").is_file() or (
        tokenizer_config.is_file() and "chat_template" in tokenizer_config.read_text())
    if not has_template:
        raise BackendError(f"--thinker-model {path}: the model has no chat template")
    engine = getattr(talker, "engine", None)
    if isinstance(engine, LocalEngine) and engine.model.resolve() == path.resolve():
        # One checkpoint for both: the thinker shares the talker's engine.
        return VllmChatThinker(engine, owns_engine=False, sampling=sampling, **settings)
    engine = LocalEngine(path, dtype=choice.dtype, max_model_len=choice.max_model_len)
    await engine.start()
    return VllmChatThinker(engine, sampling=sampling, **settings)


async def _voice(choice: BackendChoice) -> tuple[Any, Any]:
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
