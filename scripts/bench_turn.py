"""A spoken turn's time to first audio, broken into its parts.

``duplex serve`` in its own process on loopback, with the built-in voice, Silero
VAD, pocketsphinx and a thinker: the tiny random chat model on a real
in-process vLLM engine (``--thinker vllm``), and the echo thinker as the baseline
measured in the same run. A client paced at real
time speaks eSpeak NG questions; each turn's time from the true end of the
user's speech to the reply's first audio at the client is split into:

* end-of-turn detection: speech end -> ``speech_stopped`` (the silence window);
* recognition: pocketsphinx on the committed turn (``recognition_ms``);
* thinker first clause: response start -> the first clause ready to speak;
* talker first chunk: first clause -> the talker's first audio;
* vocoder, pacing and send: -> the first audio delta leaves the server;
* the rest (network, client, hand-offs): what remains of the total.

All on the wall clock: from when the frame holding the end of speech was sent.

    python scripts/bench_turn.py [--turns N]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import statistics
import tempfile
from pathlib import Path

from duplex.app.clients.simulated import SimulatedClient
from duplex.app.clients.sounds import mix, silence, speech, trim
from duplex.pipeline.talkers.espeak import EspeakTalker
from lab.models import build_tiny_llama, text_token_ids
from lab.servers import ServerProcess
from lab.tables import spread

QUESTIONS = [
    "hello how are you today",
    "the weather is nice and sunny",
    "what time is it now",
    "can you hear me",
    "please tell me a story",
    "turn on the lights in the kitchen",
]
PARTS = [
    "end-of-turn detection",
    "recognition",
    "thinker first clause",
    "talker first chunk",
    "vocoder, pacing and send",
    "network, client and hand-offs",
    "total: speech end -> first audio",
]


async def turns(port: int, talker: EspeakTalker, n: int) -> list[dict[str, float]]:
    out = []
    for i in range(n):
        sim = await SimulatedClient.open(port, realtime=True, ack_every_ms=None)
        await sim.start()
        words = trim(await speech(talker, QUESTIONS[i % len(QUESTIONS)]), 24000)
        await sim.silence(0.4)
        end = sim.input_samples + words.size
        await sim.stream(mix(words, silence(5.0)))
        await sim.stop()
        await sim.client.close()
        ev = {r.event["type"]: r for r in reversed(sim.events)}  # first of each type
        if "response.output_audio.delta" not in ev or "response.done" not in ev:
            continue
        stopped, heard = (
            ev["input_audio_buffer.speech_stopped"],
            ev["conversation.item.input_audio_transcription.completed"],
        )
        first = ev["response.output_audio.delta"]
        t = [r.event["response"] for r in sim.of_type("response.done")][0].get("timings", {})
        # Wall clock throughout: when the frame holding the end of speech left the client.
        spoken = min(w for n, w in sim.sent_wall.items() if n >= end)
        total = (first.wall - spoken) * 1000
        parts = {
            "end-of-turn detection": (stopped.wall - spoken) * 1000,
            "recognition": heard.event.get("recognition_ms", 0.0),
            "thinker first clause": t.get("thinker_first_clause", 0.0),
            "talker first chunk": t.get("talker_first_chunk", 0.0) - t.get("thinker_first_clause", 0.0),
            "vocoder, pacing and send": t.get("first_audio", 0.0) - t.get("talker_first_chunk", 0.0),
        }
        parts["network, client and hand-offs"] = total - sum(parts.values())
        parts["total: speech end -> first audio"] = total
        out.append(parts)
    return out


async def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--turns", type=int, default=8)
    args = ap.parse_args()
    talker = EspeakTalker()
    model = build_tiny_llama(Path(tempfile.mkdtemp()) / "tiny")
    setups = {
        "echo (baseline)": ["--thinker", "echo"],
        "tiny vLLM chat model": [
            "--thinker",
            "vllm",
            "--thinker-model",
            str(model),
            "--max-tokens",
            "24",
            "--temperature",
            "1.0",
            "--thinker-sampling",
            json.dumps({"allowed_token_ids": text_token_ids()}),
        ],
    }
    results = {}
    for name, extra in setups.items():
        with ServerProcess(*extra).running() as server:
            results[name] = await turns(server.port, talker, args.turns)
    base = results["echo (baseline)"]
    print(
        f"\nTime to first audio of a spoken turn, split into parts (ms; median / p95 over {args.turns} turns, "
        "server in its own process, client paced at real time, loopback, this CPU)\n"
    )
    print("| part | " + " | ".join(results) + " |")
    print("|---|" + "---|" * len(results))
    for part in PARTS:
        cells = [spread([r[part] for r in rows]) for rows in results.values()]
        print(f"| {part} | " + " | ".join(cells) + " |")
    lm = [r["total: speech end -> first audio"] for r in results["tiny vLLM chat model"]]
    echo = [r["total: speech end -> first audio"] for r in base]
    print(
        f"\nWith the language model in the loop a turn takes {statistics.median(lm) / statistics.median(echo):.2f}x "
        "the echo baseline's time to first audio."
    )


if __name__ == "__main__":
    asyncio.run(main())
