"""Server metrics for ``/metrics``, kept by ``prometheus_client`` (the ecosystem's
library: its text format, and the multiprocess mode several workers will need).

``METRICS`` is the one list of what the server measures: each name once, with its
kind, its label and what it means (the ``HELP`` line a scraper shows). A name not
in it is a programming error, caught by the tests that drive the server.

Several workers (``--workers``) share one ``/metrics``: each writes its values to files
in ``$PROMETHEUS_MULTIPROC_DIR`` (``prometheus_client``'s multiprocess mode, which the
supervisor sets before the workers start), and whichever worker is asked renders all of
them: counters and histograms summed over every worker that ever ran, gauges summed
over the live ones (the hearing load: the most any one worker has).
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from typing import Literal, TypeAlias

import prometheus_client
from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, generate_latest
from prometheus_client.multiprocess import MultiProcessCollector

from duplex.app.core.events import (
    AudioDucked,
    AudioPaused,
    Error,
    ResponseDone,
    ServerEvent,
    TranscriptionCompleted,
    TranscriptionFailed,
)

MULTIPROC_DIR = "PROMETHEUS_MULTIPROC_DIR"

# ``*_created`` series double every counter for a timestamp nobody here reads.
prometheus_client.disable_created_metrics()  # type: ignore[no-untyped-call]

LATENCY_BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.15, 0.25, 0.5, 1.0, 2.5, 5.0)


@dataclass(frozen=True)
class Metric:
    """One metric: its kind, the label it is split by (if any) and what it counts."""

    kind: Literal["counter", "gauge", "histogram"]
    help: str
    label: str | None = None
    across: Literal["livesum", "livemax"] = "livesum"
    """A gauge over several workers: the live workers' sum, or their most."""


METRICS: dict[str, Metric] = {
    # Sessions and the loop.
    "duplex_sessions": Metric("gauge", "sessions open now"),
    "duplex_sessions_opened_total": Metric("counter", "sessions opened"),
    "duplex_tasks": Metric("gauge", "asyncio tasks of the server's loop"),
    "duplex_loop_share_sessions": Metric("gauge", "sessions the event loop's share is split among"),
    "duplex_hearing_load": Metric("gauge", "share of the loop spent hearing microphones", across="livemax"),
    "duplex_idle_trims": Metric("gauge", "times memory was given back after the last session left"),
    "duplex_draining": Metric("gauge", "1 from the moment the server began to drain (it refuses new sessions)"),
    "duplex_idle_trimmed": Metric("gauge", "1 once memory was given back since the last session opened"),
    "duplex_refusals_total": Metric("counter", "connections or sessions refused or closed, by kind", "kind"),
    "duplex_errors_total": Metric("counter", "error events sent, by code", "code"),
    "duplex_bytes_in_total": Metric("counter", "bytes of client messages received"),
    "duplex_bytes_out_total": Metric("counter", "bytes of server messages sent"),
    # Replies.
    "duplex_replies_total": Metric("counter", "replies done, by status", "status"),
    "duplex_cancels_total": Metric("counter", "replies cancelled, by reason", "reason"),
    "duplex_prepared_replies_total": Metric(
        "counter", "replies made while a turn was decided: adopted, or dropped when the user went on", "outcome"
    ),
    "duplex_stale_events_dropped_total": Metric("counter", "events of a retired epoch dropped before sending"),
    "duplex_queue_high_water_bytes": Metric("gauge", "most bytes a reply's talker and output queues held"),
    "duplex_output_queue_high_water_chunks": Metric("gauge", "most chunks a reply's output queue held"),
    "duplex_first_audio_seconds": Metric("histogram", "a reply's start to its first audio"),
    "duplex_barge_in_pause_seconds": Metric("histogram", "speech onset over a reply to the pause, on the input clock"),
    # Recognition.
    "duplex_recognition_seconds": Metric("histogram", "a turn's wait for a recognition worker plus its decode"),
    "duplex_recognition_failures_total": Metric("counter", "turn transcriptions that failed"),
    # The audio endpoints.
    "duplex_speech_requests_total": Metric(
        "counter", "POST /v1/audio/speech: done, refused, cancelled (the client left) or failed", "outcome"
    ),
    "duplex_transcription_requests_total": Metric(
        "counter", "POST /v1/audio/transcriptions: done, refused, cancelled or failed", "outcome"
    ),
    "duplex_turn_transcripts_total": Metric("counter", "turn transcriptions, by the model that made them", "model"),
}

_Family: TypeAlias = Counter | Gauge | Histogram


class Metrics:
    """The server's metrics: one registry per server (two servers in one process, as
    in the tests, count apart)."""

    def __init__(self) -> None:
        self.registry = CollectorRegistry()
        self.shared_dir = os.environ.get(MULTIPROC_DIR) or None
        """Where every worker's values are (None: this process alone)."""
        self._families: dict[str, _Family] = {}
        for name, m in METRICS.items():
            labels = (m.label,) if m.label else ()
            if m.kind == "counter":
                self._families[name] = Counter(name, m.help, labels, registry=self.registry)
            elif m.kind == "gauge":
                self._families[name] = Gauge(name, m.help, labels, registry=self.registry, multiprocess_mode=m.across)
            else:
                self._families[name] = Histogram(name, m.help, labels, registry=self.registry, buckets=LATENCY_BUCKETS)

    def _of(self, name: str, label: dict[str, str]) -> _Family:
        family = self._families[name]
        return family.labels(**label) if label else family

    def inc(self, name: str, value: float = 1.0, **label: str) -> None:
        """Add to a counter."""
        counter = self._of(name, label)
        assert isinstance(counter, Counter), name
        counter.inc(value)

    def count_to(self, name: str, total: float, **label: str) -> None:
        """Bring a counter kept elsewhere (a backend's own tally) up to ``total``; its
        series shows from the first call, at 0 too (each of a backend's labels is known)."""
        counter = self._of(name, label)
        assert isinstance(counter, Counter), name
        ahead = total - self.value(name, **label)
        if ahead > 0:
            counter.inc(ahead)

    def set(self, name: str, value: float) -> None:
        """Set a gauge."""
        gauge = self._of(name, {})
        assert isinstance(gauge, Gauge), name
        gauge.set(value)

    def high_water(self, name: str, value: float) -> None:
        """Raise a gauge to ``value`` if that is higher."""
        if value > self.value(name):
            self.set(name, value)

    def observe(self, name: str, seconds: float) -> None:
        """Put an observation in a histogram."""
        histogram = self._of(name, {})
        assert isinstance(histogram, Histogram), name
        histogram.observe(seconds)

    def count_event(self, event: ServerEvent) -> None:
        """Count what the server tells a client."""
        if isinstance(event, ResponseDone):
            self.inc("duplex_replies_total", status=event.response.status)
            first = (event.response.timings or {}).get("first_audio")
            if first is not None:
                self.observe("duplex_first_audio_seconds", first / 1000)
        elif isinstance(event, AudioPaused | AudioDucked):
            self.observe("duplex_barge_in_pause_seconds", event.detected_after_ms / 1000)
        elif isinstance(event, TranscriptionCompleted) and event.recognition_ms is not None:
            self.observe("duplex_recognition_seconds", event.recognition_ms / 1000)  # queue + decode
        elif isinstance(event, TranscriptionFailed):
            self.inc("duplex_recognition_failures_total")
        elif isinstance(event, Error):
            self.inc("duplex_errors_total", code=event.error.code)

    def value(self, name: str, **label: str) -> float:
        """A counter's or gauge's current value (0 if never set)."""
        assert name in METRICS, name
        found = self.registry.get_sample_value(name, label)
        return 0.0 if found is None else found

    def render(self) -> str:
        """Prometheus' text format: this process's, or every worker's together."""
        if self.shared_dir is None:
            return generate_latest(self.registry).decode()
        everyone = CollectorRegistry()
        MultiProcessCollector(everyone, self.shared_dir)  # type: ignore[no-untyped-call]
        return generate_latest(everyone).decode()
