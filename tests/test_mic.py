"""``duplex mic`` for real: PortAudio on JACK's dummy backend, a virtual room around it.

A JACK client in this test is the room: it speaks an eSpeak NG script into the
demo's microphone, records the demo's speaker, and feeds that speaker back into
the microphone at -10 dB (a laptop without headphones). The demo runs as a
subprocess against the real server. Needs ``jackd`` and ``libportaudio2`` (Debian:
jackd2, libportaudio2); ``.ci/run`` installs them. Without them the test is skipped
with the reason printed.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import shutil
import signal
import subprocess
import sys
import threading
from pathlib import Path

import numpy as np
import pytest

from duplex.app.clients.sounds import mix, silence, speech, trim, voiced_bounds
from tests.util import need, until

RATE = 16000  # jackd's rate: every PortAudio stream on it must use it
ECHO = 0.3  # speaker-to-microphone coupling, -10 dB


def _jack_ok() -> bool:
    return subprocess.run(["jack_lsp"], capture_output=True, timeout=10).returncode == 0


@pytest.fixture(scope="module")
def jack():
    """A JACK server with the dummy backend: real-time pacing, no sound card."""
    need(shutil.which("jackd") is not None, "the mic test needs jackd (Debian: jackd2)")
    try:
        import sounddevice  # noqa: F401
    except (ImportError, OSError) as exc:
        need(False, f"the mic test needs sounddevice and libportaudio2 ({exc})")
    proc = None
    if not _jack_ok():
        proc = subprocess.Popen(
            ["jackd", "--no-realtime", "-d", "dummy", "-r", str(RATE), "-p", "512"],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        for _ in range(100):
            if _jack_ok():
                break
            if proc.poll() is not None:
                pytest.fail("jackd exited at start")
            threading.Event().wait(0.1)  # waiting for an external daemon to come up
    yield
    import sounddevice as sd

    while sd._initialized:  # leave JACK first: PortAudio hangs at exit if jackd went while it was a client
        sd._terminate()
    if proc is not None:
        proc.terminate()
        proc.wait(10)


def _ports() -> str:
    return subprocess.run(["jack_lsp"], capture_output=True, text=True).stdout


def _wire(pairs_off: list[tuple[str, str]], pairs_on: list[tuple[str, str]]) -> None:
    for a, b in pairs_off:
        subprocess.run(["jack_disconnect", a, b], capture_output=True)
    for a, b in pairs_on:
        subprocess.run(["jack_connect", a, b], check=True, capture_output=True)


class Room:
    """The JACK client that is the demo's room: words to say, and ears.

    It says ``first``; then, on its own audio clock, it waits until it has heard the
    reply from the demo's speaker for ``talk_over_after`` seconds, and only then says
    ``then`` over it: however slow the server is today, the user interrupts a reply
    that is really playing."""

    def __init__(self, first: np.ndarray, then: np.ndarray, talk_over_after: float) -> None:
        import sounddevice as sd

        self.sd = sd
        self.first = first.astype(np.float32) / 32768
        self.then = then.astype(np.float32) / 32768
        self.wait = int(talk_over_after * RATE)
        self.script = self.first
        self.pos = 0  # in the current script
        self.clock = 0  # samples since the room started
        self.reply_heard = 0
        self.then_at: int | None = None
        """Room sample where ``then`` began."""
        self.heard: list[np.ndarray] = []
        self.last = np.zeros(0, np.float32)
        self.done = threading.Event()
        self.started = threading.Event()

    def callback(self, indata, outdata, frames, t, status) -> None:
        if not self.started.is_set():
            outdata.fill(0)
            return
        spk = indata[:, 0].copy()
        self.heard.append(spk)
        if self.script is self.first and self.pos >= self.first.size:
            if np.sqrt(np.mean(spk**2)) > 0.02:  # the reply is playing from the speaker
                self.reply_heard += frames
            if self.reply_heard >= self.wait:
                self.script, self.pos, self.then_at = self.then, 0, self.clock
        say = self.script[self.pos : self.pos + frames]
        out = np.zeros(frames, np.float32)
        out[: say.size] = say
        echo = self.last[:frames]
        out[: echo.size] += ECHO * echo  # what the speaker said a block ago reaches the mic
        self.last = spk
        outdata[:, 0] = np.clip(out, -1, 1)
        self.pos += frames
        self.clock += frames
        if self.script is self.then and self.pos >= self.then.size:
            self.done.set()

    def open(self):
        from duplex.app.clients.mic import _set_jack_client_name

        self._name = _set_jack_client_name(self.sd, "room")
        self.stream = self.sd.Stream(
            device=("system", "system"), samplerate=RATE, channels=1, dtype="float32", callback=self.callback
        )
        self.stream.start()

    def close(self) -> None:
        if getattr(self, "stream", None) is not None:
            self.stream.stop()
            self.stream.close()
            self.stream = None
            # Leave JACK now: PortAudio asserts if it is still a client when jackd goes.
            self.sd._terminate()


async def _start_demo(url: str, jack_name: str) -> tuple[asyncio.subprocess.Process, list[str], asyncio.Task]:
    """The real `duplex mic` as a subprocess, its output lines collected as they come."""
    demo = await asyncio.create_subprocess_exec(
        sys.executable,
        "-X",
        "faulthandler",  # a demo that hangs at exit says where (SIGABRT below)
        "-m",
        "duplex.app",
        "mic",
        "--url",
        url,
        "--input",
        "system",
        "--output",
        "system",
        "--jack-name",
        jack_name,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.STDOUT,
        env={**os.environ, "PYTHONUNBUFFERED": "1"},
    )
    lines: list[str] = []

    async def read() -> None:
        assert demo.stdout is not None
        while line := await demo.stdout.readline():
            lines.append(line.decode().rstrip())

    return demo, lines, asyncio.create_task(read())


async def _stop_demo(demo: asyncio.subprocess.Process, reader: asyncio.Task) -> int | None:
    """Ctrl-C, as a user would; the exit status, or None if it had to be killed."""
    demo.send_signal(signal.SIGINT)
    try:
        code: int | None = await asyncio.wait_for(demo.wait(), 15)
    except TimeoutError:
        with contextlib.suppress(OSError):  # how the demo's signals stood
            print(Path(f"/proc/{demo.pid}/status").read_text(), file=sys.stderr)
        demo.send_signal(signal.SIGABRT)  # faulthandler prints every thread's stack
        try:
            await asyncio.wait_for(demo.wait(), 5)
        except TimeoutError:
            demo.kill()
            await demo.wait()
        code = None
    await reader
    return code


def _rms(x: np.ndarray, hop: int = RATE // 20) -> np.ndarray:
    n = x.size // hop
    return np.sqrt((x[: n * hop].reshape(n, hop).astype(np.float64) ** 2).mean(axis=1))


async def test_mic_demo_hears_answers_and_is_interrupted_through_a_virtual_room(jack, server, talker):
    # The echo thinker says the question back: long enough that the reply is still being
    # made when the user's interruption is decided, even by its length alone (0.8 s on a
    # recogniser too slow to say): cancelled, not only cut.
    ask = trim(
        await speech(talker, "please tell me a long story about a dog and a cat who lived on a farm", RATE), RATE
    )
    # Not a command to stop: the reply to it plays over its own echo too, after the user
    # talked over the last one (once, that reply's echo reached the server raw and it
    # interrupted itself).
    stop = trim(await speech(talker, "wait, tell me about the weather instead", RATE), RATE)
    ask_end = int(1.5 * RATE) + ask.size
    # The user talks over the reply once it has played a second (past the echo canceller's
    # first adaptation), whenever that is.
    room = Room(mix(silence(1.5, RATE), ask), mix(stop, silence(3.0, RATE)), talk_over_after=1.0)

    demo, lines, reader = await _start_demo(f"ws://127.0.0.1:{server.port}/v1/realtime", "duplexmic")
    try:
        await until(
            lambda: any("connected" in ln for ln in lines) and "duplexmic:in_0" in _ports(), 30, what="the demo on JACK"
        )
        await asyncio.to_thread(room.open)
        await until(lambda: "room:in_0" in _ports(), 10, what="the room on JACK")
        # The room, not the (silent) dummy card, is the demo's world.
        _wire(
            [
                ("system:capture_1", "duplexmic:in_0"),
                ("duplexmic:out_0", "system:playback_1"),
                ("system:capture_1", "room:in_0"),
                ("room:out_0", "system:playback_1"),
            ],
            [("room:out_0", "duplexmic:in_0"), ("duplexmic:out_0", "room:in_0")],
        )
        room.started.set()
        assert await asyncio.to_thread(room.done.wait, 60), "the script did not play out"
        assert room.then_at is not None
    finally:
        try:
            code = await _stop_demo(demo, reader)
        finally:
            await asyncio.to_thread(room.close)  # leave JACK before jackd goes, whatever happened
        print("\n".join(lines))
    log = "\n".join(lines)
    assert code is not None, f"the demo did not exit within 15 s of Ctrl-C\n{log}"
    assert code == 0, log
    assert room.then_at is not None
    stop_on = room.then_at + voiced_bounds(stop, RATE)[0]
    heard = np.concatenate(room.heard)
    level = _rms(heard)
    hop = RATE // 20
    loud = level > 0.02
    # The reply came out of the speaker after the question...
    reply_on = next(i for i in range(ask_end // hop, len(loud)) if loud[i]) * hop
    assert reply_on < stop_on, log
    # ...and kept playing over its own echo until the user spoke (no self-interruption):
    # no silence longer than a pause between words, one interruption, cut where the user began.
    gaps, run = [], 0
    for on in loud[reply_on // hop : stop_on // hop]:
        run = 0 if on else run + 1
        gaps.append(run)
    assert max(gaps) * 50 <= 400, f"the reply went quiet for {max(gaps) * 50} ms before the barge-in\n{log}"
    cancelled = next(i for i, ln in enumerate(lines) if ln.startswith("reply cancelled"))
    assert sum("state: interrupted" in ln for ln in lines[:cancelled]) == 1, log
    cut = int(next(ln for ln in lines if ln.startswith("reply cut at")).split()[3])
    assert cut >= (stop_on - reply_on) * 1000 / RATE - 300, f"cut at {cut} ms: it stopped before the user spoke\n{log}"
    # Talking over it stopped it: the first quiet stretch longer than a word gap.
    quiet_from = next(i for i in range(stop_on // hop, len(loud) - 8) if not loud[i : i + 8].any()) * hop
    stop_ms = (quiet_from - stop_on) * 1000 / RATE
    assert stop_ms <= 500, f"output went on {stop_ms:.0f} ms after the user began\n{log}"
    assert "heard: 'please tell me" in log or "heard: " in log, log
    assert any("reply cancelled" in ln for ln in lines), log
    assert any("state: interrupted" in ln for ln in lines), log
    print(f"\nstop after barge-in: {stop_ms:.0f} ms (room clock, 50 ms windows)\n{log}")


async def test_mic_demo_reconnects_when_the_server_comes_back(jack, talker, make_server):
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    demo, lines, reader = await _start_demo(f"ws://127.0.0.1:{port}/v1/realtime", "duplexmic2")
    try:
        await until(lambda: any("lost the server" in ln for ln in lines), 30, what="a clear 'lost the server' line")
        await make_server(port=port)  # the server comes (back) up on that port
        await until(lambda: any(ln.startswith("connected") for ln in lines), 30, what="reconnected")
    finally:
        code = await _stop_demo(demo, reader)
    assert code == 0, "\n".join(lines)
    assert "reconnecting in" in "\n".join(lines)


def test_mic_demo_names_a_missing_device(jack):
    out = subprocess.run(
        [sys.executable, "-m", "duplex.app", "mic", "--input", "no-such-microphone"],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert out.returncode == 1
    assert "no such audio device" in out.stderr and "--list-devices" in out.stderr
    listed = subprocess.run(
        [sys.executable, "-m", "duplex.app", "mic", "--list-devices"], capture_output=True, text=True, timeout=60
    )
    assert listed.returncode == 0 and "system" in listed.stdout
