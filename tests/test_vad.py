"""Voice activity on its own: the energy gate saves model calls in silence and
leaves turn boundaries where they were."""

from __future__ import annotations

from duplex.app.clients.sounds import mix, noise, silence, speech
from duplex.app.core.listening.listener import Listener
from duplex.app.core.listening.signals import Started, Stopped
from duplex.app.core.settings import TurnDetection

RATE = 24000


def boundaries(model, audio, **kwargs) -> tuple[list[tuple[str, int, int | None]], int]:
    ears = Listener(model, RATE, TurnDetection(threshold=0.5, silence_duration_ms=500), **kwargs)
    events: list[tuple[str, int, int | None]] = []
    for i in range(0, audio.size, 480):  # 20 ms frames, as clients send them
        for s in ears.push(audio[i : i + 480], replying=False):
            if isinstance(s, Started):
                events.append(("start", s.onset, None))
            elif isinstance(s, Stopped):
                events.append(("stop", s.audio_end, s.speech_end))
    return events, ears.vad.skipped


async def test_energy_gate_skips_silence_but_keeps_every_boundary(vad_model, talker):
    turns = [
        await speech(talker, text)
        for text in ("hello how are you today", "turn on the lights in the kitchen", "tell me a joke")
    ]
    audio = mix(
        silence(1.0),
        turns[0],
        silence(2.0),
        turns[1],
        silence(0.3),
        noise(0.5, level=3.0),
        silence(2.0),
        turns[2],
        silence(2.0),
    )
    gated, skipped = boundaries(vad_model, audio)
    ungated, none = boundaries(vad_model, audio, floor_dbfs=float("-inf"))
    assert none == 0 and skipped > 100, skipped  # most of the ~7 s of silence never reached the model
    assert [k for k, *_ in gated] == ["start", "stop"] * 3, gated
    # During speech every window reaches the model, so each turn ends exactly where it
    # would without the gate (fed one window in four, it had held speech open up to
    # ~130 ms longer). A model that heard one silent window in four may mark an onset
    # one window (32 ms) off, never more.
    assert [e for e in gated if e[0] == "stop"] == [e for e in ungated if e[0] == "stop"]
    for (_, a, _), (_, b, _) in zip(gated[::2], ungated[::2], strict=False):
        assert abs(a - b) <= 512 * RATE // 16000, (a, b)
