"""Turn-taking metrics modelled on Full-Duplex-Bench, over generated replay scenarios.

Four behaviours, each from many scenario variants (phrases x eSpeak voices x
timing), replayed by the simulated client against the real server on loopback:

* pause handling: the user pauses mid-sentence for less than the silence window;
  take-over rate (TOR, lower is better) = share of pauses the server answered into.
* backchannel: the user says "uh huh" and the like over a reply; TOR (lower is
  better) = share of replies that were stopped for good.
* smooth turn-taking: a question; TOR (higher is better) and latency from the end
  of the user's speech to the reply's first audio at the client.
* user interruption: the user talks over a reply; TOR (higher is better) = share
  where the reply stopped and the interruption was answered; latency from the end
  of the interruption to the new reply's first audio; stop latency from its onset
  to the old reply going silent at the client.

Times are on the input clock (audio time), as a listener experiences them. The
fast replays sync after every frame, which stops the client's clock while the
server recognises speech, so their latencies leave processing out; a sample of
turns and interruptions is therefore also replayed paced at real time, and those
are the latencies to compare. The baseline is the same run's end-of-turn
detection (end of speech to speech_stopped at the client): the floor under every
spoken turn with server VAD.

    python scripts/bench_turntaking.py [--quick]
"""

from __future__ import annotations

import argparse
import asyncio
import statistics

from duplex.app.clients.replay import Runner
from duplex.app.clients.scenario import parse
from duplex.app.clients.verdicts import Result
from duplex.app.harness.anchors import ANCHORS
from duplex.app.harness.servers import serving
from duplex.app.harness.stats import median_p95
from duplex.pipeline.backends import Backends
from duplex.pipeline.detectors.silero_vad import SileroVad
from duplex.pipeline.recognizers.pocketsphinx import PocketsphinxRecognizer
from duplex.pipeline.talkers.espeak import EspeakTalker
from duplex.pipeline.vocoders.pcm import PcmVocoder

VOICES = ["en-us+klatt2", "en-us", "en-us+m3", "en-us+f3"]
PAUSES = [
    ("I would like", "to order a pizza"),
    ("please tell me", "a story about a dog"),
    ("turn on", "the lights in the kitchen"),
    ("what is", "the weather like today"),
]
QUESTIONS = [
    "hello how are you today",
    "the weather is nice and sunny",
    "what time is it now",
    "can you hear me",
    "please tell me a story",
]
BACKCHANNELS = ["uh huh", "mhm", "yeah", "okay", "hm", "right"]
INTERRUPTIONS = [
    "wait, please stop talking now",
    "hold on a second",
    "no, that is not what I asked",
    "excuse me, I have a question",
]
REPLY = (
    "This is a reply that goes on for a while, sentence after sentence. It tells you about "
    "the weather, the time, and many other things that you may or may not want to hear about."
)


def scenarios(quick: bool) -> dict[str, list]:
    voices = VOICES[:2] if quick else VOICES
    out: dict[str, list] = {"pause": [], "backchannel": [], "turn": [], "interruption": []}
    for i, (a, b) in enumerate(PAUSES):
        for v in voices:
            for gap in (0.25, 0.4):
                out["pause"].append(
                    parse(
                        {
                            "step": [
                                {"say": a, "voice": v},
                                {"silence": gap},
                                {"say": b, "voice": v},
                                {"wait": "answered", "timeout": 15},
                            ]
                        },
                        name=f"pause {i} {v} {gap}",
                    )
                )
    for w in BACKCHANNELS:
        for v in voices:
            out["backchannel"].append(
                parse(
                    {
                        "step": [
                            {"message": REPLY},
                            {"wait": "heard", "seconds": 1.5},
                            {"say": w, "voice": v},
                            {"wait": "idle", "timeout": 30},
                        ]
                    },
                    name=f"backchannel {w} {v}",
                )
            )
    for q in QUESTIONS:
        for v in voices:
            out["turn"].append(
                parse({"step": [{"say": q, "voice": v}, {"wait": "answered", "timeout": 15}]}, name=f"turn {q} {v}")
            )
    for q in INTERRUPTIONS:
        for v in voices:
            for at in (0.0, 1.5, 4.0):
                out["interruption"].append(
                    parse(
                        {
                            "step": [
                                {"message": REPLY},
                                {"wait": "heard", "seconds": at} if at else {"wait": "first_audio"},
                                {"say": q, "voice": v},
                                {"wait": "answered", "timeout": 15},
                            ]
                        },
                        name=f"interrupt {q} {v} {at}",
                    )
                )
    return out


def rate(flags: list[bool]) -> float:
    return sum(flags) / len(flags) if flags else float("nan")


def judge(kind: str, r: Result) -> bool:
    """Did the server take the turn in this scenario?"""
    statuses = [x["status"] for x in r.replies]
    if kind == "pause":
        # Taking over a pause = answering the first half: a reply playing when the
        # second half began, or a reply of its own to the first half.
        return len(r.replies) > 1 or any(seg["during_reply"] for seg in r.segments[1:])
    if kind == "backchannel":
        return "cancelled" in statuses
    if kind == "turn":
        return "completed" in statuses
    if kind == "interruption":  # the reply stopped for good and the interruption was answered
        return statuses[:1] == ["cancelled"] and len(statuses) >= 2
    return False


def stat(values: list[float]) -> str:
    """Median / p95 in seconds of latencies in ms."""
    return median_p95(values, scale=1 / 1000, digits=3)


async def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--realtime-sample", type=int, default=8, help="turns and interruptions replayed at real time")
    args = ap.parse_args()
    talker = EspeakTalker()
    recognizer = PocketsphinxRecognizer(workers=2)
    results: dict[str, list[Result]] = {}
    async with serving(Backends(talker, PcmVocoder(), voice_activity=SileroVad(), recognizer=recognizer)) as server:
        runner = Runner(f"ws://127.0.0.1:{server.port}/v1/realtime", talker=talker)
        groups = scenarios(args.quick)
        for kind, group in groups.items():
            results[kind] = await runner.run_many(group)
        live = Runner(runner.url, talker=talker, realtime=True)
        for kind in ("turn", "interruption"):
            step = max(1, len(groups[kind]) // args.realtime_sample)
            results[f"{kind} (real time)"] = await live.run_many(groups[kind][::step][: args.realtime_sample])
    recognizer.close()
    tor = {k: rate([judge(k, r) for r in v]) for k, v in results.items() if "(" not in k}
    rt_turn = [x for r in results["turn (real time)"] for x in r.metrics["response"]]
    rt_int = [x for r in results["interruption (real time)"] for x in r.metrics["interruption"]]
    rt_stop = [x for r in results["interruption (real time)"] for x in r.metrics["stop"]]
    rt_eot = [
        x
        for k in ("turn (real time)", "interruption (real time)")
        for r in results[k]
        for x in r.metrics["end_of_turn"]
    ]
    lat = {
        "turn": [x for r in results["turn"] for x in r.metrics["response"]],
        "interruption": [x for r in results["interruption"] for x in r.metrics["interruption"]],
        "stop": [x for r in results["interruption"] for x in r.metrics["stop"]],
        "end_of_turn": [x for k in ("turn", "interruption") for r in results[k] for x in r.metrics["end_of_turn"]],
    }
    stale = sum(r.stale_bytes for v in results.values() for r in v)
    floor = statistics.median(lat["end_of_turn"]) if lat["end_of_turn"] else float("nan")
    n = {k: len(v) for k, v in results.items()}
    print(
        f"\nTurn-taking (Full-Duplex-Bench style): {n['pause']} pauses, {n['backchannel']} backchannels, "
        f"{n['turn']} turns, {n['interruption']} interruptions; latencies median / p95 in seconds, audio time\n"
    )
    print(
        "| system | pause TOR ↓ | backchannel TOR ↓ | turn TOR ↑ | turn latency ↓ | interruption TOR ↑ "
        "| interruption latency ↓ | stop latency ↓ |"
    )
    print("|---|---|---|---|---|---|---|---|")
    print(
        f"| **Duplex, real-time client** ({len(rt_turn)} turns, {len(rt_int)} interruptions) | | | | "
        f"{stat(rt_turn)} | | {stat(rt_int)} | {stat(rt_stop)} |"
    )
    print(
        f"| **Duplex, fast replay** | {tor['pause']:.3f} | {tor['backchannel']:.3f} | {tor['turn']:.3f} | "
        f"{stat(lat['turn'])} | {tor['interruption']:.3f} | {stat(lat['interruption'])} | {stat(lat['stop'])} |"
    )
    for name, (p, b, t, tl, i, il) in ANCHORS.items():
        print(f"| {name} (published) | {p:.3f} | {b:.3f} | {t:.3f} | {tl:.3f} | {i:.3f} | {il:.3f} | |")
    turn_med = statistics.median(rt_turn) if rt_turn else float("nan")
    eot = statistics.median(rt_eot) if rt_eot else float("nan")
    print(
        f"\nBaseline in this run: end of speech -> end-of-turn decision (speech_stopped) {floor:.0f} ms median in "
        f"the fast replay, {eot:.0f} ms at real time (the 500 ms silence window plus Silero's tail); the real-time "
        f"turn latency is {turn_med / eot:.2f}x that: recognition and the first chunk add {turn_med - eot:.0f} ms. "
        f"Stale audio bytes over the whole run: {stale}."
    )
    failures = [(r.name, r.failures) for v in results.values() for r in v if not r.passed]
    if failures:
        print(f"{len(failures)} scenario(s) hit a timeout or error: {failures[:3]}")


if __name__ == "__main__":
    asyncio.run(main())
