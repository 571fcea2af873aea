"""Judging a replayed scenario: what the user did, what the server did, and whether
that met the scenario's expectations; the report table and file."""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from duplex.app.clients.scenario import Expectation, Scenario
from duplex.app.clients.simulated import SimulatedClient


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


def matches(event: dict[str, Any], where: dict[str, Any] | None) -> bool:
    return all(_get(event, k) == v for k, v in (where or {}).items())


def measure(sim: SimulatedClient, segments: list[Utterance], markers: dict[str, int]) -> dict[str, list[float]]:
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


def judge(
    scenario: Scenario,
    sim: SimulatedClient,
    segments: list[Utterance],
    markers: dict[str, int],
    result: Result,
) -> None:
    result.metrics = measure(sim, segments, markers)
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
        _expect(e, sim, segments, result, f"expect {i + 1} ({e.kind})")


def _expect(e: Expectation, sim: SimulatedClient, segments: list[Utterance], result: Result, where: str) -> None:
    o = e.options
    if e.kind in ("event", "no_event"):
        n = sum(1 for r in sim.events if r.event["type"] == e.value and matches(r.event, o.get("where")))
        lo, hi = (0, 0) if e.kind == "no_event" else (o.get("count", o.get("min", 1)), o.get("count", o.get("max")))
        if n < lo or (hi is not None and n > hi):
            want = f"exactly {lo}" if lo == hi else f"at least {lo}" + (f" and at most {hi}" if hi else "")
            result.fail(f"{where}: {n} x {e.value} {o.get('where') or ''}, wanted {want}")
    elif e.kind == "transcript":
        heard = [r.event["transcript"] for r in sim.of_type("conversation.item.input_audio_transcription.completed")]
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
        _check_truncations(sim, segments, result, where, o.get("tolerance_ms", 80), bool(e.value))
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
            (r.event["response_id"] for r in sim.events if r.event.get("item_id") == item and "response_id" in r.event),
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
