"""Benchmark listening while speaking: VAD onset, barge-in pause and cancel, false cancels, CPU.

Real parts throughout: eSpeak NG speech from several voices (clean and at 10 dB
SNR), Silero VAD, pocketsphinx, the real server on loopback, and the simulated
client on the input sample clock (so latencies are measured in audio time, the
way a listener experiences them, and the run is faster than real time).

    python scripts/bench_duplex.py [--quick]
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import time

import numpy as np

from duplex.app.clients.simulated import SimulatedClient
from duplex.app.clients.sounds import cough, mix, noise, silence, speech, trim, voiced_bounds
from duplex.app.core.listening import Listener
from duplex.app.core.settings import TurnDetection
from duplex.app.core.signals import Started
from duplex.app.harness.servers import serving
from duplex.app.harness.stats import pct
from duplex.pipeline.backends import Backends
from duplex.pipeline.detectors.silero_vad import SileroVad
from duplex.pipeline.recognizers.pocketsphinx import PocketsphinxRecognizer, decode_utterance, new_decoder
from duplex.pipeline.talkers.espeak import EspeakTalker
from duplex.pipeline.vocoders.pcm import PcmVocoder

RATE = 24000
PHRASES = [
    "wait, please stop talking now",
    "hold on a second",
    "no, that is not what I asked",
    "can you repeat the last part",
    "excuse me, I have a question",
    "stop, stop, that is enough",
    "actually, tell me about the weather",
    "sorry to interrupt you there",
]
VOICES = ["en-us+klatt2", "en-us", "en-us+m3", "en-us+f3"]
REPLY = " ".join(f"This is sentence number {i} of a long reply that keeps going." for i in range(20))


def ms(samples: float) -> float:
    return samples * 1000 / RATE


async def utterances(talker: EspeakTalker, quick: bool) -> list[tuple[np.ndarray, str]]:
    out = []
    for i, phrase in enumerate(PHRASES[: 4 if quick else None]):
        for voice in VOICES[: 2 if quick else None]:
            clean = trim(await speech(talker, phrase, RATE, voice=voice), RATE)
            out.append((clean, "clean"))
            gain = np.sqrt((clean.astype(np.float64) ** 2).mean() / 10)  # 10 dB SNR
            noisy = np.clip(clean + noise(clean.size / RATE, RATE, gain, seed=i), -32768, 32767).astype(np.int16)
            out.append((noisy, "10 dB"))
    return out


def vad_onsets(model: SileroVad, utts: list[tuple[np.ndarray, str]]) -> tuple[list[float], float]:
    """Decision delay after the true onset, and VAD CPU seconds per audio second."""
    delays, cpu, audio_s = [], 0.0, 0.0
    for pcm, _ in utts:
        lead = RATE
        signal = mix(silence(1.0), pcm, silence(1.0))
        true_on = lead + voiced_bounds(pcm, RATE)[0]
        ears = Listener(model, RATE, TurnDetection())
        c = time.process_time()
        decided = None
        for i in range(0, signal.size, RATE // 50):
            started = any(isinstance(s, Started) for s in ears.push(signal[i : i + RATE // 50], replying=False))
            if started and decided is None:
                decided = i + RATE // 50
        cpu += time.process_time() - c
        audio_s += signal.size / RATE
        if decided is not None:
            delays.append(ms(decided - true_on))
    return delays, cpu / audio_s


async def start_reply(sim: SimulatedClient) -> str:
    await sim.send(
        "conversation.item.create",
        item={"type": "message", "role": "user", "content": [{"type": "input_text", "text": REPLY}]},
    )
    await sim.send("response.create")
    await sim.sync()
    return sim.of_type("response.created")[-1].event["response"]["id"]


async def barge_ins(port: int, utts: list[tuple[np.ndarray, str]]) -> dict[str, list[float]]:
    out: dict[str, list[float]] = {"pause": [], "cancel": [], "trunc_err": [], "pause_wall": [], "stale": []}
    for pcm, _ in utts:
        sim = await SimulatedClient.open(port)
        rid = await start_reply(sim)
        await sim.silence(1.5)
        true_on = sim.input_samples + voiced_bounds(pcm, RATE)[0]
        await sim.stream(mix(pcm, silence(1.2)))
        h = sim.heard[rid]
        paused = sim.of_type("response.output_audio.ducked")
        done = [r for r in sim.of_type("response.done") if r.event["response"]["id"] == rid]
        if h.stopped_at is not None:
            out["pause"].append(ms(h.stopped_at - true_on))
        if paused:
            out["pause_wall"].append((paused[0].wall - sim.sent_wall[paused[0].at]) * 1000)
        if done and done[0].event["response"]["status"] == "cancelled":
            out["cancel"].append(ms(done[0].at - true_on))
            truncated = sim.of_type("conversation.item.truncated")[0].event["audio_end_ms"]
            out["trunc_err"].append(abs(truncated - ms(sim.played_at(rid, true_on))))
        out["stale"].append(sum(x.stale_bytes for x in sim.heard.values()))
        await sim.ws.close()
    return out


async def false_cancels(port: int, talker: EspeakTalker, minutes: float) -> tuple[int, int, int, float]:
    """A long track of noise, coughs, clicks and backchannels and no real turn, over replies."""
    rng = np.random.default_rng(3)
    backchannels = [trim(await speech(talker, w, RATE), RATE) for w in ("uh huh", "mhm", "yeah", "okay", "hm")]
    sim = await SimulatedClient.open(port)
    total = int(minutes * 60 * RATE)
    cancels = pauses = backchannel_count = 0
    rid = await start_reply(sim)
    while sim.input_samples < total:
        kind = rng.choice(["noise", "cough", "click", "backchannel", "quiet"])
        if kind == "noise":
            burst = noise(rng.uniform(0.2, 1.0), RATE, level=rng.uniform(500, 8000), seed=int(rng.integers(1e6)))
        elif kind == "cough":
            burst = cough(RATE, rng.uniform(0.2, 0.5), seed=int(rng.integers(1e6)))
        elif kind == "click":
            burst = np.zeros(RATE // 10, np.int16)
            burst[:30] = 25000
        elif kind == "backchannel":
            burst = backchannels[int(rng.integers(len(backchannels)))]
            backchannel_count += 1
        else:
            burst = noise(1.0, RATE, level=200, seed=int(rng.integers(1e6)))
        await sim.stream(mix(burst, silence(rng.uniform(0.6, 1.5))))
        if sim.of_type("response.done") and sim.of_type("response.done")[-1].event["response"]["id"] == rid:
            rid = await start_reply(sim)  # keep a reply playing all the time
    for r in sim.of_type("response.done"):
        if r.event["response"]["status"] == "cancelled":
            cancels += 1
    pauses = len(sim.of_type("response.output_audio.ducked"))
    await sim.ws.close()
    return cancels, pauses, backchannel_count, sim.input_samples / RATE / 60


def asr_cpu(utts: list[tuple[np.ndarray, str]]) -> float:
    decoder = new_decoder()
    c = time.process_time()
    seconds = 0.0
    for pcm, _ in utts:
        decode_utterance(decoder, pcm, RATE)
        seconds += pcm.size / RATE
    return (time.process_time() - c) / seconds


def row(name: str, values: list[float], unit: str = "ms", base: float | None = None, note: str = "") -> str:
    med, p95 = statistics.median(values), pct(values, 0.95)
    ratio = f"{med / base:.2f}x" if base else note
    digits = 2 if p95 < 10 else 0
    return f"| {name} | {med:.{digits}f} {unit} | {p95:.{digits}f} {unit} | {ratio} |"


async def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--quick", action="store_true")
    args = ap.parse_args()
    talker = EspeakTalker()
    model = SileroVad()
    recognizer = PocketsphinxRecognizer(workers=1)
    utts = await utterances(talker, args.quick)
    delays, vad_cpu = vad_onsets(model, utts)
    try:
        async with serving(Backends(talker, PcmVocoder(), voice_activity=model, recognizer=recognizer)) as server:
            b = await barge_ins(server.port, utts)
            fc, pauses, backchannels, minutes = await false_cancels(server.port, talker, 0.5 if args.quick else 2.0)
    finally:
        recognizer.close()
    asr = asr_cpu(utts[:8])
    base = statistics.median(delays)
    print(
        f"\nDuplex listening benchmark: {len(utts)} interruptions ({len(VOICES[: 2 if args.quick else None])} voices,"
        " clean and 10 dB SNR), 20 ms client frames, times on the input clock\n"
    )
    print("| metric | median | p95 | ratio / note |")
    print("|---|---|---|---|")
    print(row("VAD onset decision after true speech onset, in process (baseline)", delays))
    print(row("true onset -> reply paused at the client", b["pause"], base=base))
    print(row("  of which server time (frame sent -> pause event received, wall)", b["pause_wall"], note="wall clock"))
    print(row("true onset -> reply cancelled (response.done)", b["cancel"], base=base))
    print(row("truncation point vs played position at true onset", b["trunc_err"], note="|error|"))
    print(f"| stale audio bytes after cancel | {int(sum(b['stale']))} | | must be 0 |")
    print(
        f"| false cancels on a {minutes:.1f} min noise/cough/click/backchannel track | "
        f"{fc / minutes:.1f} per min | | {pauses} pauses, {backchannels} backchannels, all resumed |"
    )
    print(f"| VAD CPU per session | {vad_cpu * 100:.2f} % of a core | | real time = 100 % |")
    print(f"| recognition CPU per second of speech | {asr * 100:.0f} % of a core | | pocketsphinx, once per turn |")
    print(f"\nBarge-ins detected: {len(b['pause'])}/{len(utts)}; cancelled: {len(b['cancel'])}/{len(utts)}")


if __name__ == "__main__":
    asyncio.run(main())
