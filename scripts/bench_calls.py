"""WebRTC calls against the WebSocket, on one server in its own process (``duplex serve
--thinker echo``, the default voice), over loopback.

* first audio after ``response.create`` (a typed message): the WebSocket's first audio
  delta received; the call's ``output_audio_buffer.started`` (the first packet of the
  reply leaves the server's track) and its first sound on the caller's track (after
  aiortc's own jitter buffer, 80 ms, or ``--caller-buffer`` packets of 20 ms: Chromium's
  held 29 ms on loopback, ``tests/test_browser.py``).
* barge-in stop: a caller talks over a reply (a natural voice, the held-out part of
  the corpus); from the true onset of the speech at the caller's microphone to the
  reply falling quiet for good (ducked at -24 dB or cut: 300 ms below an eighth of its
  level) on the caller's speaker; and to the server's ``speech_started`` on the channel.
* the cut: ``audio_end_ms`` against what the caller had heard when it began.

    python scripts/bench_calls.py [--trials 10] [--caller-buffer 2]
"""

from __future__ import annotations

import argparse
import asyncio
import time

import numpy as np

from duplex.app.clients.realtime import RealtimeClient
from duplex.app.edge.calls import jitter_buffers
from lab.caller import FRAME, RATE, Caller
from lab.servers import ServerProcess
from lab.tables import header, row
from lab.voices import load_corpus, resample

TEXT = " ".join(f"This is sentence number {i} of a fairly long reply." for i in range(6))


async def socket_first_audio(port: int) -> float:
    c = await RealtimeClient.connect(port, keep=False, id_prefix="b")
    await c.send("session.update", session={"turn_detection": None})
    await c.until("session.updated")
    await c.say(TEXT)
    t0 = time.perf_counter()
    await c.send("response.create")
    while True:
        ev = await c.recv()
        if ev["type"] == "response.output_audio.delta":
            first = time.perf_counter() - t0
            break
    await c.close()
    return first


async def wait_for(predicate, timeout: float = 20.0) -> float:  # noqa: ANN001
    """Yield until ``predicate()`` (returns when, perf_counter seconds)."""
    async with asyncio.timeout(timeout):
        while not predicate():
            await asyncio.sleep(0.001)
    return time.perf_counter()


class TimedCaller(Caller):
    """A caller that notes when each event and each loud frame arrived."""

    def __init__(self) -> None:
        super().__init__()
        self.event_at: dict[str, float] = {}
        self.frame_at: list[float] = []
        self.channel.on("message", lambda m: self.event_at.setdefault(self.events[-1]["type"], time.perf_counter()))

    async def _listen(self, track) -> None:  # noqa: ANN001
        from aiortc.mediastreams import MediaStreamError

        try:
            while True:
                frame = await track.recv()
                x = frame.to_ndarray().reshape(-1, len(frame.layout.channels)).mean(axis=1)
                self.heard.append(x.astype(np.int16))
                self.frame_at.append(time.perf_counter())
        except MediaStreamError:
            pass


def level(x: np.ndarray) -> float:
    return float(np.sqrt(np.mean(x.astype(np.float64) ** 2)))


async def call_trial(port: int, interruption: np.ndarray, buffer: int | None) -> dict[str, float]:
    caller = TimedCaller()
    r = await caller.call(port)
    assert r.status_code == 201, r.text
    if buffer is not None:
        jitter_buffers(caller.pc, packets=buffer)
    await asyncio.wait_for(caller.opened.wait(), 10)
    await wait_for(lambda: "session.created" in caller.event_at)
    caller.send("session.update", session={"audio": {"input": {"turn_detection": {"type": "semantic_vad"}}}})
    caller.send(
        "conversation.item.create",
        item={"type": "message", "role": "user", "content": [{"type": "input_text", "text": TEXT}]},
    )
    t0 = time.perf_counter()
    caller.send("response.create")
    started = await wait_for(lambda: "output_audio_buffer.started" in caller.event_at) - t0
    await wait_for(lambda: any(level(f) > 300 for f in caller.heard))
    first_loud = next(i for i, f in enumerate(caller.heard) if level(f) > 300)
    heard = caller.frame_at[first_loud] - t0
    # Talk over it once it has played a second and a half.
    await wait_for(lambda: len(caller.heard) - first_loud >= 75)
    speaking = np.concatenate([interruption, np.zeros(RATE * 6, np.int16)])
    onset_sample = int(np.argmax(np.abs(interruption) > 1000))
    mic_from = caller.mic.sent + sum(p.size for p in caller.mic.queue)
    caller.mic.say(speaking)
    await wait_for(lambda: caller.mic.sent > mic_from + onset_sample)
    onset_at = time.perf_counter() - (caller.mic.sent - mic_from - onset_sample) / RATE
    reply_level = np.median([level(f) for f in caller.heard[first_loud:] if level(f) > 300])
    after = len(caller.heard)

    def quiet_from() -> int | None:
        """The first frame after the onset from which the reply stays quiet (ducked at
        -24 dB or cut) for 300 ms: a pause between its words is shorter."""
        frames = caller.heard
        for i in range(after, len(frames) - 15):
            if all(level(f) < reply_level / 8 for f in frames[i : i + 15]):
                return i
        return None

    await wait_for(lambda: quiet_from() is not None)
    quiet = quiet_from()
    assert quiet is not None
    stop = caller.frame_at[quiet] - onset_at
    await wait_for(lambda: "input_audio_buffer.speech_started" in caller.event_at)
    decided = caller.event_at["input_audio_buffer.speech_started"] - onset_at
    await wait_for(lambda: bool(caller.of_type("conversation.item.truncated")))
    cut = caller.of_type("conversation.item.truncated")[0]["audio_end_ms"]
    at_onset = sum(1 for t in caller.frame_at if t <= onset_at)  # frames the caller had played then
    heard_ms = (at_onset - first_loud) * FRAME * 1000 / RATE
    await caller.close()
    return {
        "started": started,
        "heard": heard,
        "stop": stop,
        "decided": decided,
        "cut_error": abs(cut - heard_ms),
        "signed": cut - heard_ms,
    }


async def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--trials", type=int, default=10)
    ap.add_argument(
        "--caller-buffer", type=int, help="packets the caller's jitter buffer holds (default: aiortc's 4, 80 ms)"
    )
    args = ap.parse_args()
    corpus = load_corpus()
    clips = [c for c in corpus.clips if c.kind == "turn" and getattr(c, "split", "tune") == "heldout"]
    server = ServerProcess("--thinker", "echo")
    with server.running():
        ws = [await socket_first_audio(server.port) for _ in range(args.trials)]
        calls = []
        for i in range(args.trials):
            clip = clips[i % len(clips)]
            pcm = resample(clip.pcm, clip.rate, RATE).astype(np.int16)
            calls.append(await call_trial(server.port, pcm, args.caller_buffer))
            print(f"call {i + 1}: {calls[-1]}", flush=True)
    base = float(np.median(ws))
    held = 20 * (args.caller_buffer or 4)
    print(f"\nWebRTC calls and the WebSocket, {args.trials} trials each (median / p95)\n")
    print(header("measure", "median", "p95", "vs the WebSocket"))
    print(row("WebSocket: response.create -> first audio delta", ws, "ms", scale=1000, digits=1, note="1.00x"))
    more = (float(np.median([c["started"] for c in calls])) - base) * 1000
    print(row("call: response.create -> output_audio_buffer.started", [c["started"] for c in calls], "ms",
              scale=1000, digits=1, note=f"{more:+.1f} ms"))  # fmt: skip
    print(row("call: response.create -> first sound on the caller's track", [c["heard"] for c in calls], "ms",
              scale=1000, digits=1, note=f"the caller's jitter buffer: {held} ms"))  # fmt: skip
    print(row("call: true onset -> speech_started on the channel", [c["decided"] for c in calls], "ms",
              scale=1000, digits=0))  # fmt: skip
    print(row("call: true onset -> reply quiet on the caller's speaker", [c["stop"] for c in calls], "ms",
              scale=1000, digits=0))  # fmt: skip
    print(row("call: cut against what the caller had heard", [c["cut_error"] for c in calls], "ms", digits=0))


if __name__ == "__main__":
    asyncio.run(main())
