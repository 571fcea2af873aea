"""``duplex mic``: talk to the server from a terminal, through sounddevice (PortAudio).

One full-duplex callback stream: the microphone at the device's rate is
resampled to the session's 24 kHz and streamed; replies are resampled to the
device's rate into a jitter buffer the output callback drains. On a pause or a
cancel the callback stops or flushes at its next block; on a duck it plays on quieter. What was *played* comes
from the stream's own clock (the DAC time of each block), not from what was
queued, and goes back as ``playback.ack``.

Speakers without headphones: the microphone hears the reply. WebRTC's echo canceller
(the server's own, :mod:`duplex.pipeline.webrtc_apm`) takes it out here, at the
device's rate, with what the speaker played in the same callback as its reference:
the assistant does not interrupt itself, and the user talks over it at any level.
The session asks the server not to cancel again (``echo_cancellation: false``).
"""

from __future__ import annotations

import asyncio
import base64
import ctypes
import json
import sys
import time
from typing import Any, TextIO

import numpy as np
import soxr

from duplex.app.clients.playback import Playback
from duplex.app.clients.realtime import RealtimeClient
from duplex.pipeline.echo import Cleaner
from duplex.pipeline.resampling import LiveResampler

SESSION_RATE = 24000
ACK_S = 0.2


class DemoError(RuntimeError):
    """A problem the user can fix (device, rate, server); printed, not traced."""


class MicDemo:
    """The terminal voice client."""

    def __init__(
        self,
        url: str,
        *,
        input_device: str | int | None = None,
        output_device: str | int | None = None,
        rate: int | None = None,
        echo_cancellation: bool = True,
        client_name: str | None = None,
        out: TextIO = sys.stderr,
    ) -> None:
        self.url = url
        self.devices = (input_device, output_device)
        self.rate = rate
        self.echo_cancellation = echo_cancellation
        self.canceller: Cleaner | None = None
        self.client_name = client_name
        self.out = out
        self.tty = out.isatty()
        self.state = "listening"
        self.heard = ""
        self.latency: dict[str, float | None] = {"first audio": None, "stop": None}
        self.levels = [0.0, 0.0]
        self.input_samples = 0
        self.current: str | None = None
        self._mic: asyncio.Queue[tuple[np.ndarray, np.ndarray]] | None = None
        self._stream: Any = None
        self.speaker: Playback | None = None
        self._turn_end: float | None = None
        self._pause_at: float | None = None

    # -- devices -------------------------------------------------------------
    def open_audio(self, loop: asyncio.AbstractEventLoop) -> None:
        import sounddevice as sd

        if self.client_name:
            # Kept, though never read: PortAudio holds a pointer into this buffer.
            self._jack_name = _set_jack_client_name(sd, self.client_name)
        try:
            info = sd.query_devices(self.devices[0], "input")
            sd.query_devices(self.devices[1], "output")
        except (ValueError, sd.PortAudioError) as exc:
            raise DemoError(f"no such audio device: {exc} (see `duplex mic --list-devices`)") from None
        rate = int(self.rate or info["default_samplerate"])
        self.speaker = Playback(rate)
        if self.echo_cancellation:
            from duplex.pipeline.webrtc_apm import WebRtcCleaner

            self.canceller = WebRtcCleaner(rate, echo=True, noise=False)
        self._mic = asyncio.Queue()
        mic = self._mic
        speaker = self.speaker

        def callback(indata: np.ndarray, outdata: np.ndarray, frames: int, t: Any, status: Any) -> None:
            if status:  # an overflow or underflow: a block was lost somewhere
                speaker.xruns += 1
            speaker.fill(outdata, t.outputBufferDacTime)
            loop.call_soon_threadsafe(mic.put_nowait, (indata[:, 0].copy(), outdata[:, 0].copy()))

        try:
            self._stream = sd.Stream(
                device=self.devices, samplerate=rate, channels=1, dtype="float32", callback=callback, latency="low"
            )
            self._stream.start()
        except sd.PortAudioError as exc:
            text = str(exc)
            if "sample rate" in text.lower():
                raise DemoError(f"the device does not run at {rate} Hz ({text}); try --rate with its rate") from None
            if "unavailable" in text.lower() or "busy" in text.lower():
                raise DemoError(f"the audio device is busy ({text}); close what uses it") from None
            raise DemoError(f"cannot open the audio device: {text}") from None
        self._rate = rate
        self._down = LiveResampler(rate, SESSION_RATE) if rate != SESSION_RATE else None
        self._up: dict[str, soxr.ResampleStream] = {}

    def stream_time(self) -> float:
        return self._stream.time if self._stream is not None else time.monotonic()

    def close_audio(self) -> None:
        if self._stream is not None:
            # Abort, not stop: stop waits for every queued buffer to play, and on a busy
            # machine that held Ctrl-C for more than 15 s.
            self._stream.abort()
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
                    client = await RealtimeClient.open(
                        self.url, open_timeout=5, close_timeout=2, keep=False, id_prefix="mic", expect_created=False
                    )
                    try:
                        backoff = 1.0
                        self.say(f"connected to {self.url}")
                        await self.session(client)
                    finally:
                        await client.close()
                except (TimeoutError, OSError, websockets.InvalidHandshake, websockets.ConnectionClosed) as exc:
                    if once:
                        raise DemoError(f"lost the server at {self.url}: {exc}") from None
                    self.say(f"lost the server ({exc or type(exc).__name__}); reconnecting in {backoff:.0f} s")
                    await asyncio.sleep(backoff)  # a reconnect backoff: real waiting, by design
                    backoff = min(backoff * 2, 10.0)
        finally:
            self.close_audio()

    async def session(self, client: RealtimeClient) -> None:
        update: dict[str, Any] = {"audio": {"input": {"format": {"type": "audio/pcm", "rate": SESSION_RATE}}}}
        if self.canceller is not None:
            update["echo_cancellation"] = False  # done here, with the speaker's own output
        await client.send("session.update", session=update)
        async with asyncio.TaskGroup() as tg:
            tg.create_task(self._capture(client))
            tg.create_task(self._acks(client))
            tg.create_task(self._status())
            async for message in client.ws:
                if isinstance(message, str):
                    self.on_event(json.loads(message))

    async def _capture(self, client: RealtimeClient) -> None:
        assert self._mic is not None and self.speaker is not None
        pending = np.zeros(0, np.float32)
        frame = SESSION_RATE // 50
        while True:
            block, played = await self._mic.get()
            if self.canceller is not None:  # at the device's rate, before anything else
                near = np.clip(np.rint(block * 32767), -32768, 32767).astype(np.int16)
                far = np.clip(np.rint(played * 32767), -32768, 32767).astype(np.int16)
                block = self.canceller.process(near, far).astype(np.float32) / 32768
            x = self._down.resample_chunk(block) if self._down is not None else block
            pending = np.concatenate([pending, x])
            while pending.size >= frame:
                f, pending = pending[:frame], pending[frame:]
                self.levels[0] = float(np.sqrt(np.mean(f**2)))
                pcm = np.clip(np.rint(f * 32767), -32768, 32767).astype("<i2")
                self.input_samples += pcm.size
                await client.append(pcm)

    async def _acks(self, client: RealtimeClient) -> None:
        assert self.speaker is not None
        while True:
            await asyncio.sleep(ACK_S)  # a report period, like any client's
            rid = self.current
            if rid is not None:
                played = self.speaker.played(rid, self.stream_time()) * SESSION_RATE // self._rate
                await client.send(
                    "playback.ack", response_id=rid, played_samples=played, input_samples=self.input_samples
                )

    def on_event(self, e: dict[str, Any]) -> None:
        """React to a server event: play, pause, flush, and keep the status current."""
        assert self.speaker is not None
        t = e["type"]
        if t == "input_audio_buffer.speech_started":
            self.heard = ""  # the status line shows the words as they are heard
            self.set_state("you are speaking")
        elif t == "conversation.item.input_audio_transcription.delta":
            self.heard += e["delta"]
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
        elif t == "response.output_audio.ducked":
            self.speaker.ducked = (e["response_id"], 10 ** (e["gain_db"] / 20))
            self._pause_at = time.monotonic()
            self.set_state("interrupted")
        elif t == "response.output_audio.resumed":
            self.speaker.paused_rid = None
            self.speaker.ducked = None
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
            lat = [f"{k} {v:.0f} ms" for k, v in self.latency.items() if v is not None]
            self.say(f"reply {r['status']}: {said!r}" + (f" ({', '.join(lat)})" if lat else ""))
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
        levels = f"mic {bar(self.levels[0])} spk {bar(self.levels[1])}"
        return f"[{self.state:^16}] {levels} | {lat} | heard: {self.heard[-40:]!r}"

    async def _status(self) -> None:
        while True:
            await asyncio.sleep(0.1)  # a display refresh
            if self.speaker is not None:
                self.levels[1] = self.speaker.level(0.1)
            if self.tty:
                print(f"\r\033[K{self.status_line()}", end="", file=self.out, flush=True)


def _set_jack_client_name(sd: Any, name: str) -> ctypes.Array[ctypes.c_char]:
    """Name this program's JACK client (PortAudio reads it when it initialises).

    PortAudio keeps the pointer, not a copy: the caller must keep the returned
    buffer alive as long as audio runs."""
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
