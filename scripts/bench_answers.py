"""The chat models and prompts the local thinker could run, on text: how right, how fast.

Each model runs in process exactly as ``--thinker local`` runs it (ik_llama.cpp through
the engine, 2 threads, the slots warmed with the speech prompt), and answers the
question set as text (no voice, no recognition: the model alone). Printed per model:
load time, memory added, first token for the tool-laden prompt read cold and for a
follow-up with the conversation cached, generated tokens per second, and answers right
(each kind apart). ``--set dev`` is the set to tune prompts and settings on; the default
set is the measure (see :mod:`lab.questions`).

    python scripts/bench_answers.py [--models NAME|PATH,...] [--set dev|main] [--prompt FILE]
        [--temperature T]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import statistics
import time
from pathlib import Path
from typing import Any

from duplex.pipeline.segmenter import Segmenter
from duplex.pipeline.thinker import ThinkRequest
from duplex.pipeline.thinkers.chat_models import DEFAULT_MODEL
from duplex.pipeline.thinkers.local import SPEECH_PROMPT, LocalChatThinker
from duplex.pipeline.tools import ToolCallDelta
from lab.procs import rss_kib
from lab.questions import (
    CONVERSATIONS,
    DEV_CONVERSATIONS,
    TOOLS,
    Conversation,
    Turn,
    call_passes,
    passes,
)


async def ask(
    thinker: LocalChatThinker, messages: list[dict[str, Any]], key: str, n: int
) -> tuple[str, list[ToolCallDelta], float]:
    """The answer's words, its calls, and the time to its first piece."""
    t0 = time.monotonic()
    first = None
    words, calls = [], []
    request = ThinkRequest(f"{key}-{n}", tuple(messages), tools=TOOLS, conversation=key)
    async for piece in thinker.think(request):
        first = first or time.monotonic() - t0
        if isinstance(piece, ToolCallDelta):
            calls.append(piece)
        else:
            words.append(piece)
    return "".join(words), calls, first or float("nan")


def merged(calls: list[ToolCallDelta]) -> tuple[str, str, str]:
    if not calls:
        return "", "", ""
    return calls[0].call_id, calls[0].name, "".join(c.arguments for c in calls if c.index == calls[0].index)


async def run(
    model: str, prompt: str, temperature: float, convs: tuple[Conversation, ...], verbose: bool, repeat: int = 1
) -> dict[str, Any]:
    before = rss_kib(os.getpid()) / 1024
    t0 = time.monotonic()
    thinker = LocalChatThinker(model, system_prompt=prompt, temperature=temperature, slots=2)
    await thinker.start()
    load = time.monotonic() - t0
    rss = rss_kib(os.getpid()) / 1024 - before
    right: dict[str, list[bool]] = {}
    cold, cached, speed, clause = [], [], [], []
    for i, conv in enumerate(convs * repeat):
        messages: list[dict[str, Any]] = []
        for j, turn in enumerate(conv.turns):
            if turn.expect is None:  # a command: the server obeys it, the model never sees it
                continue
            messages.append({"role": "user", "content": turn.said})
            text, calls, first = await ask(thinker, messages, f"{model}-{i}", j)
            t = thinker.last_timings
            if t.get("predicted_ms"):
                speed.append(t["predicted_n"] / t["predicted_ms"] * 1000)
            (cached if j else cold).append(first)
            call_id, name, args = merged(calls)
            if turn.tool is not None:
                ok = call_passes(turn, name, args)
                if name:
                    messages.append(
                        {
                            "role": "assistant",
                            "content": text,
                            "tool_calls": [
                                {"id": call_id, "type": "function", "function": {"name": name, "arguments": args}}
                            ],
                        }
                    )
                    messages.append({"role": "tool", "tool_call_id": call_id, "content": json.dumps(turn.output)})
                    text, _, _ = await ask(thinker, messages, f"{model}-{i}", j + 10)
                ok = ok and passes(Turn(turn.said, turn.after), text)
            else:
                ok = passes(turn, text)
                if text:  # how many words the voice waits for before it can start
                    seg = Segmenter(first_words=0)  # the first clause, as a slow model would have it
                    first = seg.feed(text + " ") or seg.finish()
                    clause.append(len((first[0].text if first else text).split()))
            messages.append({"role": "assistant", "content": text})
            right.setdefault(conv.kind, []).append(ok)
            if verbose:
                print(
                    f"{'ok ' if ok else 'BAD'} {turn.said!r} -> {name + args + ' ' if name else ''}{text!r}", flush=True
                )
    await thinker.aclose()
    return {
        "model": model,
        "load_s": load,
        "rss_mb": rss,
        "first_token_cold_s": statistics.median(cold),
        "first_token_cached_s": statistics.median(cached) if cached else float("nan"),
        "tokens_per_s": statistics.median(speed) if speed else float("nan"),
        "first_clause_words": statistics.median(clause) if clause else float("nan"),
        "right": {k: (sum(v), len(v)) for k, v in right.items()},
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--models", default=DEFAULT_MODEL)
    ap.add_argument("--set", choices=("dev", "main"), default="main")
    ap.add_argument("--prompt", default=None, help="a file holding the system prompt (default: the shipped one)")
    ap.add_argument("--temperature", type=float, default=0.7)
    ap.add_argument("--quiet", action="store_true")
    ap.add_argument("--debug", action="store_true", help="the thinker's own log (each call's probability)")
    ap.add_argument("--repeat", type=int, default=1, help="ask the whole set this many times (sampling varies)")
    args = ap.parse_args()
    if args.debug:
        import logging

        logging.basicConfig(level=logging.DEBUG, format="%(message)s")
    prompt = Path(args.prompt).read_text().strip() if args.prompt else SPEECH_PROMPT
    convs = DEV_CONVERSATIONS if args.set == "dev" else CONVERSATIONS
    rows = [
        asyncio.run(run(m, prompt, args.temperature, convs, not args.quiet, args.repeat))
        for m in args.models.split(",")
    ]
    kinds = sorted({k for r in rows for k in r["right"]})
    print(
        "| model | load s | RSS MB | first token cold / cached s | tokens/s | first clause, words | right | "
        + " | ".join(kinds)
        + " |"
    )
    print("|---" * (7 + len(kinds)) + "|")
    for r in rows:
        total = sum(a for a, _ in r["right"].values()), sum(b for _, b in r["right"].values())
        cells = [f"{a}/{b}" for a, b in (r["right"].get(k, (0, 0)) for k in kinds)]
        print(
            f"| {Path(r['model']).name} | {r['load_s']:.1f} | {r['rss_mb']:.0f} | {r['first_token_cold_s']:.2f} / "
            f"{r['first_token_cached_s']:.2f} | {r['tokens_per_s']:.1f} | {r['first_clause_words']:.0f} | "
            f"{total[0]}/{total[1]} | " + " | ".join(cells) + " |"
        )


if __name__ == "__main__":
    main()
