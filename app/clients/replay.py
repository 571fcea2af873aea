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
import json
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import soxr
import websockets

from duplex.app.clients.realtime import RealtimeClient
from duplex.app.clients.scenario import Expectation, Scenario, Step
from duplex.app.clients.simulated import SimulatedClient
from duplex.app.clients.sounds import cough, noise, read_wav, speech, voiced_bounds, write_wav
from duplex.app.core.protocol import DEFAULT_URL


@dataclass(slots=True)
class Utterance:
    """A sound the user made, with its true audible bounds on the input clock."""

    kind: str
    text: str | None
    onset: int
    offset: int
    during_reply: bool


@dataclass(slots=True)
class Result:
    """One scenario's outcome."""

    name: str
    passed: bool = True
    failures: list[str] = field(default_factory=list)
    metrics: dict[str, list[float]] = field(default_factory=dict)
    input_s: float = 0.0
    wall_s: float = 0.0
    replies: list[dict[str, Any]] = field(default_factory=list)
    segments: list[dict[str, Any]] = field(default_factory=list)
    stale_bytes: int = 0
    wav: str | None = None
    tags: list[str] = field(default_factory=list)

    def fail(self, message: str) -> None:
        self.passed = False
        self.failures.append(message)


def wer(ref: str, hyp: str) -> float:
    """Word error rate of ``hyp`` against ``ref`` (case and punctuation ignored)."""
    clean = str.maketrans("", "", ".,!?;:")
    r, h = ref.lower().translate(clean).split(), hyp.lower().translate(clean).split()
    d = list(range(len(h) + 1))
    for i in range(1, len(r) + 1):
        prev, d[0] = d[0], i
        for j in range(1, len(h) + 1):
            prev, d[j] = d[j], min(d[j] + 1, d[j - 1] + 1, prev + (r[i - 1] != h[j - 1]))
    return d[len(h)] / max(1, len(r))


def _get(obj: Any, path: str) -> Any:
    for key in path.split("."):
        obj = obj.get(key) if isinstance(obj, dict) else None
    return obj


def _matches(event: dict[str, Any], where: dict[str, Any] | None) -> bool:
    return all(_get(event, k) == v for k, v in (where or {}).items())


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
            if scenario.session:
                await sim.send("session.update", session=scenario.session)
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
        self._judge(scenario, sim, segments, markers, result)
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
                result.fail(f"{where}: timed out after {o.get('timeout', 30)} s waiting for {v}")
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
            hits = [r for r in sim.events[start:] if r.event["type"] == trigger and _matches(r.event, o.get("where"))]
            return len(hits) >= int(o.get("count", 1))

        while not ready():
            if sim.input_samples >= limit:
                return False
            await sim.stream(np.zeros(sim.frame, np.int16))
        return True

    # -- judging -----------------------------------------------------------------
    def _metrics(
        self, sim: SimulatedClient, segments: list[Utterance], markers: dict[str, int]
    ) -> dict[str, list[float]]:
        ms = 1000 / sim.input_rate
        created = [(r.at, r.event["response"]["id"]) for r in sim.of_type("response.created")]
        m: dict[str, list[float]] = {
            "response": [],
            "interruption": [],
            "stop": [],
            "cancel": [],
            "first_audio": [],
            "end_of_turn": [],
        }
        stops = [r.at for r in sim.of_type("input_audio_buffer.speech_stopped")]
        spoken = [s for s in segments if s.kind in ("say", "wav")]
        for k, seg in enumerate(spoken):
            # The reply to these words, if it began before the user spoke again.
            until = spoken[k + 1].onset if k + 1 < len(spoken) else None
            after = [rid for at, rid in created if at >= seg.offset and (until is None or at < until)]
            nxt = sim.heard.get(after[0]) if after else None
            if nxt is not None and nxt.first_audio_at is not None:
                m["interruption" if seg.during_reply else "response"].append((nxt.first_audio_at - seg.offset) * ms)
                # When the server decided the turn was over (speech_stopped arrived).
                decided = [at for at in stops if at >= seg.offset]
                if decided:
                    m["end_of_turn"].append((decided[0] - seg.offset) * ms)
            if seg.during_reply:
                for h in sim.heard.values():
                    if (
                        h.stopped_at is not None
                        and h.stopped_at >= seg.onset
                        and (h.first_audio_at is not None and h.first_audio_at <= seg.onset)
                    ):
                        m["stop"].append((h.stopped_at - seg.onset) * ms)
                for r in sim.of_type("response.done"):
                    if (
                        r.event["response"]["status"] == "cancelled"
                        and r.at >= seg.onset
                        and (r.event["response"]["status_details"] or {}).get("reason") == "turn_detected"
                    ):
                        m["cancel"].append((r.at - seg.onset) * ms)
                        break
        for at in markers.values():
            after = [rid for t, rid in created if t >= at]
            answer = sim.heard.get(after[0]) if after else None
            if answer is not None and answer.first_audio_at is not None:
                m["first_audio"].append((answer.first_audio_at - at) * ms)
        return m

    def _judge(
        self,
        scenario: Scenario,
        sim: SimulatedClient,
        segments: list[Utterance],
        markers: dict[str, int],
        result: Result,
    ) -> None:
        result.metrics = self._metrics(sim, segments, markers)
        result.stale_bytes = sum(h.stale_bytes for h in sim.heard.values())
        done = {r.event["response"]["id"]: r.event["response"] for r in sim.of_type("response.done")}
        for rid, h in sim.heard.items():
            resp = done.get(rid, {})
            content = (resp.get("output") or [{}])[0].get("content") or [{}]
            result.replies.append(
                {
                    "id": rid,
                    "status": resp.get("status", "unfinished"),
                    "reason": (resp.get("status_details") or {}).get("reason"),
                    "transcript": content[0].get("transcript"),
                    "received_ms": h.received * 1000 // sim.output_rate,
                    "played_ms": h.played * 1000 // sim.output_rate,
                    "dropped_ms": h.dropped * 1000 // sim.output_rate,
                }
            )
        result.segments = [asdict(s) for s in segments]
        for i, e in enumerate(scenario.expects):
            self._expect(e, sim, segments, result, f"expect {i + 1} ({e.kind})")

    def _expect(
        self, e: Expectation, sim: SimulatedClient, segments: list[Utterance], result: Result, where: str
    ) -> None:
        o = e.options
        if e.kind in ("event", "no_event"):
            n = sum(1 for r in sim.events if r.event["type"] == e.value and _matches(r.event, o.get("where")))
            lo, hi = (0, 0) if e.kind == "no_event" else (o.get("count", o.get("min", 1)), o.get("count", o.get("max")))
            if n < lo or (hi is not None and n > hi):
                want = f"exactly {lo}" if lo == hi else f"at least {lo}" + (f" and at most {hi}" if hi else "")
                result.fail(f"{where}: {n} x {e.value} {o.get('where') or ''}, wanted {want}")
        elif e.kind == "transcript":
            heard = [
                r.event["transcript"] for r in sim.of_type("conversation.item.input_audio_transcription.completed")
            ]
            if not any(wer(e.value, t) <= o.get("max_wer", 0.5) for t in heard):
                result.fail(f"{where}: no transcript close to {e.value!r}; heard {heard}")
        elif e.kind == "reply":
            said = [r["transcript"] or "" for r in result.replies if r["status"] == "completed"]
            if not any(wer(e.value, t) <= o.get("max_wer", 0.5) for t in said):
                result.fail(f"{where}: no completed reply close to {e.value!r}; said {said}")
        elif e.kind == "latency":
            values = result.metrics.get(e.value, [])
            if not values:
                result.fail(f"{where}: no {e.value} latency was measured")
            for v in values:
                if "max_ms" in o and v > o["max_ms"]:
                    result.fail(f"{where}: {e.value} latency {v:.0f} ms > {o['max_ms']} ms")
                if "min_ms" in o and v < o["min_ms"]:
                    result.fail(f"{where}: {e.value} latency {v:.0f} ms < {o['min_ms']} ms")
        elif e.kind == "truncation":
            self._check_truncations(sim, segments, result, where, o.get("tolerance_ms", 80), bool(e.value))
        elif e.kind == "stale_bytes":
            if result.stale_bytes != e.value:
                result.fail(f"{where}: {result.stale_bytes} stale audio bytes, wanted {e.value}")
        elif e.kind == "reply_complete":
            for r in result.replies:
                if r["status"] == "completed" and (r["dropped_ms"] or r["played_ms"] < r["received_ms"]) == e.value:
                    result.fail(f"{where}: reply {r['id']} played {r['played_ms']} of {r['received_ms']} ms")
        elif e.kind == "replies":
            n = sum(1 for r in result.replies if "status" not in o or r["status"] == o["status"])
            if n != e.value:
                result.fail(f"{where}: {n} replies{' ' + o['status'] if 'status' in o else ''}, wanted {e.value}")

    def _check_truncations(
        self,
        sim: SimulatedClient,
        segments: list[Utterance],
        result: Result,
        where: str,
        tolerance: float,
        wanted: bool,
    ) -> None:
        truncs = sim.of_type("conversation.item.truncated")
        if not wanted:
            if truncs:
                result.fail(f"{where}: {len(truncs)} truncation(s), wanted none")
            return
        if not truncs:
            result.fail(f"{where}: the reply was not truncated")
        for rec in truncs:
            item = rec.event["item_id"]
            rid = next(
                (
                    r.event["response_id"]
                    for r in sim.events
                    if r.event.get("item_id") == item and "response_id" in r.event
                ),
                None,
            )
            cause = [s for s in segments if s.onset <= rec.at and s.during_reply]
            if rid is None or not cause:
                continue  # truncated by the client's own request: nothing to map
            heard_ms = sim.played_at(rid, cause[-1].onset) * 1000 / sim.output_rate
            err = rec.event["audio_end_ms"] - heard_ms
            result.metrics.setdefault("truncation_error", []).append(abs(err))
            if abs(err) > tolerance:
                result.fail(
                    f"{where}: truncated at {rec.event['audio_end_ms']} ms, the listener had heard "
                    f"{heard_ms:.0f} ms at the onset (off by {err:.0f} ms > {tolerance} ms)"
                )

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


def _fmt(values: list[float]) -> str:
    return "-" if not values else f"{np.median(values):.0f}"


def table(results: list[Result]) -> str:
    """The per-scenario table ``duplex replay`` prints."""
    lines = [
        "| scenario | result | audio s | wall s | speed | replies | response ms | stop ms | cancel ms | notes |",
        "|---|---|---|---|---|---|---|---|---|---|",
    ]
    for r in results:
        speed = f"{r.input_s / r.wall_s:.1f}x" if r.wall_s else "-"
        statuses = ",".join(x["status"][:4] for x in r.replies) or "-"
        note = "; ".join(r.failures)[:160]
        lines.append(
            f"| {r.name} | {'pass' if r.passed else 'FAIL'} | {r.input_s:.1f} | {r.wall_s:.1f} | {speed} | "
            f"{statuses} | {_fmt(r.metrics.get('response', []) + r.metrics.get('interruption', []))} | "
            f"{_fmt(r.metrics.get('stop', []))} | {_fmt(r.metrics.get('cancel', []))} | {note} |"
        )
    return "\n".join(lines)


def write_report(results: list[Result], path: str | Path) -> None:
    Path(path).write_text(json.dumps([asdict(r) for r in results], indent=2))
