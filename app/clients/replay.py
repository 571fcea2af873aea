"""Run scenarios against any server speaking the protocol, measure, and judge.

``duplex replay SCENARIO... --url ws://...`` runs each scenario with the
simulated client (faster than real time by default, exact thanks to
``session.sync``; ``--realtime`` paces the microphone at real time and reads as
a live client does), prints a table, writes a JSON report and one WAV per
scenario (left: the microphone, right: what the speaker played), and exits
non-zero when an expectation fails.
"""

from __future__ import annotations

import asyncio
import time
from pathlib import Path
from typing import Any

import numpy as np
import soxr
import websockets

from duplex.app.clients.realtime import RealtimeClient
from duplex.app.clients.scenario import Scenario, Step
from duplex.app.clients.simulated import SimulatedClient
from duplex.app.clients.sounds import cough, noise, read_wav, speech, voiced_bounds, write_wav
from duplex.app.clients.verdicts import Result, Utterance, judge, matches
from duplex.app.core.protocol import DEFAULT_URL

_QUIET = ("response.output_audio.delta", "response.output_audio_transcript.delta", "session.synced")


def timeline(sim: SimulatedClient, last: int = 60) -> str:
    """What the server said (audio aside), at the input milliseconds it arrived: the
    story of a step that timed out."""
    rate = sim.input_rate
    lines = []
    for r in sim.events:
        e = r.event
        if e["type"] in _QUIET:
            continue
        detail = e.get("delta") or e.get("transcript") or (e.get("response") or {}).get("status") or ""
        if e["type"] == "error":
            detail = e["error"].get("message", "")
        lines.append(f"{r.at * 1000 // rate} ms {e['type']} {detail}".rstrip())
    return "events:\n  " + "\n  ".join(lines[-last:])


class Runner:
    """Runs scenarios against one server."""

    def __init__(
        self, url: str = DEFAULT_URL, *, realtime: bool = False, wav_dir: str | Path | None = None, talker: Any = None
    ) -> None:
        self.url = url if "/v1/realtime" in url else url.rstrip("/") + "/v1/realtime"
        self.realtime = realtime
        self.wav_dir = Path(wav_dir) if wav_dir else None
        if talker is None:
            from duplex.pipeline.talkers.espeak import EspeakTalker

            talker = EspeakTalker()
        self.talker = talker

    async def run_many(self, scenarios: list[Scenario], *, parallel: bool = False) -> list[Result]:
        if parallel:
            return list(await asyncio.gather(*(self.run(s) for s in scenarios)))
        return [await self.run(s) for s in scenarios]

    async def run(self, scenario: Scenario) -> Result:
        result = Result(scenario.name, tags=list(scenario.tags))
        c = scenario.client
        t0 = time.monotonic()
        try:
            client = await RealtimeClient.open(
                self.url, keep=False, id_prefix="sim", expect_created=False, open_timeout=10
            )
        except (OSError, websockets.InvalidHandshake) as exc:
            result.fail(f"cannot connect to {self.url}: {exc}")
            return result
        sim = SimulatedClient(
            client,
            input_rate=c.input_rate,
            output_rate=c.output_rate,
            frame_ms=c.frame_ms,
            ack_every_ms=c.ack_every_ms or None,
            keep_audio=True,
            record=True,
            realtime=self.realtime,
        )
        segments: list[Utterance] = []
        markers: dict[str, int] = {}
        ws = client.ws
        try:
            created = await client.recv()
            if created.get("type") != "session.created":
                result.fail(f"first event was {created.get('type')!r}, not session.created")
            await sim.start()
            # A replay's microphone is its script: no room, no echo to cancel (and until
            # the server has judged that, AEC3 would take words said over the first
            # reply's first second for echo: pipeline/echo.py).
            await sim.send("session.update", session={"echo_cancellation": False, **(scenario.session or {})})
            await sim.sync()
            connected = True
            await sim.silence(c.lead_in_s)
            step_start = len(sim.events)
            for i, step in enumerate(scenario.steps):
                # An event a wait looks for may arrive during the step before it.
                since, step_start = step_start, len(sim.events)
                connected = await self._step(sim, step, segments, markers, result, f"step {i + 1}", since)
                if not connected or not result.passed:
                    break
            if connected and result.passed:
                await sim.silence(c.tail_s)
        except websockets.ConnectionClosed as exc:
            result.fail(f"the server closed the connection: {exc}")
        finally:
            await sim.stop()
            await ws.close()
        result.wall_s = time.monotonic() - t0
        result.input_s = sim.input_samples / c.input_rate
        judge(scenario, sim, segments, markers, result)
        if self.wav_dir is not None:
            result.wav = self._write_wav(scenario, sim)
        return result

    # -- steps -----------------------------------------------------------------
    async def _step(
        self,
        sim: SimulatedClient,
        step: Step,
        segments: list[Utterance],
        markers: dict[str, int],
        result: Result,
        where: str,
        since: int,
    ) -> bool:
        rate = sim.input_rate
        a, v, o = step.action, step.value, step.options
        if a in ("say", "wav", "cough", "noise"):
            if a == "say":
                pcm = await speech(
                    self.talker, v, rate, voice=o.get("voice", "en-us+klatt2"), speed=o.get("speed", 1.0)
                )
                on, off = voiced_bounds(pcm, rate)
                pcm = pcm[on:off]
            elif a == "wav":
                pcm = read_wav(v, rate)
            elif a == "cough":
                pcm = cough(rate, float(v))
            else:
                pcm = noise(float(v), rate, level=float(o.get("level", 3000)), seed=int(o.get("seed", 0)))
            on, off = voiced_bounds(pcm, rate, level=300)
            playing = any(not h.done or h.received > h.played + h.dropped for h in sim.heard.values())
            segments.append(
                Utterance(a, v if a == "say" else None, sim.input_samples + on, sim.input_samples + off, playing)
            )
            await sim.stream(pcm)
        elif a == "silence":
            await sim.silence(float(v))
        elif a == "message":
            markers[f"message:{len(markers)}"] = sim.input_samples
            await sim.send(
                "conversation.item.create",
                item={"type": "message", "role": "user", "content": [{"type": "input_text", "text": v}]},
            )
            if o.get("respond", True):
                await sim.send("response.create")
            await sim.sync()
        elif a == "send":
            await sim.send(v["type"], **{k: x for k, x in v.items() if k != "type"})
            await sim.sync()
        elif a == "wait":
            if not await self._wait(sim, v, o, segments, since):
                result.fail(f"{where}: timed out after {o.get('timeout', 30)} s waiting for {v}; {timeline(sim)}")
                return True
            if o.get("after"):
                await sim.silence(float(o["after"]))
        elif a == "disconnect":
            sim.ws.transport.abort()  # the network goes away: no close frame
            return False
        elif a == "stop_reading":
            await sim.stall(float(v))
        return True

    def _latest(self, sim: SimulatedClient) -> str | None:
        created = sim.of_type("response.created")
        return created[-1].event["response"]["id"] if created else None

    async def _wait(
        self, sim: SimulatedClient, trigger: str, o: dict[str, Any], segments: list[Utterance], start: int
    ) -> bool:
        spoken = [s for s in segments if s.kind in ("say", "wav")]
        last_words = spoken[-1].offset if spoken else 0
        limit = sim.input_samples + int(float(o.get("timeout", 30)) * sim.input_rate)
        seconds = float(o.get("seconds", 0))

        def ready() -> bool:
            rid = self._latest(sim)
            h = sim.heard.get(rid) if rid else None
            if trigger == "first_audio":
                return h is not None and h.first_audio_at is not None
            if trigger == "heard":
                return h is not None and h.played >= seconds * sim.output_rate
            if trigger == "remaining":
                return h is not None and h.done and h.received - h.played - h.dropped <= seconds * sim.output_rate
            idle = all(x.done and x.received <= x.played + x.dropped for x in sim.heard.values())
            if trigger == "idle":
                return idle
            if trigger == "answered":  # a reply to the user's last words has ended and been heard
                replies = [r.event["response"]["id"] for r in sim.of_type("response.created") if r.at >= last_words]
                ended = {r.event["response"]["id"] for r in sim.of_type("response.done")}
                return idle and any(rid in ended for rid in replies)
            hits = [r for r in sim.events[start:] if r.event["type"] == trigger and matches(r.event, o.get("where"))]
            return len(hits) >= int(o.get("count", 1))

        while not ready():
            if sim.input_samples >= limit:
                return False
            await sim.stream(np.zeros(sim.frame, np.int16))
        return True

    def _write_wav(self, scenario: Scenario, sim: SimulatedClient) -> str:
        assert self.wav_dir is not None
        self.wav_dir.mkdir(parents=True, exist_ok=True)
        mic = np.concatenate(sim.mic) if sim.mic else np.zeros(0, np.int16)
        if sim.input_rate != sim.output_rate and mic.size:
            mic = np.clip(soxr.resample(mic.astype(np.float32), sim.input_rate, sim.output_rate), -32768, 32767).astype(
                np.int16
            )
        out = np.concatenate(sim.speaker) if sim.speaker else np.zeros(0, np.int16)
        path = self.wav_dir / f"{(scenario.path.stem if scenario.path else scenario.name)}.wav"
        write_wav(path, sim.output_rate, mic, out)
        return str(path)
