"""The echo gate of ``duplex mic`` on a simulated full-duplex stream.

A reply plays through the speaker; the microphone hears it back, delayed and
attenuated, and later the user talks over it. The gate must learn the echo path
from the reply's first half second, keep the echo home, and let the user through.
The JACK room in ``test_mic.py`` runs the same gate on real PortAudio.
"""

from __future__ import annotations

import numpy as np
import pytest

from duplex.app.clients.echo import EchoGate, Envelope
from duplex.app.clients.sounds import mix, silence, speech, trim

RATE = 16000
BLOCK = 512  # samples per audio callback
FRAME = RATE // 50  # the demo's 20 ms microphone frames


def test_envelope_is_the_rms_of_each_hop_and_forgets_the_distant_past():
    env = Envelope(RATE, hop_s=0.01, keep_s=1.0)  # 160-sample hops, 100 kept
    x = np.zeros(RATE * 2, np.float32)
    x[1600:1760] = 0.5  # exactly hop 10
    x[2000:2040] = 1.0  # a quarter of hop 12
    for i in range(0, x.size // 2, BLOCK):  # blocks that do not line up with hops
        env.add(i, x[i : i + BLOCK])
    assert env.level(1600, 1760) == pytest.approx(0.5)
    assert env.level(1700, 1800) == pytest.approx(0.5)  # any overlap counts
    assert env.level(1920, 2080) == pytest.approx(0.5)  # sqrt(40 / 160)
    assert env.level(0, 1600) == 0.0
    assert env.level(50_000, 60_000) == 0.0  # not written yet
    for i in range(x.size // 2, x.size, BLOCK):
        env.add(i, x[i : i + BLOCK])
    assert env.level(1600, 1760) == 0.0  # more than a second ago: gone, not aliased


async def _room(talker, delay: int, coupling: float, user_gain: float):
    reply = trim(await speech(talker, "once upon a time a dog and a cat lived in a small house by the sea", RATE), RATE)
    user = trim(await speech(talker, "wait, please stop talking now", RATE, voice="en-us+m3"), RATE)
    lead = RATE // 2
    user_at = lead + RATE * 2
    spk = mix(silence(lead / RATE, RATE), reply).astype(np.float32) / 32768
    spk = np.pad(spk, (0, max(0, user_at + user.size + RATE - spk.size)))
    said = np.zeros(spk.size + delay, np.float32)
    said[user_at : user_at + user.size] = user_gain * user.astype(np.float32) / 32768
    rng = np.random.default_rng(3)
    mic = said + rng.normal(0, 0.0005, said.size).astype(np.float32)
    mic[delay : delay + spk.size] += coupling * spk
    return spk, mic, lead, (user_at, user_at + user.size)


def _run(gate: EchoGate, spk: np.ndarray, mic: np.ndarray, lead: int) -> np.ndarray:
    """Stream both sides a callback block at a time, as the demo does: the block's
    output is recorded, then the microphone frames that block completed are gated."""
    env = Envelope(RATE)
    admitted: list[bool] = []
    n = min(spk.size, mic.size) // BLOCK * BLOCK
    s = 0
    for i in range(0, n, BLOCK):
        env.add(i, spk[i : i + BLOCK])
        while s + FRAME <= i + BLOCK:
            rms = float(np.sqrt(np.mean(mic[s : s + FRAME] ** 2)))
            admitted.append(gate.admit(rms, s, s + FRAME, env, (s - lead) / RATE if s >= lead else None))
            s += FRAME
    return np.array(admitted)


def _frames_where(x: np.ndarray, over: float) -> np.ndarray:
    n = x.size // FRAME
    return np.sqrt((x[: n * FRAME].reshape(n, FRAME) ** 2).mean(axis=1)) > over


def _echo(spk: np.ndarray, delay: int, coupling: float) -> np.ndarray:
    return coupling * np.concatenate([np.zeros(delay, np.float32), spk])


async def test_the_gate_learns_the_echo_path_keeps_the_echo_home_and_lets_the_user_through(talker):
    delay, coupling = 1400, 0.3  # 87.5 ms and -10.5 dB: a laptop's speaker and microphone
    spk, mic, lead, (u0, u1) = await _room(talker, delay, coupling, user_gain=1.0)
    gate = EchoGate(RATE)
    admitted = _run(gate, spk, mic, lead)
    assert gate.fits == 1
    assert abs(gate.delay_s - delay / RATE) <= 0.015, gate.delay_s
    assert abs(20 * np.log10(gate.coupling / coupling)) <= 3.0, gate.coupling
    frame = np.arange(admitted.size) * FRAME
    echo_only = (frame >= lead + gate.calibrate_s * RATE) & ((frame + FRAME <= u0) | (frame >= u1))
    echo_heard = _frames_where(_echo(spk, delay, coupling), 0.005)[: admitted.size]
    assert (echo_only & echo_heard).sum() > 40  # the echo was there to leak
    leaked = admitted & echo_only & echo_heard
    assert not leaked.any(), np.flatnonzero(leaked) * FRAME / RATE
    user = np.zeros(mic.size, np.float32)
    user[u0:u1] = mic[u0:u1] - _echo(spk, delay, coupling)[u0:u1]
    voiced = _frames_where(user, 0.03)[: admitted.size]
    assert voiced.sum() > 20
    assert admitted[voiced].mean() >= 0.6, admitted[voiced].mean()  # enough for the server's VAD to hear a barge-in


async def test_each_reply_measures_the_path_again(talker):
    gate = EchoGate(RATE)
    spk, mic, lead, (u0, _) = await _room(talker, 800, 0.2, user_gain=1.0)
    _run(gate, spk[:u0], mic[:u0], lead)
    assert abs(gate.delay_s - 0.05) <= 0.015
    # The laptop moved: the echo now comes later and louder. The next reply measures it.
    spk, mic, lead, (u0, _) = await _room(talker, 2400, 0.5, user_gain=1.0)
    admitted = _run(gate, spk[:u0], mic[:u0], lead)
    assert gate.fits == 2
    assert abs(gate.delay_s - 0.15) <= 0.015, gate.delay_s
    assert abs(20 * np.log10(gate.coupling / 0.5)) <= 3.0, gate.coupling
    echo_heard = _frames_where(_echo(spk, 2400, 0.5), 0.005)[: admitted.size]
    assert echo_heard.sum() > 40
    assert not admitted[echo_heard].any()  # the louder echo never got through


async def test_silence_from_the_microphone_keeps_the_last_estimate(talker):
    """Headphones: the microphone hears no echo, so there is nothing to fit."""
    gate = EchoGate(RATE, delay_s=0.07, coupling=0.25)
    spk, mic, lead, (u0, _) = await _room(talker, 800, 0.0, user_gain=0.0)
    _run(gate, spk[:u0], mic[:u0], lead)
    assert gate.fits == 0 and gate.delay_s == 0.07 and gate.coupling == 0.25
