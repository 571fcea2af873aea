"""Hearing on natural voices, at real time: turn-taking (Full-Duplex-Bench style) with
``server_vad`` and ``semantic_vad`` side by side, and where the time goes.

Every scenario is a fresh session of ``duplex serve`` (its own process: the default
backends but the thinker: the echo, whose long replies the interruptions need; ``--thinker
local`` to compare) driven by the
simulated client paced at real time, with speech from the natural-voice set
(tests/voices: Kokoro, Piper and human clips) under varied conditions (clean, babble
and music at 10 dB SNR, phone band, -35 and -15 dBFS). Times are audio time at the
client, from the true end (or onset) of the speech as the corpus marks it.

* turns: a question; latency to the end of turn (speech_stopped), the transcript,
  the reply's creation and its first audio; word errors of the live transcript.
* pauses: a sentence with a 250-450 ms pause inside; take-over = the turn ended in it.
* backchannels over a reply ("mhm", "okay", "I see"...): take-over = the reply was
  cancelled; gap = how long the reply went silent (a ducked reply is not silent).
* noise over a reply: babble or music at -40 dBFS and 10 dB below speech, 4 s.
* interruptions: a question over a reply; stop (duck) and cancel latency from its
  true onset, truncation error against what the client had played by then, and the
  time from its end to the new reply's first audio.
* turns in continuous babble (10 dB SNR): the turn must end while the babble goes on.
* with ``--listening``: Silero VAD's onset decision on the turns, in process (no
  server), as the baseline under the stop and cancel latencies, and its CPU per
  session; coughs and clicks over a reply (take-over = cancelled); and the stale
  audio bytes the client received over the whole run (must be 0).

The corpus is split by voice into the part the policy was tuned on and a held-out
part it is only measured on (``--split``; both by default, reported side by side:
the held-out figures are the ones that count). ``--fast`` replays faster than real
time, synced on the input clock: turn, pause and barge-in decisions are the same as
at real time (they are made on the sample clock), but the wall-clock parts of the
latencies (first audio, recognition) are left out; it is for tuning.

* with ``--echo DB`` (repeatable): a speakerphone, the client's speaker heard by its own
  microphone through a room (:class:`~duplex.app.clients.room.Room`: four reflections,
  the first 60 ms late; ``--room harsh``: a speaker driven into distortion and a 300 ms
  diffuse tail too) at DB below what it played; plus the reply alone, with nobody
  speaking (it must never duck or cut itself), and the words heard of each
  interruption. ``--canceller off`` (repeatable with ``on``) serves with
  ``--no-echo-cancellation`` for the figures before; ``--over-reply`` keeps only the
  scenarios over a reply.

    python scripts/bench_hearing.py [--quick] [--fast] [--split heldout] [--turns-only] [--talker kokoro] [--listening]
    python scripts/bench_hearing.py --quick --split heldout --detector semantic_vad --over-reply \
        --echo none --echo -30 --echo -15 --canceller off --canceller on
"""

from __future__ import annotations

import argparse
import asyncio
import itertools
import time
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from typing import Any

import numpy as np

from duplex.app.clients.room import HARSH, Room
from duplex.app.clients.simulated import Received, SimulatedClient
from duplex.app.clients.sounds import cough
from duplex.app.core.listening import Listener, Started
from duplex.app.core.settings import TurnDetection
from duplex.pipeline.detectors.silero_vad import SileroVad
from lab.servers import ServerProcess
from lab.stats import median
from lab.tables import full_duplex_bench, header, row, spread
from lab.voices import Clip, in_bed, load_corpus, noise, variant, wer

RATE = 24000
LEAD_S = 0.5
THINKER = "echo"
"""The thinker of the server being measured (``--thinker``)."""
CONDITIONS = ("clean", "babble10", "tel", "low", "music10", "loud")
REPLY = (
    "This is a reply that goes on for a while, sentence after sentence. It tells you about the weather, "
    "the time, and many other things that you may or may not want to hear about today."
)
ASK_LONG = "Tell me a long story about a friendly dragon, in at least six sentences."
"""What a thinker other than the echo is asked, for a reply long enough to be talked over."""


@dataclass
class Tally:
    """What one detector's runs measured (seconds unless said)."""

    eot: list[float] = field(default_factory=list)
    silence: list[float] = field(default_factory=list)
    """True end of speech -> the turn's audio_end_ms: the silence the policy required."""
    waited: list[float] = field(default_factory=list)
    """audio_end_ms -> speech_stopped at the client: waiting on the models' answers."""
    transcript: list[float] = field(default_factory=list)
    created: list[float] = field(default_factory=list)
    first_audio: list[float] = field(default_factory=list)
    recognition_wait: list[float] = field(default_factory=list)
    words: list[tuple[int, int]] = field(default_factory=list)
    answered: list[bool] = field(default_factory=list)
    pause_takeover: list[bool] = field(default_factory=list)
    bc_takeover: list[bool] = field(default_factory=list)
    bc_gap: list[float] = field(default_factory=list)
    bc_ducked: list[float] = field(default_factory=list)
    noise_cancels: list[bool] = field(default_factory=list)
    noise_ducked: list[float] = field(default_factory=list)
    stop: list[float] = field(default_factory=list)
    cancel: list[float] = field(default_factory=list)
    silent: list[float] = field(default_factory=list)
    """True onset of an interruption -> the reply silent (paused, or cancelled)."""
    truncation_error_ms: list[float] = field(default_factory=list)
    interrupted: list[bool] = field(default_factory=list)
    interruption_latency: list[float] = field(default_factory=list)
    babble_eot: list[float] = field(default_factory=list)
    babble_ended: list[bool] = field(default_factory=list)
    knock_cancels: list[bool] = field(default_factory=list)
    """Coughs and clicks over a reply (``--listening``) that cancelled it."""
    knock_ducked: list[float] = field(default_factory=list)
    """...and how long each kept it ducked (s)."""
    stale_bytes: int = 0
    """Audio the client received that cannot belong to its reply (must stay 0)."""
    alone_cut: list[bool] = field(default_factory=list)
    """The reply alone (``--echo``), nobody speaking: cancelled or cut (by its own echo)."""
    alone_ducked: list[bool] = field(default_factory=list)
    interruption_words: list[tuple[int, int]] = field(default_factory=list)
    """(word errors, words) of what was heard of each interruption."""
    by_condition: dict[str, tuple[list[float], list[tuple[int, int]]]] = field(default_factory=dict)
    """Per condition of the turns: (ends of turn, (word errors, words))."""
    items: list[str] = field(default_factory=list)
    """One line per clip over a reply (``--list``): what it was, what was heard, what it did."""


def at24(clip: Clip, sample: int) -> int:
    return sample * RATE // clip.rate


def first(events: list[Received], etype: str, after: int = 0, **match: Any) -> Received | None:
    return next(
        (
            r
            for r in events
            if r.event["type"] == etype and r.at >= after and all(r.event.get(k) == v for k, v in match.items())
        ),
        None,
    )


FAST = False
"""Replay faster than real time (``--fast``)."""
ROOM: Room | None = None
"""The speakerphone's room (``--echo``): the client hears its own speaker."""
NOISE_REDUCTION: str | None = None
"""The sessions' ``input_audio_noise_reduction`` (``--noise-reduction``)."""


async def session(url: str, td: str) -> SimulatedClient:
    sim = await SimulatedClient.open(url, realtime=not FAST, room=ROOM)
    nr = {"type": NOISE_REDUCTION} if NOISE_REDUCTION else None
    await sim.send("session.update", session={"turn_detection": {"type": td}, "input_audio_noise_reduction": nr})
    await sim.start()
    return sim


async def close(sim: SimulatedClient, t: Tally) -> None:
    await sim.stop()
    t.stale_bytes += sum(h.stale_bytes for h in sim.heard.values())
    await sim.ws.close()


async def until(sim: SimulatedClient, done: Callable[[], bool], limit_s: float) -> None:
    """Stream silence at real time until ``done`` (or ``limit_s`` of it)."""
    for _ in range(int(limit_s / 0.1)):
        if done():
            return
        await sim.silence(0.1)


async def start_reply(sim: SimulatedClient) -> str:
    """A long reply to a typed message, heard for 1.5 s; returns its response id."""
    text = REPLY if THINKER == "echo" else ASK_LONG
    item = {"type": "message", "role": "user", "content": [{"type": "input_text", "text": text}]}
    await sim.send("conversation.item.create", item=item)
    await sim.send("response.create")
    await until(sim, lambda: bool(sim.of_type("response.output_audio.delta")), 20)
    rid = str(sim.of_type("response.output_audio.delta")[0].event["response_id"])
    await until(sim, lambda: sim.heard[rid].played >= 1.5 * RATE, 10)
    return rid


async def turn(url: str, td: str, clip: Clip, condition: str, seed: int, t: Tally) -> None:
    sim = await session(url, td)
    pcm = variant(clip, condition, RATE, seed=seed)
    await sim.silence(LEAD_S)
    await sim.stream(pcm)
    end = int(LEAD_S * RATE) + at24(clip, clip.speech_end)
    await until(sim, lambda: bool(sim.of_type("response.output_audio.delta")), 4)
    ev = sim.events
    stopped, done = (
        first(ev, "input_audio_buffer.speech_stopped"),
        first(ev, "conversation.item.input_audio_transcription.completed"),
    )
    created, audio = first(ev, "response.created"), first(ev, "response.output_audio.delta")
    t.answered.append(audio is not None)
    for r, into in ((stopped, t.eot), (done, t.transcript), (created, t.created), (audio, t.first_audio)):
        if r is not None:
            into.append((r.at - end) / RATE)
    eots, words = t.by_condition.setdefault(condition, ([], []))
    if stopped is not None:
        eots.append((stopped.at - end) / RATE)
    if done is not None and clip.text is not None:
        words.append(wer(clip.text, done.event["transcript"]))
    if stopped is not None:
        audio_end = stopped.event["audio_end_ms"] * RATE // 1000
        t.silence.append((audio_end - end) / RATE)
        t.waited.append(max(0, stopped.at - audio_end) / RATE)
    if stopped is not None and done is not None:
        t.recognition_wait.append(max(0, done.at - stopped.at) / RATE)
    if done is not None:
        assert clip.text is not None
        t.words.append(wer(clip.text, done.event["transcript"]))
    await close(sim, t)


async def pause(url: str, td: str, clip: Clip, condition: str, seed: int, t: Tally) -> None:
    sim = await session(url, td)
    await sim.silence(LEAD_S)
    await sim.stream(variant(clip, condition, RATE, seed=seed))
    await sim.silence(1.5)
    assert clip.pause_end is not None
    resumes = (int(LEAD_S * RATE) + at24(clip, clip.pause_end)) * 1000 // RATE
    stopped = first(sim.events, "input_audio_buffer.speech_stopped")
    t.pause_takeover.append(stopped is not None and stopped.event["audio_end_ms"] < resumes)
    await close(sim, t)


def _span(events: list[Received], start: str, end: str, rid: str) -> float:
    """Seconds between each ``start`` event of ``rid`` and the next ``end`` (or the last event)."""
    total, opened = 0, None
    for r in events:
        if r.event.get("response_id") != rid:
            continue
        if r.event["type"] == start and opened is None:
            opened = r.at
        elif r.event["type"] in (end, "response.done") and opened is not None:
            total, opened = total + r.at - opened, None
    return total / RATE


def _heard(events: list[Received], after: int) -> str:
    return " | ".join(
        r.event["transcript"]
        for r in events
        if r.at >= after and r.event["type"] == "conversation.item.input_audio_transcription.completed"
    )


async def over_reply(url: str, td: str, pcm: np.ndarray, t: Tally, *, kind: str, name: str = "") -> None:
    sim = await session(url, td)
    rid = await start_reply(sim)
    at = sim.input_samples
    await sim.stream(pcm)
    await sim.silence(2.5)
    ev = [r for r in sim.events if r.at >= at]
    cancelled = any(
        r.event["type"] == "response.done"
        and r.event["response"]["id"] == rid
        and r.event["response"]["status"] != "completed"
        for r in ev
    ) or bool(first(ev, "conversation.item.truncated"))
    gap = _span(ev, "response.output_audio.paused", "response.output_audio.resumed", rid)
    ducked = _span(ev, "response.output_audio.ducked", "response.output_audio.resumed", rid)
    outcome = "CANCELLED" if cancelled else "kept"
    t.items.append(f"{kind} {name}: {outcome}, ducked {ducked:.2f} s, silent {gap:.2f} s, heard {_heard(ev, at)!r}")
    if kind == "backchannel":
        t.bc_takeover.append(cancelled)
        t.bc_gap.append(gap)
        t.bc_ducked.append(ducked)
    elif kind == "knock":
        t.knock_cancels.append(cancelled)
        t.knock_ducked.append(ducked)
    else:
        t.noise_cancels.append(cancelled)
        t.noise_ducked.append(ducked)
    await close(sim, t)


async def interruption(url: str, td: str, clip: Clip, t: Tally) -> None:
    sim = await session(url, td)
    rid = await start_reply(sim)
    base = sim.input_samples
    await sim.stream(variant(clip, "clean", RATE))
    onset, end = base + at24(clip, clip.speech_start), base + at24(clip, clip.speech_end)
    await until(sim, lambda: len({r.event["response_id"] for r in sim.of_type("response.output_audio.delta")}) > 1, 4)
    ev = sim.events
    duck = first(ev, "response.output_audio.ducked", response_id=rid) or first(
        ev, "response.output_audio.paused", response_id=rid
    )
    done = next((r for r in ev if r.event["type"] == "response.done" and r.event["response"]["id"] == rid), None)
    cut = first(ev, "conversation.item.truncated")
    new_audio = next(
        (r for r in ev if r.event["type"] == "response.output_audio.delta" and r.event["response_id"] != rid), None
    )
    interrupted = done is not None and done.event["response"]["status"] == "cancelled"
    t.interrupted.append(interrupted and new_audio is not None)
    if duck is not None:
        t.stop.append((duck.at - onset) / RATE)
    if interrupted and done is not None:
        t.cancel.append((done.at - onset) / RATE)
        held = first(ev, "response.output_audio.paused", response_id=rid)
        t.silent.append((min(done.at, held.at if held is not None else done.at) - onset) / RATE)
    if cut is not None:
        played = sim.played_at(rid, onset) * 1000 / RATE
        t.truncation_error_ms.append(abs(cut.event["audio_end_ms"] - played))
    if new_audio is not None:
        t.interruption_latency.append((new_audio.at - end) / RATE)
    heard = first(ev, "conversation.item.input_audio_transcription.completed", after=onset)
    t.items.append(
        f"interruption {clip.name}: {'taken' if interrupted else 'MISSED'}, duck "
        f"{'-' if duck is None else f'{(duck.at - onset) / RATE:.3f}'} s, cancel "
        f"{'-' if done is None else f'{(done.at - onset) / RATE:.2f}'} s, heard {_heard(ev, base)!r}"
    )
    if heard is not None and clip.text is not None:
        t.interruption_words.append(wer(clip.text, heard.event["transcript"]))
    await close(sim, t)


async def alone(url: str, td: str, t: Tally) -> None:
    """The reply with nobody speaking over it (its echo only, with ``--echo``)."""
    sim = await session(url, td)
    rid = await start_reply(sim)
    await until(sim, lambda: sim.heard[rid].done and not sim.playing, 12)
    await sim.silence(1.0)
    ev = sim.events
    done = next((r for r in ev if r.event["type"] == "response.done" and r.event["response"]["id"] == rid), None)
    t.alone_cut.append(
        bool(first(ev, "conversation.item.truncated"))
        or (done is not None and done.event["response"]["status"] != "completed")
    )
    t.alone_ducked.append(bool(first(ev, "response.output_audio.ducked") or first(ev, "response.output_audio.paused")))
    await close(sim, t)


async def babble_turn(url: str, td: str, clip: Clip, seed: int, t: Tally) -> None:
    sim = await session(url, td)
    bed, lead = in_bed(clip, 10.0, RATE, lead_s=1.0, tail_s=5.0, seed=seed)
    await sim.stream(bed)
    end, babble_end = lead + at24(clip, clip.speech_end), bed.size
    stopped = [r for r in sim.of_type("input_audio_buffer.speech_stopped") if r.at >= end]
    ended = bool(stopped) and stopped[0].at < babble_end
    t.babble_ended.append(ended)
    if ended:
        t.babble_eot.append((stopped[0].at - end) / RATE)
    await sim.silence(0.5)
    await close(sim, t)


def s(values: list[float], digits: int = 2) -> str:
    """Median / p90."""
    return spread(values, digits=digits, q=0.9)


def rate(flags: list[bool]) -> str:
    return f"{sum(flags) / len(flags):.3f} ({sum(flags)}/{len(flags)})" if flags else "-"


class Part:
    """The clips of one split of the corpus."""

    def __init__(self, split: str) -> None:
        corpus = load_corpus()
        self.clips = [c for c in corpus.clips if split == "all" or getattr(c, "split", "tune") == split]
        self.turns = [c for c in self.clips if c.kind == "turn"]
        self.paused = [c for c in self.clips if c.kind == "paused"]
        self.backchannels = [c for c in self.clips if c.kind == "backchannel"]
        noises = [c.name for c in self.clips if c.kind == "noise"]
        self.noises = noises or ["babble", "music"]


def knocks(quick: bool) -> list[np.ndarray]:
    """Coughs and clicks, the sounds a listener makes that are not a turn."""
    click = np.zeros(RATE // 10, np.int16)
    click[:30] = 25000
    coughs = [cough(RATE, seconds, seed=i) for i, seconds in enumerate((0.25, 0.4, 0.5)[: 2 if quick else 3])]
    return [*coughs, click]


def vad_onsets(clips: list[Clip]) -> tuple[list[float], float]:
    """In process, no server: Silero VAD's onset decision after each clip's true onset (s,
    20 ms frames, a second of silence either side), and its CPU seconds per audio second."""
    model, frame, pad = SileroVad(), RATE // 50, np.zeros(RATE, np.int16)
    delays, cpu, audio_s = [], 0.0, 0.0
    for clip in clips:
        pcm = np.concatenate([pad, variant(clip, "clean", RATE), pad])
        true_on = pad.size + at24(clip, clip.speech_start)
        ears = Listener(model, RATE, TurnDetection())
        decided = None
        c = time.process_time()
        for i in range(0, pcm.size, frame):
            started = any(isinstance(x, Started) for x in ears.push(pcm[i : i + frame], replying=False))
            if started and decided is None:
                decided = i + frame
        cpu += time.process_time() - c
        audio_s += pcm.size / RATE
        if decided is not None:
            delays.append((decided - true_on) / RATE)
    return delays, cpu / max(audio_s, 1e-9)


async def over_replies(url: str, td: str, quick: bool, split: str) -> Tally:
    """``--over-reply``: only what happens over a reply (the speakerphone's cases)."""
    corpus, t = Part(split), Tally()
    for _ in range(3 if quick else 6):
        await alone(url, td, t)
    for clip in corpus.backchannels[:: 2 if quick else 1]:
        await over_reply(url, td, variant(clip, "clean", RATE), t, kind="backchannel", name=clip.name)
    for name in corpus.noises:
        await over_reply(url, td, noise(name, 4.0, -36.0, RATE, seed=7), t, kind="noise")
    for clip in corpus.turns[1 : 2 * 12 : 2][: 6 if quick else 12]:
        await interruption(url, td, clip, t)
    return t


async def run(
    url: str, td: str, quick: bool, turns_only: bool = False, split: str = "all", listening: bool = False
) -> Tally:
    corpus, t = Part(split), Tally()
    step = 2 if quick else 1
    for i, clip in enumerate(corpus.turns[::step]):
        await turn(url, td, clip, CONDITIONS[i % len(CONDITIONS)], i, t)
    if turns_only:
        for clip in corpus.turns[1 : 2 * 12 : 2][: 6 if quick else 12]:
            await interruption(url, td, clip, t)
        return t
    for i, clip in enumerate(corpus.paused):
        for j, condition in enumerate(("clean", "babble10", "tel")[: 2 if quick else 3]):
            await pause(url, td, clip, condition, i + j, t)
    for clip in corpus.backchannels[::step]:
        await over_reply(url, td, variant(clip, "clean", RATE), t, kind="backchannel", name=clip.name)
    for name in corpus.noises:
        for level in (-40.0, -36.0):
            await over_reply(url, td, noise(name, 4.0, level, RATE, seed=7), t, kind="noise")
    for clip in corpus.turns[1 : 2 * 12 : 2][: 6 if quick else 12]:
        await interruption(url, td, clip, t)
    for i, clip in enumerate(corpus.turns[3:40:5][: 4 if quick else 8]):
        await babble_turn(url, td, clip, i, t)
    for pcm in knocks(quick) if listening else []:
        await over_reply(url, td, pcm, t, kind="knock")
    return t


def report(results: dict[str, Tally]) -> None:
    pace = (
        "replayed faster than real time (--fast: decisions exact, wall-clock parts left out)"
        if FAST
        else "at real time"
    )
    print(f"\nTurn-taking on natural voices, {pace} (median / p90 in seconds of audio time)\n")
    systems = {
        f"Duplex, {td}": (
            rate(t.pause_takeover),
            rate(t.bc_takeover),
            rate(t.answered),
            s(t.first_audio),
            rate(t.interrupted),
            s(t.interruption_latency),
            s(t.stop, 3),
        )
        for td, t in results.items()
    }
    print(full_duplex_bench(systems))
    print("\nWhere the time goes, from the true end of speech (median / p90, s)\n")
    print("| detector | silence required | waiting on the models | end of turn | transcript | reply created "
          "| first audio | recognition after the turn ends |")  # fmt: skip
    print("|---|---|---|---|---|---|---|---|")
    for td, t in results.items():
        print(
            f"| {td} | {s(t.silence)} | {s(t.waited)} | {s(t.eot)} | {s(t.transcript)} | {s(t.created)} | "
            f"{s(t.first_audio)} | "
            f"{s(t.recognition_wait)} (max {max(t.recognition_wait, default=0):.2f}) |"
        )
    print("\nOver a reply and under noise\n")
    print("| detector | live WER | backchannel gap (silent) | backchannel ducked | noise cancels | noise ducked "
          "| silent after onset | cancel latency | truncation error ms | babble turns ended "
          "| babble end of turn |")  # fmt: skip
    print("|---|---|---|---|---|---|---|---|---|---|---|")
    for td, t in results.items():
        errors, words = sum(e for e, _ in t.words), sum(n for _, n in t.words)
        print(
            f"| {td} | {errors / max(1, words):.3f} | {s(t.bc_gap)} | {s(t.bc_ducked)} | {rate(t.noise_cancels)} | "
            f"{s(t.noise_ducked)} | {s(t.silent)} | {s(t.cancel)} | {s(t.truncation_error_ms, 0)} | "
            f"{rate(t.babble_ended)} | "
            f"{s(t.babble_eot)} |"
        )


def report_conditions(results: dict[str, Tally]) -> None:
    """The turns by condition: end of turn (median / p90 s) and live WER."""
    conditions = sorted({c for t in results.values() for c in t.by_condition})
    print("\nTurns by condition: end of turn (median / p90 s); live WER\n")
    print("| run | " + " | ".join(conditions) + " |")
    print("|---|" + "---|" * len(conditions))
    for name, t in results.items():
        cells = []
        for c in conditions:
            eots, words = t.by_condition.get(c, ([], []))
            errors, n = sum(e for e, _ in words), sum(k for _, k in words)
            cells.append(f"{s(eots)}; {errors / max(1, n):.3f}")
        print(f"| {name} | " + " | ".join(cells) + " |")


def report_echo(results: dict[str, Tally]) -> None:
    """``--echo`` / ``--over-reply``: over a reply, with and without the room's echo."""
    print("\nOver a reply on a speakerphone (median / p90 s)\n")
    print("| run | reply alone: cut itself | reply alone: ducked | backchannels that cancelled | backchannel silent "
          "| backchannel ducked | noise cancels | interruptions taken | duck after onset | silent after onset "
          "| cancel after onset | truncation error ms | interruption WER |")  # fmt: skip
    print("|---|---|---|---|---|---|---|---|---|---|---|---|---|")
    for name, t in results.items():
        errors, words = sum(e for e, _ in t.interruption_words), sum(n for _, n in t.interruption_words)
        print(
            f"| {name} | {rate(t.alone_cut)} | {rate(t.alone_ducked)} | {rate(t.bc_takeover)} | {s(t.bc_gap)} | "
            f"{s(t.bc_ducked)} | {rate(t.noise_cancels)} | {rate(t.interrupted)} | {s(t.stop, 3)} | {s(t.silent)} | "
            f"{s(t.cancel)} | "
            f"{s(t.truncation_error_ms, 0)} | {errors / max(1, words):.3f} |"
        )


def report_listening(results: dict[str, Tally], onsets: list[float], vad_cpu: float) -> None:
    """``--listening``: barge-in against the VAD's own onset decision, CPU, coughs and clicks, stale audio."""
    base = median(onsets) * 1000 if onsets else None
    print("\nListening: barge-in against the VAD's onset decision (ms of audio time), knocks over a reply\n")
    print(header("metric", "median", "p95", "ratio / note"))

    def ms(name: str, values: list[float], base: float | None = None) -> str:
        return row(name, values, "ms", scale=1000, digits=None, base=base)

    print(ms("VAD onset decision after true speech onset, in process (baseline)", onsets))
    for name, t in results.items():
        print(ms(f"{name}: true onset -> reply ducked or paused", t.stop, base))
        print(ms(f"{name}: true onset -> reply cancelled", t.cancel, base))
    print(f"| VAD CPU per session | {vad_cpu * 100:.2f} % of a core | | real time = 100 % |")
    for name, t in results.items():
        print(f"| {name}: coughs and clicks that cancelled the reply | {rate(t.knock_cancels)} | | must be 0 |")
        ducked = " ".join(f"{s:.2f}" for s in t.knock_ducked)
        print(f"| {name}: how long each cough and click kept it ducked, s | {ducked} | | |")
        print(f"| {name}: stale audio bytes over the run | {t.stale_bytes} | | must be 0 |")


async def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--quick", action="store_true", help="about half the scenarios")
    ap.add_argument("--detector", choices=("server_vad", "semantic_vad"), action="append")
    ap.add_argument("--talker", action="append", help="compare these voices (duplex serve --talker) instead")
    ap.add_argument("--asr-model", action="append", help="compare these recognisers (duplex serve --asr-model)")
    ap.add_argument(
        "--thinker",
        action="append",
        help="compare these thinkers (duplex serve --thinker; default: echo, its long replies are interrupted)",
    )
    ap.add_argument("--turns-only", action="store_true", help="only turns and interruptions")
    ap.add_argument("--over-reply", action="store_true", help="only the scenarios over a reply (and the reply alone)")
    ap.add_argument(
        "--echo",
        type=lambda v: None if v == "none" else float(v),
        action="append",
        help="a speakerphone: the client's speaker in its microphone at DB ('none': no echo, to compare)",
    )
    ap.add_argument(
        "--room",
        choices=("reflections", "harsh"),
        default="reflections",
        help="the speakerphone's room: four clean reflections, or a distorting speaker and a diffuse tail",
    )
    ap.add_argument(
        "--canceller", choices=("on", "off"), action="append", help="the server's echo canceller (default: on)"
    )
    ap.add_argument(
        "--noise-reduction",
        choices=("none", "near_field", "far_field"),
        action="append",
        help="compare the sessions' input_audio_noise_reduction (default: none)",
    )
    ap.add_argument(
        "--enhancer", choices=("hush", "none"), action="append", help="the server's --asr-enhancer (default: hush)"
    )
    ap.add_argument("--split", choices=("tune", "heldout", "all"), action="append", help="default: tune and heldout")
    ap.add_argument("--fast", action="store_true", help="faster than real time (decisions exact, latencies not)")
    ap.add_argument(
        "--listening",
        action="store_true",
        help="also: VAD onset and CPU in process (the barge-in baseline), coughs and clicks over a reply, stale audio",
    )
    ap.add_argument("--list", action="store_true", help="also: one line per clip over a reply (what was heard)")
    args = ap.parse_args()
    global FAST, THINKER, ROOM, NOISE_REDUCTION
    FAST = args.fast
    results: dict[str, Tally] = {}
    for talker, asr, thinker, canceller, enhancer in itertools.product(
        args.talker or [None],
        args.asr_model or [None],
        args.thinker or ["echo"],
        args.canceller or [None],
        args.enhancer or [None],
    ):
        THINKER = thinker
        server = ServerProcess(
            *(("--talker", talker) if talker else ()),
            *(("--asr-model", asr) if asr else ()),
            *(("--thinker", thinker) if thinker else ()),
            *(("--no-echo-cancellation",) if canceller == "off" else ()),
            *(("--asr-enhancer", enhancer) if enhancer else ()),
        )
        with server.running():
            for split, td, level, nr in itertools.product(
                args.split or ("tune", "heldout"),
                args.detector or ("server_vad", "semantic_vad"),
                args.echo or [None],
                args.noise_reduction or ["none"],
            ):
                ROOM = None if level is None else replace(HARSH if args.room == "harsh" else Room(), level_db=level)
                NOISE_REDUCTION = None if nr == "none" else nr
                name = ", ".join(
                    x
                    for x in (
                        td,
                        talker,
                        asr and f"Whisper {asr}",
                        thinker and f"thinker {thinker}",
                        canceller and f"canceller {canceller}",
                        enhancer and f"enhancer {enhancer}",
                        "no echo" if level is None else f"echo {level:g} dB",
                        level is not None and args.room == "harsh" and "harsh room",
                        nr != "none" and f"noise reduction {nr}",
                        split,
                    )
                    if x
                )
                if args.over_reply:
                    results[name] = await over_replies(server.url, td, args.quick, split)
                else:
                    results[name] = await run(server.url, td, args.quick, args.turns_only, split, args.listening)
                print(f"{name}: done", flush=True)
    if args.list:
        for name, t in results.items():
            print(f"\n{name}:\n" + "\n".join(t.items))
    if args.over_reply:
        report_echo(results)
        return
    report(results)
    report_conditions(results)
    if args.echo:
        report_echo(results)
    if args.listening:
        clips = [c for split in args.split or ("tune", "heldout") for c in Part(split).turns[:: 2 if args.quick else 1]]
        report_listening(results, *vad_onsets(clips))


if __name__ == "__main__":
    asyncio.run(main())
