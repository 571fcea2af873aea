"""``duplex mic``: talk to the server from a terminal, through sounddevice (PortAudio).

One full-duplex callback stream: the microphone at the device's rate is
resampled to the session's 24 kHz and streamed; replies are resampled to the
device's rate into a jitter buffer the output callback drains. On a pause or a
cancel the callback stops or flushes at its next block. What was *played* comes
from the stream's own clock (the DAC time of each block), not from what was
queued, and goes back as ``playback.ack``.

Speakers without headphones: the microphone hears the reply. An echo gate keeps
the assistant from interrupting itself: while the speaker plays, a microphone
frame only goes out if it is clearly louder than the echo the gate has learned
to expect; otherwise it is replaced by faint noise. So with speakers you
interrupt by speaking up; with headphones, as you like.
"""

from __future__ import annotations

import asyncio
import base64
import json
import sys
import threading
import time
from collections import deque
from dataclasses import dataclass, field

import numpy as np
import soxr

SESSION_RATE = 24000
ACK_S = 0.2


class DemoError(RuntimeError):
    """A problem the user can fix (device, rate, server); printed, not traced."""


@dataclass
class Speaker:
    """The playback side, shared between the event loop and the audio callback."""

    rate: int
    lock: threading.Lock = field(default_factory=threading.Lock)
    chunks: deque = field(default_factory=deque)  # (rid, float32 at device rate)
    paused_rid: str | None = None
    blocks: deque = field(default_factory=lambda: deque(maxlen=256))  # (dac_time, rid, start, n, rms, written_at)
    written: dict = field(default_factory=dict)  # rid -> samples handed to the device so far
    first_write: dict = field(default_factory=dict)  # rid -> stream time its first block was handed over

    def push(self, rid: str, pcm: np.ndarray) -> None:
        with self.lock:
            self.chunks.append((rid, pcm))

    def drop(self, rid: str) -> None:
        with self.lock:
            self.chunks = deque(c for c in self.chunks if c[0] != rid)
            if self.paused_rid == rid:
                self.paused_rid = None

    def fill(self, out: np.ndarray, dac_time: float, now: float) -> None:
        """Audio callback: write the next block (device rate, float32). ``dac_time`` is
        when it will sound, ``now`` when it is handed over; an echo cannot come earlier."""
        out.fill(0.0)
        n, pos, rid = out.shape[0], 0, None
        with self.lock:
            while pos < n and self.chunks:
                crid, pcm = self.chunks[0]
                if crid == self.paused_rid:
                    break
                take = min(n - pos, pcm.size)
                out[pos:pos + take, 0] = pcm[:take]
                rid = crid
                if take == pcm.size:
                    self.chunks.popleft()
                else:
                    self.chunks[0] = (crid, pcm[take:])
                pos += take
        rms = float(np.sqrt(np.mean(out[:pos, 0] ** 2))) if pos else 0.0
        start = self.written.get(rid, 0) if rid else 0
        if rid:
            self.written[rid] = start + pos
            self.first_write.setdefault(rid, now)
        self.blocks.append((dac_time, rid, start, pos, rms, now))

    def played(self, rid: str, now: float) -> int:
        """Samples of ``rid`` whose DAC time had come by stream time ``now`` (not merely queued)."""
        for dac, brid, start, n, _, _ in reversed(list(self.blocks)):
            if brid == rid and dac <= now:
                return start + min(n, int((now - dac) * self.rate))
        return 0

    def age(self, now: float, slack: float = 0.1) -> float | None:
        """Seconds since the reply now playing was first handed to the device, or None.

        Input and output timestamps come from different ends of the device; a
        loopback can show the echo a little *before* its block's hand-over time,
        so blocks up to ``slack`` ahead count (the age is then slightly negative)."""
        rid = next((b[1] for b in reversed(list(self.blocks)) if b[1] and b[5] <= now + slack), None)
        first = self.first_write.get(rid) if rid else None
        return None if first is None else now - first

    def level_at(self, t: float, window: float = 0.04) -> float:
        """The speaker's level for blocks handed over around stream time ``t``."""
        return max((rms for _, _, _, n, rms, w in list(self.blocks)
                    if w - window <= t <= w + n / self.rate + window), default=0.0)

    def level(self, now: float, window: float = 0.3) -> float:
        """Loudest block the speaker played in the last ``window`` seconds."""
        return max((b[4] for b in list(self.blocks) if now - window <= b[0] <= now), default=0.0)


@dataclass
class EchoGate:
    """Lets the microphone through while the speaker plays only when it is clearly
    louder than the echo.

    The echo path is measured at the start of each reply (its first half second,
    when the user has just stopped talking): the delay that best lines the
    microphone's level up with the speaker's, and the coupling (microphone level
    over speaker level at that delay, 75th percentile where the speaker was
    loud). Each microphone frame is then compared with the speaker's level that
    long ago. Before any reply has been measured: 50 ms and 6 dB down.
    """

    margin: float = 2.0  # admit speech 6 dB above the expected echo
    coupling: float = 0.5
    delay: float = 0.05
    floor: float = 0.003
    calibrate_s: float = 0.5
    min_loud_frames: int = 5  # 100 ms of loud speaker output at least, or the fit is noise
    _samples: list = field(default_factory=list)  # (adc_time, mic_rms) while calibrating

    def admit(self, mic_rms: float, adc: float, speaker: Speaker, reply_age_s: float | None) -> bool:
        if reply_age_s is not None and reply_age_s < self.calibrate_s:
            self._samples.append((adc, mic_rms))
            return False  # the start of a reply calibrates; nobody barges in within half a second
        if self._samples:
            self._calibrate(speaker)
        expected = self.coupling * speaker.level_at(adc - self.delay)
        if expected < self.floor * self.coupling:
            return True
        return mic_rms > self.margin * expected + self.floor

    def _calibrate(self, speaker: Speaker) -> None:
        mic = np.array([m for _, m in self._samples])
        adc = np.array([t for t, _ in self._samples])
        self._samples = []
        if mic.max() < self.floor:
            return  # no echo heard at all (headphones): keep the last estimate
        best = None
        for delay in np.arange(-0.1, 0.3, 0.016):
            spk = np.array([speaker.level_at(t - delay) for t in adc])
            if spk.max() < self.floor:
                continue
            score = float(np.dot(mic - mic.mean(), spk - spk.mean()))
            if best is None or score > best[0]:
                best = (score, delay, spk)
        if best is None:
            return
        score, delay, spk = best
        # Only where the speaker was loud: between words a late echo over a quiet
        # block would make the coupling look far bigger than it is.
        loud = spk >= max(self.floor, 0.3 * spk.max())
        if score <= 0 or loud.sum() < self.min_loud_frames:
            return  # a reply that began softly says little about the echo: keep the last estimate
        self.delay = delay
        ratios = mic[loud] / spk[loud]
        self.coupling = float(np.clip(np.percentile(ratios, 75), 0.02, 1.0))


class MicDemo:
    """The terminal voice client."""

    def __init__(self, url: str, *, input_device=None, output_device=None, rate: int | None = None,
                 echo_gate: bool = True, client_name: str | None = None, out=sys.stderr) -> None:
        self.url = url
        self.devices = (input_device, output_device)
        self.rate = rate
        self.gate = EchoGate() if echo_gate else None
        self.client_name = client_name
        self.out = out
        self.tty = out.isatty()
        self.state = "listening"
        self.heard = ""
        self.latency = {"first audio": None, "stop": None}
        self.levels = [0.0, 0.0]
        self.input_samples = 0
        self.current: str | None = None
        self._mic: asyncio.Queue[np.ndarray] | None = None
        self._stream = None
        self.speaker: Speaker | None = None
        self._turn_end: float | None = None
        self._pause_at: float | None = None
        self._n = 0

    # -- devices -------------------------------------------------------------
    def open_audio(self, loop: asyncio.AbstractEventLoop) -> None:
        import sounddevice as sd

        if self.client_name:
            self._jack_name = _set_jack_client_name(sd, self.client_name)
        try:
            info = sd.query_devices(self.devices[0], "input")
            sd.query_devices(self.devices[1], "output")
        except (ValueError, sd.PortAudioError) as exc:
            raise DemoError(f"no such audio device: {exc} (see `duplex mic --list-devices`)") from None
        rate = int(self.rate or info["default_samplerate"])
        self.speaker = Speaker(rate)
        self._mic = asyncio.Queue()
        mic = self._mic

        def callback(indata, outdata, frames, t, status) -> None:
            loop.call_soon_threadsafe(mic.put_nowait, (t.inputBufferAdcTime, indata[:, 0].copy()))
            self.speaker.fill(outdata, t.outputBufferDacTime, t.currentTime)

        try:
            self._stream = sd.Stream(device=self.devices, samplerate=rate, channels=1, dtype="float32",
                                     callback=callback, latency="low")
            self._stream.start()
        except sd.PortAudioError as exc:
            text = str(exc)
            if "sample rate" in text.lower():
                raise DemoError(f"the device does not run at {rate} Hz ({text}); try --rate with its rate") from None
            if "unavailable" in text.lower() or "busy" in text.lower():
                raise DemoError(f"the audio device is busy ({text}); close what uses it") from None
            raise DemoError(f"cannot open the audio device: {text}") from None
        self._rate = rate
        self._down = soxr.ResampleStream(rate, SESSION_RATE, 1, dtype="float32") if rate != SESSION_RATE else None
        self._up: dict[str, soxr.ResampleStream] = {}

    def stream_time(self) -> float:
        return self._stream.time if self._stream is not None else time.monotonic()

    def close_audio(self) -> None:
        if self._stream is not None:
            self._stream.stop()
            self._stream.close()
            self._stream = None

    # -- the session -----------------------------------------------------------
    async def run(self, *, once: bool = False) -> None:
        """Talk until interrupted; reconnect when the server goes away."""
        import websockets

        self.open_audio(asyncio.get_running_loop())
        backoff = 1.0
        try:
            while True:
                try:
                    async with websockets.connect(self.url, max_size=None, open_timeout=5) as ws:
                        backoff = 1.0
                        self.say(f"connected to {self.url}")
                        await self.session(ws)
                except (OSError, asyncio.TimeoutError, websockets.InvalidHandshake, websockets.ConnectionClosed) as exc:
                    if once:
                        raise DemoError(f"lost the server at {self.url}: {exc}") from None
                    self.say(f"lost the server ({exc or type(exc).__name__}); reconnecting in {backoff:.0f} s")
                    await asyncio.sleep(backoff)  # a reconnect backoff: real waiting, by design
                    backoff = min(backoff * 2, 10.0)
        finally:
            self.close_audio()

    async def session(self, ws) -> None:
        await self.send(ws, "session.update", session={"audio": {"input": {"format": {"type": "audio/pcm",
                                                                                       "rate": SESSION_RATE}}}})
        async with asyncio.TaskGroup() as tg:
            tg.create_task(self._capture(ws))
            tg.create_task(self._acks(ws))
            tg.create_task(self._status())
            async for message in ws:
                if isinstance(message, str):
                    self.on_event(json.loads(message))

    async def send(self, ws, etype: str, **fields) -> None:
        self._n += 1
        await ws.send(json.dumps({"type": etype, "event_id": f"mic{self._n}", **fields}))

    async def _capture(self, ws) -> None:
        assert self._mic is not None and self.speaker is not None
        pending = np.zeros(0, np.float32)
        frame = SESSION_RATE // 50
        noise = np.random.default_rng(0)
        while True:
            adc, block = await self._mic.get()
            x = self._down.resample_chunk(block) if self._down is not None else block
            pending = np.concatenate([pending, x])
            # Anchor every frame on the latest block's capture time: no drift.
            end_adc = adc + block.size / self._rate
            while pending.size >= frame:
                f_adc = end_adc - pending.size / SESSION_RATE
                f, pending = pending[:frame], pending[frame:]
                mic_rms = float(np.sqrt(np.mean(f**2)))
                self.levels[0] = mic_rms
                age = self.speaker.age(f_adc)
                if self.gate is not None and not self.gate.admit(mic_rms, f_adc, self.speaker, age):
                    f = noise.normal(0, 0.001, f.size).astype(np.float32)  # the echo stays home
                pcm = np.clip(np.rint(f * 32767), -32768, 32767).astype("<i2")
                self.input_samples += pcm.size
                await self.send(ws, "input_audio_buffer.append", audio=base64.b64encode(pcm.tobytes()).decode())

    async def _acks(self, ws) -> None:
        assert self.speaker is not None
        while True:
            await asyncio.sleep(ACK_S)  # a report period, like any client's
            rid = self.current
            if rid is not None:
                played = self.speaker.played(rid, self.stream_time()) * SESSION_RATE // self._rate
                await self.send(ws, "playback.ack", response_id=rid, played_samples=played,
                                input_samples=self.input_samples)

    def on_event(self, e: dict) -> None:
        """React to a server event: play, pause, flush, and keep the status current."""
        assert self.speaker is not None
        t = e["type"]
        if t == "input_audio_buffer.speech_started":
            self.set_state("you are speaking")
        elif t == "input_audio_buffer.speech_stopped":
            self._turn_end = time.monotonic()
            self.set_state("listening")
        elif t == "conversation.item.input_audio_transcription.completed":
            self.heard = e["transcript"]
            self.say(f"heard: {self.heard!r}")
        elif t == "conversation.item.input_audio_transcription.failed":
            self.say(f"not transcribed: {e['error']['message']}")
        elif t == "response.output_audio.delta":
            rid = e["response_id"]
            if rid != self.current:
                self.current = rid
                self._up[rid] = soxr.ResampleStream(SESSION_RATE, self._rate, 1, dtype="float32")
                if self._turn_end is not None:
                    self.latency["first audio"] = (time.monotonic() - self._turn_end) * 1000
                    self._turn_end = None
                self.set_state("replying")
            pcm = np.frombuffer(base64.b64decode(e["delta"]), "<i2").astype(np.float32) / 32768
            up = self._up.get(rid)
            self.speaker.push(rid, up.resample_chunk(pcm) if up is not None else pcm)
        elif t == "response.output_audio.paused":
            self.speaker.paused_rid = e["response_id"]  # the callback stops at its next block
            self._pause_at = time.monotonic()
            self.set_state("interrupted")
        elif t == "response.output_audio.resumed":
            self.speaker.paused_rid = None
            self.set_state("replying")
        elif t == "response.done":
            r = e["response"]
            if r["status"] != "completed":
                self.speaker.drop(r["id"])
                if self._pause_at is not None:
                    self.latency["stop"] = (time.monotonic() - self._pause_at) * 1000
                    self._pause_at = None
                self.set_state("listening")
            said = (r["output"] or [{}])[0].get("content", [{}])[0].get("transcript", "")
            lat = ", ".join(f"{k} {v:.0f} ms" for k, v in self.latency.items() if v is not None)
            self.say(f"reply {r['status']}: {said!r}" + (f" ({lat})" if lat else ""))
        elif t == "conversation.item.truncated":
            if self.current:
                self.speaker.drop(self.current)
            self.say(f"reply cut at {e['audio_end_ms']} ms")
        elif t == "error":
            self.say(f"server error {e['error']['code']}: {e['error']['message']}")

    # -- the status line ---------------------------------------------------------
    def set_state(self, state: str) -> None:
        if state != self.state:
            self.state = state
            if not self.tty:
                self.say(f"state: {state}")

    def say(self, line: str) -> None:
        prefix = "\r\033[K" if self.tty else ""
        print(f"{prefix}{line}", file=self.out, flush=True)

    def status_line(self) -> str:
        def bar(x: float) -> str:
            n = min(8, int(x * 40))
            return "#" * n + "." * (8 - n)

        lat = " ".join(f"{k} {v:.0f} ms" for k, v in self.latency.items() if v is not None) or "-"
        return f"[{self.state:^16}] mic {bar(self.levels[0])} spk {bar(self.levels[1])} | {lat} | heard: {self.heard[:40]!r}"

    async def _status(self) -> None:
        while True:
            await asyncio.sleep(0.1)  # a display refresh
            if self.speaker is not None:
                self.levels[1] = self.speaker.level(self.stream_time(), 0.1)
            if self.tty:
                print(f"\r\033[K{self.status_line()}", end="", file=self.out, flush=True)


def _set_jack_client_name(sd, name: str):
    """Name this program's JACK client (PortAudio reads it when it initialises).

    PortAudio keeps the pointer, not a copy: the caller must keep the returned
    buffer alive as long as audio runs."""
    import ctypes

    lib = ctypes.CDLL(sd._libname)
    buffer = ctypes.create_string_buffer(name.encode())
    if hasattr(lib, "PaJack_SetClientName"):
        lib.PaJack_SetClientName(buffer)
        sd._terminate()
        sd._initialize()
    return buffer


def list_devices() -> str:
    import sounddevice as sd

    return str(sd.query_devices())
