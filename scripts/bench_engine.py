"""The chat model's engine alone, nothing else running: how fast it writes one stream and
four at once, on one lane at one thread and at two, and on two lanes of one thread each,
and how long a prompt takes to read cold.

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
from typing import Any

import duplex.pipeline.thinkers.lane as lane_module
from duplex.pipeline.thinkers.chat_models import DEFAULT_MODEL, ProgressBar, resolve
from duplex.pipeline.thinkers.engine import Engine
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


if __name__ == "__main__":
    main()
