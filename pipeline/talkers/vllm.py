"""The real-model talker: codec tokens from vLLM, in process or from a remote server.

:class:`LocalEngine` runs ``vllm.v1.engine.async_llm.AsyncLLM`` in this process,
started once per server and shared by every session. :class:`RemoteEngine` asks a
``vllm serve`` elsewhere for streaming completions with token ids (for a model on
other machines or GPUs). :class:`CodecTalker` turns reply text into the model's
prompt, streams tokens from either, and hands complete codec frames to the
vocoder as they complete. Cancelling aborts the request: ``AsyncLLM.abort`` in
process, closing the HTTP stream remotely (vLLM aborts a request whose client
has gone).
"""

from __future__ import annotations

import json
import os
import re
import uuid
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any, Protocol

import numpy as np

from duplex.pipeline.frames import CODES, AudioBuffer
from duplex.pipeline.openai_http import check_model, reason
from duplex.pipeline.state import StateMismatch, artifact_id
from duplex.pipeline.talker import SpeechRequest, TalkerChunk, TalkerError, WordMark, is_openai_voice
from duplex.pipeline.talkers.codec import CodecLayout, FrameAssembler

SUPPORTED_ARCHITECTURES = {"LlamaForCausalLM", "MistralForCausalLM", "Qwen2ForCausalLM", "Qwen3ForCausalLM"}


class CodecEngine(Protocol):
    """Where codec tokens come from."""

    artifact_id: str

    async def encode(self, text: str) -> list[int]: ...

    def stream(self, prompt_ids: list[int], params: dict[str, Any], request_id: str) -> AsyncIterator[list[int]]: ...

    async def running(self) -> int: ...

    async def close(self) -> None: ...


def check_model_dir(path: str | Path, layout: CodecLayout | None = None) -> dict[str, Any]:
    """Validate a local checkpoint before starting an engine on it: clear errors, not tracebacks."""
    p = Path(path)
    if not p.is_dir():
        raise ValueError(f"model path {p} does not exist or is not a directory")
    cfg_file = p / "config.json"
    if not cfg_file.is_file():
        raise ValueError(f"{p} has no config.json: not a Hugging Face checkpoint")
    cfg: dict[str, Any] = json.loads(cfg_file.read_text())
    archs = set(cfg.get("architectures") or [])
    if not archs & SUPPORTED_ARCHITECTURES:
        raise ValueError(
            f"{p}: architecture {sorted(archs) or 'unknown'} is not a supported causal LM "
            f"({', '.join(sorted(SUPPORTED_ARCHITECTURES))})"
        )
    if not any(p.glob("*.safetensors")) and not any(p.glob("*.bin")):
        raise ValueError(f"{p} has no weights (*.safetensors or *.bin)")
    if layout is not None:
        vocab = int(cfg.get("vocab_size", 0))
        if vocab <= layout.highest_id:
            raise ValueError(
                f"{p}: vocabulary of {vocab} tokens cannot hold the {layout.name} codec tokens "
                f"(highest id {layout.highest_id})"
            )
    return cfg


def model_artifact_id(path: str | Path) -> str:
    """The checkpoint's identity: path plus a hash of its config and weights index."""
    p = Path(path)
    names = ["config.json", "model.safetensors.index.json", "pytorch_model.bin.index.json"]
    if not any((p / n).is_file() for n in names[1:]):
        # A single-file checkpoint has no index: its weight files' names and sizes stand in.
        index = {f.name: f.stat().st_size for f in sorted(p.glob("*.safetensors")) + sorted(p.glob("*.bin"))}
        (p / ".duplex-weights-index.json").write_text(json.dumps(index, sort_keys=True))
        names.append(".duplex-weights-index.json")
    return artifact_id(p, files=tuple(names))


class LocalEngine:
    """An in-process vLLM engine, shared by every session of the server."""

    def __init__(
        self,
        model: str | Path,
        *,
        dtype: str = "float32",
        max_model_len: int = 4096,
        max_num_seqs: int = 16,
        engine_args: dict[str, Any] | None = None,
    ) -> None:
        self.model = Path(model)
        self.dtype = dtype
        self.max_model_len = max_model_len
        self.max_num_seqs = max_num_seqs
        self.extra = engine_args or {}
        self.artifact_id = model_artifact_id(self.model)
        self.llm: Any = None
        self._tokenizer: Any = None

    async def start(self) -> None:
        """Start the engine (tens of seconds on CPU). Nothing is downloaded."""
        os.environ.setdefault("HF_HUB_OFFLINE", "1")
        os.environ.setdefault("VLLM_CPU_KVCACHE_SPACE", "1")
        from transformers import AutoTokenizer
        from vllm.engine.arg_utils import AsyncEngineArgs
        from vllm.v1.engine.async_llm import AsyncLLM

        self._tokenizer = AutoTokenizer.from_pretrained(self.model)
        args = AsyncEngineArgs(
            model=str(self.model),
            dtype=self.dtype,
            max_model_len=self.max_model_len,
            max_num_seqs=self.max_num_seqs,
            enforce_eager=True,
            **self.extra,
        )
        self.llm = AsyncLLM.from_engine_args(args)

    @property
    def tokenizer(self) -> Any:
        return self._tokenizer

    async def encode(self, text: str) -> list[int]:
        return list(self._tokenizer.encode(text, add_special_tokens=False))

    async def stream_text(self, prompt_ids: list[int], params: dict[str, Any], request_id: str) -> AsyncIterator[str]:
        """Like :meth:`stream`, for a chat model: the engine's text deltas."""
        from vllm import SamplingParams
        from vllm.sampling_params import RequestOutputKind

        sampling = SamplingParams(output_kind=RequestOutputKind.DELTA, **params)
        finished = False
        try:
            async for out in self.llm.generate({"prompt_token_ids": prompt_ids}, sampling, request_id=request_id):
                yield out.outputs[0].text
                finished = out.finished
        finally:
            if not finished:
                await self.llm.abort(request_id)

    async def stream(self, prompt_ids: list[int], params: dict[str, Any], request_id: str) -> AsyncIterator[list[int]]:
        from vllm import SamplingParams
        from vllm.sampling_params import RequestOutputKind

        sampling = SamplingParams(output_kind=RequestOutputKind.DELTA, **params)
        finished = False
        try:
            async for out in self.llm.generate({"prompt_token_ids": prompt_ids}, sampling, request_id=request_id):
                yield list(out.outputs[0].token_ids)
                finished = out.finished
        finally:
            if not finished:
                await self.llm.abort(request_id)

    async def running(self) -> int:
        return self.llm.get_num_unfinished_requests() if self.llm is not None else 0

    async def close(self) -> None:
        if self.llm is not None:
            self.llm.shutdown()
            self.llm = None


class RemoteEngine:
    """A ``vllm serve`` OpenAI-compatible server: streaming completions with token ids."""

    def __init__(self, url: str, model: str) -> None:
        import httpx

        self.url = url.rstrip("/")
        self.model = model
        self.artifact_id = f"remote:{self.url}/{model}"
        self._client = httpx.AsyncClient(base_url=self.url, timeout=httpx.Timeout(60.0, connect=5.0))

    async def start(self) -> None:
        """Check the server answers and serves the model (see :mod:`~duplex.pipeline.openai_http`)."""
        await check_model(self._client, self.model, f"the vLLM server at {self.url}")

    async def encode(self, text: str) -> list[int]:
        r = await self._client.post(
            "/tokenize", json={"model": self.model, "prompt": text, "add_special_tokens": False}
        )
        r.raise_for_status()
        return list(r.json()["tokens"])

    async def stream(self, prompt_ids: list[int], params: dict[str, Any], request_id: str) -> AsyncIterator[list[int]]:
        body = {
            "model": self.model,
            "prompt": prompt_ids,
            "stream": True,
            "return_token_ids": True,
            "skip_special_tokens": False,
            **params,
        }
        async with self._client.stream(
            "POST", "/v1/completions", json=body, headers={"X-Request-Id": request_id}
        ) as response:
            if response.status_code != 200:
                await response.aread()
                raise TalkerError(f"vLLM server answered {response.status_code}: {reason(response)}")
            async for line in response.aiter_lines():
                if not line.startswith("data: ") or line == "data: [DONE]":
                    continue
                choice = json.loads(line[6:])["choices"][0]
                if choice.get("token_ids"):
                    yield list(choice["token_ids"])
        # Leaving the block closes the stream; a client that goes away is aborted by vLLM.

    async def running(self) -> int:
        r = await self._client.get("/metrics")
        m = re.search(r"^vllm:num_requests_running\{[^}]*\}\s+([0-9.e+]+)", r.text, re.M)
        return int(float(m.group(1))) if m else 0

    async def close(self) -> None:
        await self._client.aclose()


class CodecTalker:
    """Speaks with a codec-token model: text -> prompt -> tokens -> codec frames."""

    name = "vllm"

    def __init__(
        self, engine: CodecEngine, layout: CodecLayout, *, temperature: float = 0.6, top_p: float = 0.95
    ) -> None:
        self.engine = engine
        self.layout = layout
        self.temperature = temperature
        self.top_p = top_p
        self.frames = 0
        self.artifact_id = engine.artifact_id
        self._allowed = [*layout.audio_ids, *layout.stop_ids]

    def voices(self) -> list[str]:
        return list(self.layout.voices) or [self.layout.default_voice]

    def release(self, request_id: str) -> None:
        """Nothing is kept across a reply's segments."""

    def resolve_voice(self, voice: str | None) -> str:
        """OpenAI's voice names (and none) speak with the layout's default voice."""
        if not voice or is_openai_voice(voice):
            return self.layout.default_voice
        return voice

    def check_voice(self, voice: str) -> None:
        v = self.resolve_voice(voice)
        if self.layout.voices and v not in self.layout.voices:
            raise ValueError(f"unknown voice {voice!r} (this model speaks {', '.join(self.layout.voices)})")

    async def speak(self, request: SpeechRequest) -> AsyncIterator[TalkerChunk]:
        if request.state is not None and request.state.artifact_id != self.artifact_id:
            raise StateMismatch(f"state of {request.state.artifact_id} cannot continue on {self.artifact_id}")
        lay = self.layout
        body = lay.prompt_text(request.text, self.resolve_voice(request.voice))
        ids = [*lay.prefix_ids, *(await self.engine.encode(body)), *lay.suffix_ids]
        max_tokens = lay.max_tokens(request.text)
        params = {
            "max_tokens": max_tokens,
            "temperature": self.temperature,
            "top_p": self.top_p,
            "allowed_token_ids": self._allowed,
            "stop_token_ids": list(lay.stop_ids),
        }
        # Codec talkers do not say where words fall: place them in proportion to
        # the text over the frame budget (an estimate, and said so).
        budget = max(1, max_tokens // lay.tokens_per_frame)
        words = [(m.start(), m.end()) for m in re.finditer(r"\S+", request.text)]
        placed = [WordMark(s, e, int(s / max(1, len(request.text)) * budget)) for s, e in words]
        announced = 0
        assembler = FrameAssembler(lay)
        stops = set(lay.stop_ids)
        request_id = f"{request.request_id}-{uuid.uuid4().hex[:8]}"
        async for tokens in self.engine.stream(ids, params, request_id):
            for token in tokens:
                if token in stops:
                    continue
                frame = assembler.push(token)
                if frame is None:
                    continue
                index = assembler.frames - 1
                self.frames += 1
                marks = []
                while announced < len(placed) and placed[announced].position <= index:
                    marks.append(placed[announced])
                    announced += 1
                yield TalkerChunk(AudioBuffer(frame.reshape(-1, 1), CODES, lay.frame_rate, self.name), tuple(marks))
        if announced < len(placed):  # the model stopped early: the rest of the words ride on the end
            yield TalkerChunk(
                AudioBuffer(np.zeros((lay.tokens_per_frame, 0), np.int64), CODES, lay.frame_rate, self.name),
                tuple(WordMark(w.start, w.end, assembler.frames) for w in placed[announced:]),
            )

    async def aclose(self) -> None:
        await self.engine.close()
