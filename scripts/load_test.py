"""Load test: many concurrent replayed conversations with barge-ins, on loopback, bounded in time.

Starts ``duplex serve`` in its own process and runs N simulated clients paced at
real time, each looping a conversation: ask a question, listen to the reply, talk
over it after a second, listen to the answer to that. The speech is the natural-voice
set's (tests/voices: Kokoro, Piper and human turns), and "speech end" is where the
corpus marks the end of the words, not of the clip. Prints errors, lost and
stale audio, latency percentiles, and the server's RSS and task count before,
at peak, and after the clients have gone. The duck's baseline is the listener's own
decision on the same interruptions, alone in process: what the load adds is the ratio.

    python scripts/load_test.py [--sessions 50] [--seconds 120] [--rounds 1]
"""

from __future__ import annotations

import argparse
import asyncio
import os
import random
import re
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np
import websockets

from duplex.app.clients.simulated import SimulatedClient
from duplex.app.core.listening import Duck
from duplex.app.core.settings import TurnDetection
from duplex.pipeline.detectors.silero_vad import SileroVad
from lab.offline import Answers, hear
from lab.procs import cpu_seconds, descendants, rss_kib
from lab.servers import ServerProcess
from lab.tables import spread
from lab.voices import load_corpus, variant

Speech = tuple[np.ndarray, int, int]
"""A clip at 24 kHz and the samples where its words begin and end."""


def voices() -> dict[str, list[Speech]]:
    """Questions and interruptions from the natural-voice set (every other turn each)."""
    turns = load_corpus().turns
    clips = [
        (variant(c, "clean", 24000), c.speech_start * 24000 // c.rate, c.speech_end * 24000 // c.rate) for c in turns
    ]
    return {"questions": clips[::2], "interruptions": clips[1::2]}


def duck_alone(audio: dict[str, list[Speech]]) -> list[float]:
    """The baseline under the duck: for every interruption, ms from the corpus's onset to
    the listener's duck, in process, one stream, no load (audio time; each clip heard
    over a reply to 600 ms past its onset, as far as a duck ever takes)."""
    vad, answers, lead = SileroVad(), Answers(), np.zeros(12000, np.int16)
    td, out = TurnDetection(type="semantic_vad"), []
    for pcm, start, _ in audio["interruptions"]:
        heard = hear(vad, answers, np.concatenate([lead, pcm[: start + 14400]]), 24000, td, replying=True)
        duck = next((h.at for h in heard if isinstance(h.signal, Duck)), None)
        if duck is not None:
            out.append((duck - lead.size - start) * 1000 / 24000)
    return out


def tasks(server: ServerProcess) -> int:
    """The server's asyncio tasks, from its metrics."""
    found = re.search(r"^duplex_tasks (\S+)", server.http("/metrics").decode(), re.M)
    assert found is not None
    return int(float(found.group(1)))


def turn_models(server: ServerProcess) -> dict[str, int]:
    """Turn transcriptions (pause candidates, finals) each Whisper model made so far
    (``--asr-model auto``; empty with one model)."""
    found = re.findall(
        r'^duplex_turn_transcripts_total\{model="([^"]+)"\} (\S+)$', server.http("/metrics").decode(), re.M
    )
    return {model: int(float(n)) for model, n in found}


def tally() -> dict[str, Any]:
    return {
        "turns": 0,
        "barge_ins": 0,
        "first_audio": [],
        "stopped": [],
        "created": [],
        "recognition": [],
        "pause": [],
        "errors": [],
        "stale": 0,
        "cancelled": 0,
        "completed": 0,
        "failed": 0,
        "untranscribed": 0,
        "unanswered": 0,
        "closed": [],
    }


def first_audio(events: list[Any]) -> Any:
    """The first audio of the first reply created among ``events`` (a reply still playing
    from before the question is not its answer)."""
    created = next((r for r in events if r.event["type"] == "response.created"), None)
    if created is None:
        return None
    rid = created.event["response"]["id"]
    return next(
        (r for r in events if r.event["type"] == "response.output_audio.delta" and r.event["response_id"] == rid), None
    )


async def conversation(
    port: int, audio: dict[str, list[Speech]], until: float, rng: random.Random, out: dict[str, Any]
) -> None:
    sim = await SimulatedClient.open(port, realtime=True, frame_ms=40)
    await sim.start()
    try:
        await sim.silence(rng.uniform(0.5, 6.0))  # people do not all start at once
        while time.monotonic() < until:
            question, _, words_end = rng.choice(audio["questions"])
            end = sim.input_samples + words_end
            seen = len(sim.events)
            await sim.stream(question)
            # Listen until the reply's first audio (or give up after 15 s); only new events are looked at.
            first = None
            for _ in range(375):
                first = first_audio(sim.events[seen:])
                if first is not None:
                    break
                await sim.silence(0.04)
            out["turns"] += 1
            out["unanswered"] += first is None
            if first is not None:
                spoken = min(w for n, w in sim.sent_wall.items() if n >= end)
                out["first_audio"].append((first.wall - spoken) * 1000)
                for key, kind in (("stopped", "input_audio_buffer.speech_stopped"), ("created", "response.created")):
                    at = next((r.wall for r in sim.events[seen:] if r.event["type"] == kind), None)
                    if at is not None:
                        out[key].append((at - spoken) * 1000)
            if first is not None and rng.random() < 0.5:
                # Half the time, talk over the reply a second in.
                await sim.silence(1.0)
                words, words_start, _ = rng.choice(audio["interruptions"])
                seen, onset_wall = len(sim.events), time.monotonic() + words_start / 24000
                await sim.stream(words)
                await sim.silence(1.0)
                out["barge_ins"] += 1
                paused = next((r for r in sim.events[seen:] if r.event["type"] == "response.output_audio.ducked"), None)
                if paused is not None:
                    out["pause"].append((paused.wall - onset_wall) * 1000)
            await sim.silence(rng.uniform(3.0, 6.0))  # listen to the rest, think, then speak again
    except websockets.ConnectionClosed as exc:
        out["closed"].append(str(exc))
    finally:
        await sim.stop()
        await sim.client.close()
    out["errors"] += [r.event["error"]["code"] for r in sim.of_type("error")]
    out["recognition"] += [
        r.event["recognition_ms"] for r in sim.of_type("conversation.item.input_audio_transcription.completed")
    ]
    out["untranscribed"] += len(sim.of_type("conversation.item.input_audio_transcription.failed"))
    out["stale"] += sum(h.stale_bytes for h in sim.heard.values())
    out["cancelled"] += sum(1 for r in sim.of_type("response.done") if r.event["response"]["status"] == "cancelled")
    out["completed"] += sum(1 for r in sim.of_type("response.done") if r.event["response"]["status"] == "completed")
    out["failed"] += sum(1 for r in sim.of_type("response.done") if r.event["response"]["status"] == "failed")


async def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--sessions", type=int, default=50)
    ap.add_argument("--seconds", type=float, default=120.0)
    ap.add_argument("--rounds", type=int, default=1, help="rounds of --seconds; RSS and tasks are read after each")
    ap.add_argument("--talker", help="duplex serve --talker (default: the server's default voice)")
    ap.add_argument(
        "--thinker", default="echo", help="duplex serve --thinker (the echo by default: the server measured)"
    )
    ap.add_argument("--asr-model", help="duplex serve --asr-model (default: the server's default recogniser)")
    ap.add_argument("--quiet", type=float, default=60.0, help="seconds with nobody connected before the last RSS")
    args = ap.parse_args()
    audio = voices()
    alone = duck_alone(audio)
    # Its log goes to a file: a pipe nobody reads would block it.
    flags = (
        "--thinker",
        args.thinker,
        *(("--talker", args.talker) if args.talker else ()),
        *(("--asr-model", args.asr_model) if args.asr_model else ()),
    )
    server = ServerProcess(*flags, log=Path(tempfile.gettempdir()) / "duplex-load-server.log")
    server.start()
    port, pid = server.port, server.pid
    try:
        # Warm up (one conversation), then the baseline.
        await conversation(port, audio, time.monotonic() + 1, random.Random(0), tally())
        await asyncio.sleep(2)
        base_rss, base_tasks, models0 = rss_kib(pid), tasks(server), turn_models(server)
        out = tally()
        peak = {"rss": base_rss, "tasks": base_tasks}
        workers = descendants(pid)
        cpu0 = (cpu_seconds(pid), sum(cpu_seconds(w) for w in workers), time.process_time())
        t0 = time.monotonic()
        after: list[tuple[int, int]] = []
        for r in range(args.rounds):
            until = time.monotonic() + args.seconds

            async def watch(until: float = until) -> None:
                while time.monotonic() < until:
                    await asyncio.sleep(2)
                    peak["rss"] = max(peak["rss"], rss_kib(pid))
                    peak["tasks"] = max(peak["tasks"], await asyncio.to_thread(tasks, server))

            await asyncio.gather(
                watch(),
                *(conversation(port, audio, until, random.Random(i + 1000 * r), out) for i in range(args.sessions)),
            )
            await asyncio.sleep(3)  # let the server notice every close
            after.append((rss_kib(pid), tasks(server)))
        wall = time.monotonic() - t0
        cpu1 = (cpu_seconds(pid), sum(cpu_seconds(w) for w in workers), time.process_time())
        cpu = [(b - a) / wall for a, b in zip(cpu0, cpu1, strict=True)]
        worker_rss = sum(rss_kib(w) for w in workers)
        models = {m: n - models0.get(m, 0) for m, n in turn_models(server).items()}
        await asyncio.sleep(args.quiet)  # what the server keeps once nobody has come for a while
        quiet_rss = rss_kib(pid)
    finally:
        server.stop()
    rounds = f"{args.rounds} rounds of {args.seconds:.0f} s" if args.rounds > 1 else f"{args.seconds:.0f} s"
    print(
        f"\nLoad test: {args.sessions} concurrent conversations for {rounds}, clients paced at real time, "
        "each turn a question, the reply, a barge-in over it half the time, a pause\n"
    )
    print("| measure | value |")
    print("|---|---|")
    print(
        f"| turns / barge-ins / turns not answered within 15 s | {out['turns']} / {out['barge_ins']} / "
        f"{out['unanswered']} |"
    )
    print(
        f"| replies completed / cancelled by barge-in / failed | {out['completed']} / {out['cancelled']} "
        f"/ {out['failed']} |"
    )
    print(
        f"| error events / failed transcriptions | {len(out['errors'])} {sorted(set(out['errors'])) or ''} "
        f"/ {out['untranscribed']} |"
    )
    print(f"| connections closed by the server | {len(out['closed'])} {sorted(set(out['closed']))[:3]} |")
    print(f"| stale or lost audio bytes (after done, or out of seq/epoch) | {out['stale']} |")
    for name, key in (
        ("speech end -> first audio", "first_audio"),
        ("  of which speech end -> speech_stopped", "stopped"),
        ("  of which speech end -> response.created", "created"),
        ("  of which recognition (queue + decode)", "recognition"),
        ("barge-in onset -> duck event", "pause"),
    ):
        v = out[key]
        print(f"| {name}{': median / p95 / max' if v else ''} | {spread(v, q=(0.95, 1.0), unit='ms')} |")
    print(
        f"| baseline: onset -> duck decision, each interruption alone in process: median / p95 / max | "
        f"{spread(alone, q=(0.95, 1.0), unit='ms')} |"
    )
    if out["pause"] and alone:
        ratio = [float(np.percentile(out["pause"], q) / np.percentile(alone, q)) for q in (50, 95)]
        print(f"| duck under load against the baseline: median / p95 | {ratio[0]:.2f}x / {ratio[1]:.2f}x |")
    rss_after = " / ".join(str(a // 1024) for a, _ in after)
    print(
        f"| server RSS: baseline / peak / after each round | {base_rss // 1024} / {peak['rss'] // 1024} "
        f"/ {rss_after} MiB |"
    )
    print(f"| server RSS after {args.quiet:.0f} s with nobody connected | {quiet_rss // 1024} MiB |")
    print(
        f"| server tasks: baseline / peak / after each round | {base_tasks} / {peak['tasks']} / "
        f"{' / '.join(str(t) for _, t in after)} |"
    )
    log = server.log.read_text() if server.log else ""
    fallbacks = log.count("speaks with eSpeak NG")
    print(f"| replies spoken with eSpeak NG because the neural voice was at capacity | {fallbacks} |")
    if models:
        made = ", ".join(f"{m}: {n}" for m, n in models.items())
        print(f"| turn transcriptions (pause candidates and finals) by each Whisper model | {made} |")
    print(f"| recognition worker processes / their RSS | {len(workers)} / {worker_rss // 1024} MiB |")
    print(
        f"| CPU (cores busy): server / recognition workers / load clients | "
        f"{cpu[0]:.2f} / {cpu[1]:.2f} / {cpu[2]:.2f} of {os.cpu_count()} |"
    )


if __name__ == "__main__":
    asyncio.run(main())
