"""Real spoken conversations with the server's thinker: how right its answers are, and how
soon after the user stops the first audio of the reply arrives.

``duplex serve`` in its own process (every default but the thinker), a client paced at
real time that plays what it receives and acknowledges it, and the question set of
:mod:`lab.questions` in both parts (voices the project tunes on, and
held-out voices, a third of them through babble, a telephone line or a low level).
Each conversation is its own session offering two function tools; a tool call is
answered with the tool's output and the reply to that is judged too.

Thinkers, each measured in the same run: the echo (the baseline: it says the question
back), the default local model in process, and the same weights behind llama.cpp's own
server, started here, reached with ``--thinker openai`` (a "remote" endpoint on this
machine). For each turn, milestones from the true end of the user's speech on the
client's clock: the turn committed, the response created, the thinker's first token
and first clause (the server's own timings, placed on the response's start), and the
first audio received. A turn's answer is the reply the user heard: one cancelled with
nothing of it kept (the server took a pause for the turn's end and the user went on) is
counted apart, and the reply after it is scored and timed.

    python scripts/bench_conversation.py [--thinkers echo,local,remote] [--parts tune,heldout]
        [--only NAME,...] [--json PATH]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import statistics
import sys
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from duplex.app.clients.simulated import SimulatedClient
from duplex.pipeline.thinkers.chat_models import DEFAULT_MODEL, resolve
from duplex.pipeline.thinkers.local import SPEECH_PROMPT
from lab.llama import LlamaServer
from lab.questions import DIALOGUE, TOOLS, Spoken, Turn, call_passes, passes, spoken, spoken_by
from lab.servers import ServerProcess
from lab.stats import pct

TURN_LIMIT_S = 30.0
QUIET_S = 4.0
"""How long a command turn is listened to for a reply that must not come."""
MILESTONES = ("committed", "response", "first token", "first clause", "first audio")


@dataclass(slots=True)
class TurnResult:
    """One turn as the client lived it."""

    thinker: str
    split: str
    conversation: str
    kind: str
    voice: str
    condition: str
    said: str
    heard: str = ""
    answer: str = ""
    call: str = ""
    passed: bool = False
    underrun_ms: float = 0.0
    """Playback that stopped for want of audio, between the reply's first and last sample played."""
    at: dict[str, float] = field(default_factory=dict)
    """Milestone -> seconds after the end of the user's speech."""
    status: str = ""
    """The heard reply's ``response.done`` status, and why if it did not complete."""
    unheard: int = 0
    """Replies cancelled with nothing of them kept, before the one heard: the turn was
    taken in a pause and the user went on (the milestones are the heard reply's)."""


def _answer(response: dict[str, Any]) -> tuple[str, list[dict[str, Any]]]:
    """A finished response's words and its function calls."""
    words, calls = [], []
    for item in response.get("output") or []:
        if item.get("type") == "function_call":
            calls.append(item)
        for part in item.get("content") or []:
            words.append(part.get("transcript") or part.get("text") or "")
    return " ".join(w for w in words if w), calls


async def _until(sim: SimulatedClient, done: Any, limit: float) -> None:
    """Stream silence until ``done()`` or ``limit`` seconds have passed."""
    t0 = time.monotonic()
    while not done() and time.monotonic() - t0 < limit:
        await sim.silence(0.2)


def _of(sim: SimulatedClient, start: int, etype: str) -> list[dict[str, Any]]:
    return [r.event for r in sim.events[start:] if r.event["type"] == etype]


def _is_created(event: dict[str, Any], rid: str) -> bool:
    return event["type"] == "response.created" and event["response"]["id"] == rid


async def _response(sim: SimulatedClient, start: int) -> tuple[dict[str, Any] | None, int]:
    """Wait for the reply the user heard, the first response created after event
    ``start`` that was not cancelled with nothing of it kept, to finish and be played:
    its response.done, and how many replies were cancelled unheard before it (the server
    took a pause for the turn's end, heard the user go on before its first word and cut
    it to nothing at the user's onset: the reply to the whole turn is the one after)."""

    def created() -> list[dict[str, Any]]:
        return _of(sim, start, "response.created")

    unheard = 0
    while True:
        await _until(sim, lambda n=unheard: len(created()) > n, 8.0)  # type: ignore[misc]
        if len(created()) <= unheard:
            return None, unheard
        rid = created()[unheard]["response"]["id"]

        def finished(rid: str = rid) -> dict[str, Any] | None:
            return next((e["response"] for e in _of(sim, start, "response.done") if e["response"]["id"] == rid), None)

        def heard(rid: str = rid) -> bool:
            h = sim.heard.get(rid)
            return finished() is not None and (h is None or h.played >= h.received)

        await _until(sim, heard, TURN_LIMIT_S)
        done = finished()
        if done is not None and done.get("status") == "cancelled" and _answer(done) == ("", []):
            unheard += 1
            continue
        await sim.silence(0.4)
        return done, unheard


async def converse(port: int, sp: Spoken, thinker: str, delay: float = 0.0) -> list[TurnResult]:
    await asyncio.sleep(delay)  # conversations run side by side start a little apart, as people do
    sim = await SimulatedClient.open(port, realtime=True, ack_every_ms=100)
    await sim.start()
    await sim.send("session.update", session={"tools": list(TOOLS), "tool_choice": "auto"})
    await sim.silence(0.5)
    out = []
    for turn, pcm in zip(sp.conversation.turns, sp.turns, strict=True):
        c = sp.conversation
        res = TurnResult(thinker, sp.split, c.name, c.kind, sp.voice, sp.condition, turn.said)
        mark = len(sim.events)
        end = sim.input_samples + pcm.size
        await sim.stream(pcm)
        spoken_at = min(w for n, w in sim.sent_wall.items() if n >= end)
        if turn.expect is None:  # a command: nothing may be said back
            await _until(sim, lambda m=mark: bool(_of(sim, m, "response.created")), QUIET_S)  # type: ignore[misc]
            res.passed = not _of(sim, mark, "response.created")
            res.heard = " ".join(
                e["transcript"] for e in _of(sim, mark, "conversation.item.input_audio_transcription.completed")
            )
            out.append(res)
            continue
        done, res.unheard = await _response(sim, mark)
        heard = _of(sim, mark, "conversation.item.input_audio_transcription.completed")
        res.heard = " ".join(e["transcript"] for e in heard[: res.unheard + 1])
        if done is not None:
            res.answer, calls = _answer(done)
            _milestones(sim, mark, done, spoken_at, res)
            if turn.tool is not None:
                call = calls[0] if calls else None
                res.call = f"{call['name']}({call['arguments']})" if call else ""
                ok = call is not None and call_passes(turn, call["name"], call["arguments"])
                if call is not None:
                    await sim.send(
                        "conversation.item.create",
                        item={
                            "type": "function_call_output",
                            "call_id": call["call_id"],
                            "output": json.dumps(turn.output),
                        },
                    )
                    second = len(sim.events)
                    await sim.send("response.create")
                    after, _ = await _response(sim, second)
                    res.answer = _answer(after)[0] if after else ""
                res.passed = ok and turn.after is not None and passes(Turn(turn.said, turn.after), res.answer)
            else:
                res.passed = passes(turn, res.answer)
        out.append(res)
    await sim.stop()
    await sim.client.close()
    return out


def _underrun_ms(sim: SimulatedClient, rid: str) -> float:
    """How long the reply's playback stood still while more of it was still to come."""
    h = sim.heard.get(rid)
    if h is None or not h.history:
        return 0.0
    played = [p for _, p in h.history]
    last = played.index(max(played))  # the first frame at which everything was played
    stalls = sum(1 for a, b in zip(played[:last], played[1 : last + 1], strict=True) if b == a and a > 0)
    return stalls * 1000 * sim.frame / sim.input_rate


def _milestones(sim: SimulatedClient, mark: int, done: dict[str, Any], spoken_at: float, res: TurnResult) -> None:
    rid = done["id"]
    res.status = " ".join(str(x) for x in (done.get("status"), done.get("status_details") or "") if x)
    res.underrun_ms += _underrun_ms(sim, rid)
    at = next(i for i, r in enumerate(sim.events) if i >= mark and _is_created(r.event, rid))
    created = sim.events[at].wall
    commits = [r.wall for r in sim.events[mark:at] if r.event["type"] == "input_audio_buffer.committed"]
    committed = commits[-1] if commits else None  # the turn the heard reply answers
    first = next(
        (
            r.wall
            for r in sim.events[mark:]
            if r.event["type"].endswith("audio.delta") and r.event.get("response_id") == rid
        ),
        None,
    )
    t = done.get("timings") or {}
    if committed is not None:
        res.at["committed"] = committed - spoken_at
    if created is not None:
        res.at["response"] = created - spoken_at
        start = t.get("response_start", 0.0)
        for name, key in (("first token", "thinker_first_text"), ("first clause", "thinker_first_clause")):
            if key in t:
                res.at[name] = created - spoken_at + (t[key] - start) / 1000
    if first is not None:
        res.at["first audio"] = first - spoken_at


def _together(port: int, items: list[Spoken], thinker: str, parallel: int) -> list[TurnResult]:
    """Conversations side by side (one after another when ``parallel`` is 1)."""

    async def run() -> list[TurnResult]:
        if parallel == 1:
            return [r for sp in items for r in await converse(port, sp, thinker)]
        groups = await asyncio.gather(*(converse(port, sp, thinker, 0.7 * i) for i, sp in enumerate(items)))
        return [r for g in groups for r in g]

    return asyncio.run(run())


def _cell(values: list[float]) -> str:
    if not values:
        return "-"
    return f"{statistics.median(values):.2f} / {pct(values, 0.9):.2f}"


def transcript(results: list[TurnResult]) -> str:
    """The dialogue as it went: what was heard, what was said back, and how soon."""
    lines = ["| # | the user said | Duplex heard | Duplex said | first audio s | right |", "|---|---|---|---|---|---|"]
    for i, r in enumerate(results, 1):
        said = (f"[{r.call}] " if r.call else "") + (r.answer or "(nothing)")
        first = f"{r.at['first audio']:.2f}" if "first audio" in r.at else "-"
        lines.append(f"| {i} | {r.said} | {r.heard} | {said} | {first} | {'yes' if r.passed else 'no'} |")
    return "\n".join(lines)


def report(results: list[TurnResult]) -> str:
    lines = [
        "| thinker | part | answers right | "
        + " | ".join(f"{m} (median / p90 s)" for m in MILESTONES)
        + " | first audio p95 s | replies that ran dry | turns taken in a pause (a reply cancelled unheard) |",
        "|---" * (6 + len(MILESTONES)) + "|",
    ]
    keys = sorted({(r.thinker, r.split) for r in results}, key=lambda k: (k[0], k[1] != "heldout"))
    for thinker, split in keys:
        rs = [r for r in results if (r.thinker, r.split) == (thinker, split)]
        cells = [_cell([r.at[m] for r in rs if m in r.at]) for m in MILESTONES]
        first = [r.at["first audio"] for r in rs if "first audio" in r.at]
        cells.append(f"{pct(first, 0.95):.2f}" if first else "-")
        cells.append(f"{sum(r.underrun_ms > 0 for r in rs)}/{len(rs)}")
        cells.append(f"{sum(r.unheard > 0 for r in rs)}/{len(rs)}")
        right = sum(r.passed for r in rs)
        lines.append(f"| {thinker} | {split} | {right}/{len(rs)} | " + " | ".join(cells) + " |")
    lines.append("")
    lines.append("| thinker | part | " + " | ".join(sorted({r.kind for r in results})) + " |")
    lines.append("|---" * (2 + len({r.kind for r in results})) + "|")
    for thinker, split in keys:
        rs = [r for r in results if (r.thinker, r.split) == (thinker, split)]
        cells = []
        for kind in sorted({r.kind for r in results}):
            k = [r for r in rs if r.kind == kind]
            cells.append(f"{sum(r.passed for r in k)}/{len(k)}")
        lines.append(f"| {thinker} | {split} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--thinkers", default="echo,local,remote")
    ap.add_argument("--parts", default="tune,heldout")
    ap.add_argument("--only", default="", help="conversation names, comma-separated (default: all)")
    ap.add_argument("--serve", default="", help="more duplex serve flags for every thinker")
    ap.add_argument("--json", default="artifacts/bench_conversation.json")
    ap.add_argument("--parallel", type=int, default=1, help="conversations at once")
    ap.add_argument(
        "--dialogue", default="", metavar="VOICE", help="instead: the ten-turn dialogue in one voice, as a transcript"
    )
    ap.add_argument(
        "--warm", type=int, default=4, help="conversations run first, unmeasured (one per slot: each reads the tools)"
    )
    args = ap.parse_args()
    only = tuple(args.only.split(",")) if args.only else None
    if args.dialogue:
        dialogue = spoken_by(DIALOGUE, args.dialogue)
        sets = {dialogue.split: [dialogue]}
        args.warm = 0
    else:
        sets = {part: spoken(part, only) for part in args.parts.split(",")}
    results: list[TurnResult] = []
    extra = args.serve.split()
    for thinker in args.thinkers.split(","):
        llama: LlamaServer | None = None
        if thinker == "echo":
            flags = ["--thinker", "echo"]
        elif thinker == "local":
            flags = []
        elif thinker == "remote":
            llama = LlamaServer(resolve(DEFAULT_MODEL))
            llama.start()
            flags = ["--thinker", "openai", "--thinker-url", llama.url, "--thinker-model", llama.alias]
            flags += ["--system-prompt", SPEECH_PROMPT]
        else:
            sys.exit(f"unknown thinker {thinker!r}")
        try:
            with ServerProcess(
                *flags, *extra, log=Path("artifacts") / f"bench_conversation_{thinker}.log"
            ).running() as srv:
                for part, items in sets.items():
                    if args.warm:  # one conversation per slot first, unmeasured: every slot has read the tools
                        _together(srv.port, items[: args.warm], thinker, 1)
                    for at in range(0, len(items), args.parallel):
                        got = _together(srv.port, items[at : at + args.parallel], thinker, args.parallel)
                        for r in got:
                            mark = "ok " if r.passed else "BAD"
                            print(
                                f"{mark} {thinker:6s} {part:7s} {r.voice:22s} {r.condition:8s} heard {r.heard!r} -> "
                                f"{r.call + ' ' if r.call else ''}{r.answer!r} "
                                f"{r.at.get('first audio', float('nan')):.2f}s"
                                + (f" (after {r.unheard} reply cancelled unheard)" if r.unheard else ""),
                                flush=True,
                            )
                        results += got
        finally:
            if llama is not None:
                llama.stop()
    print()
    if args.dialogue:
        print(transcript(results))
    print(report(results))
    Path(args.json).parent.mkdir(parents=True, exist_ok=True)
    Path(args.json).write_text(json.dumps([asdict(r) for r in results], indent=1))


if __name__ == "__main__":
    main()
