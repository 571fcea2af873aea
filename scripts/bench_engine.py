"""The chat model's engine alone, nothing else running: how fast it writes one stream and
four at once, on one lane at one thread and at two, and on two lanes of one thread each,
how long a prompt takes to read cold, and how soon a reply starting beside a long one
already speaking in its lane writes its first words (``AHEAD_S`` in ``thinkers/schedule.py``).

This is the machine's own ceiling for the conversation benchmarks: four conversations
at once cannot get their first clause sooner than its tokens take at four streams (two
lanes of one thread each while several conversations talk: ``SHARED_S`` in the lane).
The thread count is held fixed for each row. ``OMP_WAIT_POLICY`` and ``GOMP_SPINCOUNT`` in
the environment reach the engine's OpenMP threads (how long they spin at each barrier).

    python scripts/bench_engine.py [--model PATH.gguf] [--repeat 3] [--tokens 48]
"""

from __future__ import annotations

import argparse
import threading
import time
from typing import Any

import duplex.pipeline.thinkers.lane as lane_module
import duplex.pipeline.thinkers.schedule as schedule
from duplex.pipeline.thinkers.chat_models import DEFAULT_MODEL, ProgressBar, resolve
from duplex.pipeline.thinkers.engine import Engine
from lab.stats import pct
from lab.tables import header, spread

PROMPT = "Write a long story about dragon number {}."


def run(engine: Engine, streams: int, tokens: int, offset: int) -> list[dict[str, Any]]:
    """``streams`` requests at once, one a slot, each read cold (a new prompt) and ``tokens`` long."""
    timings: list[dict[str, Any]] = []

    def one(slot: int) -> None:
        msgs = [{"role": "user", "content": PROMPT.format(offset + slot)}]
        body = {"messages": msgs, "max_tokens": tokens, "id_slot": slot, "temperature": 0.0, "cache_prompt": False}
        timings.append(engine.handle_chat_completions(body)["timings"])

    workers = [threading.Thread(target=one, args=(s,)) for s in range(streams)]
    for w in workers:
        w.start()
    for w in workers:
        w.join()
    return timings


def beside(engine: Engine, ahead_s: float, tokens: int) -> tuple[float, float, float]:
    """A long reply in slot 0, then, once its words are well ahead of a voice, a reply in
    slot 1 of the same lane: seconds to the new one's first token and to its ``STARTING``-th,
    and the long one's longest wait between two tokens meanwhile."""
    schedule.AHEAD_S = ahead_s
    marks: dict[str, list[float]] = {"long": [], "new": []}
    going = threading.Event()

    def ask(slot: int, who: str, n: int, prompt: str) -> None:
        def on_chunk(chunk: dict[str, Any]) -> bool:
            if chunk["choices"][0]["delta"].get("content") is not None:
                marks[who].append(time.monotonic())
                if who == "long" and len(marks[who]) == tokens:
                    going.set()
            return False

        body = {"messages": [{"role": "user", "content": prompt}], "max_tokens": n, "id_slot": slot, "stream": True}
        engine.handle_chat_completions({**body, "temperature": 0.0, "cache_prompt": False}, on_chunk)
        going.set()

    long = threading.Thread(target=ask, args=(0, "long", 4 * tokens, "Count slowly from one to two hundred."))
    long.start()
    going.wait()
    if len(marks["long"]) < tokens:
        raise RuntimeError("the long reply ended before it was well ahead")
    asked = time.monotonic()
    ask(1, "new", schedule.STARTING, "How many legs does a spider have? Answer in one long sentence.")
    long.join()
    new = marks["new"]
    during = [t for t in marks["long"] if asked <= t <= new[-1]]
    gaps = [b - a for a, b in zip([asked, *during], [*during, new[-1]], strict=True)]
    return new[0] - asked, new[-1] - asked, max(gaps)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--model", default=DEFAULT_MODEL, help="a packaged model's name or a .gguf path")
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--tokens", type=int, default=48)
    args = ap.parse_args()
    path = resolve(args.model, None, ProgressBar(f"joining {args.model}"))
    lane_module.SHARED_S = 0.0  # the thread count each row names, however many slots ask
    print(
        header(
            "lanes x threads", "streams", "ms a token, each stream (median / p95)", "prompt read cold, one stream (ms)"
        )
    )
    for lanes, threads in ((1, 2), (1, 1), (2, 1)):
        engine = Engine(str(path), slots=4, context=1024, threads=threads, lanes=lanes)
        try:
            run(engine, 1, 4, 100)  # warm
            for streams in (1, 4):
                per_token, prompt, n = [], [], 0
                for r in range(args.repeat):
                    for t in run(engine, streams, args.tokens, r * 10):
                        per_token.append(t["predicted_ms"] / max(t["predicted_n"], 1))
                        if streams == 1:
                            prompt.append(t["prompt_ms"])
                            n = t["prompt_n"]
                cold = f"{spread(prompt)} ({n} tokens)" if prompt else "-"
                print(f"| {lanes} x {threads} | {streams} | {spread(per_token, digits=1)} | {cold} |")
        finally:
            engine.close()
    print()
    first = f"first {schedule.STARTING} tokens"
    print(header("a reply starting", "first token (median / p95 s)", first, "the long reply's longest wait"))
    engine = Engine(str(path), slots=2, context=1024, threads=1, lanes=1)
    try:
        rule = schedule.AHEAD_S
        for name, ahead in ((f"go first (AHEAD_S {rule:g} s)", rule), ("share every step", float("inf"))):
            runs = [beside(engine, ahead, args.tokens) for _ in range(args.repeat)]
            first, words, wait = ([r[i] for r in runs] for i in range(3))
            print(f"| {name} | {spread(first)} | {spread(words)} | max {pct(wait, 1.0):.2f} s |")
        schedule.AHEAD_S = rule
    finally:
        engine.close()


if __name__ == "__main__":
    main()
