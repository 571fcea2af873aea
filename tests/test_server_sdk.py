"""The official openai SDK, unmodified, talks to Duplex (GA and beta)."""

from __future__ import annotations

import base64

import numpy as np
import pytest
from openai import AsyncOpenAI

from duplex.app.edge.server import DuplexServer
from duplex.pipeline.stages import ReplyStages
from duplex.pipeline.stream import ChunkEvent
from duplex.pipeline.talker import SpeechRequest
from duplex.pipeline.vocoders.pcm import PcmVocoder

TEXT = "Hello from the official software development kit."


async def _expected_samples(talker, text: str) -> int:
    n = 0

    async def sink(ev: ChunkEvent) -> None:
        nonlocal n
        n += ev.payload.audio.length

    await ReplyStages(talker, PcmVocoder(), SpeechRequest("x", text), epoch=0, output_rate=24000).run(sink)
    return n


def _voiced_fraction(pcm: np.ndarray, rate: int = 24000) -> float:
    frames = pcm[: pcm.size // (rate // 50) * (rate // 50)].reshape(-1, rate // 50).astype(np.float64)
    rms = np.sqrt((frames**2).mean(axis=1))
    return float((rms > 300).mean())


@pytest.mark.parametrize("beta", [False, True], ids=["ga", "beta"])
async def test_openai_sdk_text_in_audio_out(server: DuplexServer, talker, beta: bool):
    client = AsyncOpenAI(
        api_key="local",
        base_url=f"http://127.0.0.1:{server.port}/v1",
        websocket_base_url=f"ws://127.0.0.1:{server.port}/v1",
    )
    realtime = client.beta.realtime if beta else client.realtime
    delta_type = "response.audio.delta" if beta else "response.output_audio.delta"
    transcript_type = "response.audio_transcript.done" if beta else "response.output_audio_transcript.done"
    async with realtime.connect(model="duplex") as conn:
        first = await conn.recv()
        assert first.type == "session.created"
        session = {"modalities": ["audio"]} if beta else {"type": "realtime", "output_modalities": ["audio"]}
        session["pacing"] = {"enabled": beta}  # GA unpaced, beta paced on the wall clock
        await conn.session.update(session=session)
        await conn.conversation.item.create(
            item={"type": "message", "role": "user", "content": [{"type": "input_text", "text": TEXT}]}
        )
        await conn.response.create()
        pcm: list[np.ndarray] = []
        transcript = None
        async for event in conn:
            if event.type == delta_type:
                pcm.append(np.frombuffer(base64.b64decode(event.delta), "<i2"))
            elif event.type == transcript_type:
                transcript = event.transcript
            elif event.type == "error":
                raise AssertionError(event.error)
            elif event.type == "response.done":
                assert event.response.status == "completed"
                break
    audio = np.concatenate(pcm)
    assert len(pcm) > 10, "audio must stream in many deltas"
    assert abs(audio.size - await _expected_samples(talker, TEXT)) < 200  # eSpeak jitters by a few samples
    assert audio.size / 24000 > 2.0
    assert _voiced_fraction(audio) > 0.5, "the reply must be speech, not silence"
    assert transcript == TEXT
