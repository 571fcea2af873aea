"""The web client in a real headless Chromium, with a WAV file as its microphone.

Needs Debian's ``chromium`` (``.ci/run`` installs it) and the Playwright package.
Without them the test is skipped with the reason printed; CI installs both, so
there it runs.
"""

from __future__ import annotations

import os
import shutil
from pathlib import Path

from duplex.app.clients.sounds import mix, noise, silence, speech, trim, write_wav
from duplex.app.clients.verdicts import wer
from tests.util import need

CHROMIUM = shutil.which("chromium") or "/usr/bin/chromium"
try:
    from playwright import async_api as playwright
except ImportError:  # reported by the test itself
    playwright = None
ARTIFACTS = Path(os.environ.get("DUPLEX_ARTIFACTS", Path(__file__).resolve().parent.parent / "artifacts"))
RATE = 48000


BARGE_IN_AT_S = 16.0
"""Where the interruption starts on the microphone track."""
STORY = " ".join(["Once upon a time a dog and a cat lived in a small house by the sea."] * 4)


async def _microphone(talker, path: Path) -> dict[str, float]:
    """One track: a question, then, well after its reply, the user talking over another one.

    The microphone file plays in real time from the start and cannot wait, so the
    test does not bet on how fast recognition is: the reply that gets interrupted
    answers a typed message, sent on the page's own audio clock (its microphone
    sample count) long before the interruption comes, and it lasts long past it.
    """
    a = trim(await speech(talker, "hello how are you today", RATE), RATE)
    c = trim(await speech(talker, "wait, what time is it now", RATE), RATE)  # a question, answered; not a command
    # Three seconds of room tone first: the noise suppressor settles before anyone speaks.
    head = mix(silence(3.0, RATE), a)
    track = mix(head, silence(BARGE_IN_AT_S - head.size / RATE, RATE), c, silence(6.0, RATE))
    room = noise(track.size / RATE + 1, RATE, level=20, seed=5)[: track.size]  # a real mic is never digitally silent
    write_wav(path, RATE, (track // 2 + room).astype(track.dtype))  # -6 dB: a microphone, not a line level
    return {"seconds": track.size / RATE}


def _chromium_args(mic: Path) -> list[str]:
    return [
        "--no-sandbox",
        "--disable-gpu",
        "--disable-quic",
        "--no-first-run",
        "--disable-background-networking",
        "--disable-component-update",
        "--disable-sync",
        "--use-fake-ui-for-media-stream",
        "--use-fake-device-for-media-stream",
        f"--use-file-for-fake-audio-capture={mic}%noloop",
        "--autoplay-policy=no-user-gesture-required",
    ]


async def test_browser_client_hears_plays_and_is_interrupted(server, talker, tmp_path):
    need(playwright is not None, "the browser test needs the playwright package")
    need(Path(CHROMIUM).exists(), "the browser test needs Debian's chromium (apt-get install -y chromium)")
    mic = tmp_path / "mic.wav"
    await _microphone(talker, mic)
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    args = _chromium_args(mic)
    async with playwright.async_playwright() as p:
        browser = await p.chromium.launch_persistent_context(
            str(tmp_path / "profile"),
            executable_path=CHROMIUM,
            headless=True,
            args=args,
            viewport={"width": 420, "height": 860},
        )
        try:
            page = browser.pages[0] if browser.pages else await browser.new_page()
            console: list[str] = []
            page.on("console", lambda m: console.append(f"{m.type}: {m.text}"))
            page.on("pageerror", lambda e: console.append(f"pageerror: {e}"))
            await page.goto(f"http://127.0.0.1:{server.port}/?transport=websocket")  # the fallback
            await page.keyboard.press("Tab")  # the page works from the keyboard: Connect has focus first
            assert await page.evaluate("document.activeElement.id") == "connect"
            await page.keyboard.press("Enter")
            await page.wait_for_function("window.duplex.state === 'listening'", timeout=15_000)
            # The browser's own canceller runs (the best it has: "all" where it knows it).
            assert await page.evaluate("window.duplex.echoCancellation") in ("all", True)

            # 1. The user's speech reaches the server and is transcribed.
            await page.wait_for_function("window.duplex.transcripts.length >= 1", timeout=20_000)
            heard = await page.evaluate("window.duplex.transcripts[0]")
            print("heard:", heard)
            assert wer("hello how are you today", heard) <= 0.4, heard

            # 2. The reply is played by the page: its worklet counts the whole reply.
            await page.wait_for_function(
                """() => {
                const d = window.duplex, ids = Object.keys(d.received);
                return ids.length >= 1 && d.events.includes('response.done')
                    && (d.played[ids[0]] || 0) >= d.received[ids[0]] * 0.98; }""",
                timeout=20_000,
            )
            first = await page.evaluate("Object.keys(window.duplex.received)[0]")
            received = await page.evaluate(f"window.duplex.received['{first}']")
            played = await page.evaluate(f"window.duplex.played['{first}']")
            assert received > 24000 * 0.8 and abs(played - received) <= 0.02 * received

            # 3. A typed message gets a long reply; talking over it stops output within 150 ms
            #    of the pause event, and the page shows the reply cut where the listener stopped
            #    hearing it. Typed on the microphone's clock, well before the interruption.
            mic_s = await page.evaluate("window.duplex.inputSamples") / 24000
            assert mic_s < BARGE_IN_AT_S - 3, f"the first reply ended {mic_s:.1f} s into the track: too slow to go on"
            await page.fill("#text", STORY)
            await page.keyboard.press("Enter")
            await page.wait_for_function(
                f"window.duplex.inputSamples >= {BARGE_IN_AT_S} * 24000 && window.duplex.pauses.length >= 1",
                timeout=40_000,
            )
            await page.wait_for_function(
                "document.querySelector('.msg.assistant.truncated .cut') !== null", timeout=20_000
            )
            await page.screenshot(path=str(ARTIFACTS / "browser-mid-conversation.png"), full_page=True)
            pause = await page.evaluate("window.duplex.pauses[0]")
            stop_ms = await page.evaluate("window.duplex.stopMs[0]")
            assert pause["wasLive"], "the reply was audibly playing when the pause came"
            assert stop_ms <= 150, f"output stopped {stop_ms:.0f} ms after the pause event"
            truncated = await page.evaluate("window.duplex.truncated[0]")
            second = await page.evaluate("Object.keys(window.duplex.received)[1]")
            assert truncated["response_id"] == second
            assert 0 < truncated["audio_end_ms"] < await page.evaluate(f"window.duplex.received['{second}']") / 24
            assert await page.locator(".msg.assistant.truncated .unheard").count() == 1

            # 4. Settings switch the session to binary audio frames; a typed message is
            #    answered and played through that path (once the interruption's own reply is over).
            await page.wait_for_function(
                """() => window.duplex.events.filter(e => e === 'response.done').length >= 3
                && window.duplex.buffered === 0""",
                timeout=20_000,
            )
            await page.click("#settings summary")
            await page.check("#binary")
            await page.fill("#silence", "600")
            await page.click("#settings-form button[type=submit]")
            await page.wait_for_function("window.duplex.binary === true", timeout=10_000)
            replies = await page.evaluate("Object.keys(window.duplex.received).length")
            await page.fill("#text", "binary frames work")
            await page.keyboard.press("Enter")
            await page.wait_for_function(
                f"""() => {{
                const d = window.duplex, ids = Object.keys(d.received);
                return ids.length > {replies} && (d.played[ids[ids.length - 1]] || 0) > 12000; }}""",
                timeout=20_000,
            )
            await page.locator(".msg.assistant .text", has_text="binary frames work").wait_for(timeout=10_000)
            assert await page.evaluate("window.duplex.errors") == [], console
        finally:
            await browser.close()


async def test_browser_client_calls_over_webrtc_by_default(server, talker, tmp_path):
    """The page's default: a WebRTC call. The same conversation: heard, answered on the
    call's track, and a reply talked over is cut where the listener stopped hearing it."""
    need(playwright is not None, "the browser test needs the playwright package")
    need(Path(CHROMIUM).exists(), "the browser test needs Debian's chromium (apt-get install -y chromium)")
    mic = tmp_path / "mic.wav"
    await _microphone(talker, mic)
    async with playwright.async_playwright() as p:
        browser = await p.chromium.launch_persistent_context(
            str(tmp_path / "profile"), executable_path=CHROMIUM, headless=True, args=_chromium_args(mic)
        )
        try:
            page = browser.pages[0] if browser.pages else await browser.new_page()
            console: list[str] = []
            page.on("console", lambda m: console.append(f"{m.type}: {m.text}"))
            page.on("pageerror", lambda e: console.append(f"pageerror: {e}"))
            await page.goto(f"http://127.0.0.1:{server.port}/")
            await page.click("#connect")
            await page.wait_for_function("window.duplex.state === 'listening'", timeout=15_000)
            assert await page.evaluate("window.duplex.transport") == "webrtc", console
            assert await page.evaluate("window.duplex.echoCancellation") in ("all", True)
            # 1. Heard, and answered on the call's track.
            await page.wait_for_function("window.duplex.transcripts.length >= 1", timeout=20_000)
            heard = await page.evaluate("window.duplex.transcripts[0]")
            assert wer("hello how are you today", heard) <= 0.4, heard
            await page.wait_for_function("window.duplex.events.includes('output_audio_buffer.stopped')", timeout=20_000)
            assert await page.evaluate("window.duplex.firstAudioMs.length") == 1
            assert "response.output_audio.delta" not in await page.evaluate("window.duplex.events")
            # The page shows what Chromium's jitter buffer held the reply (its part of a barge-in's stop).
            await page.wait_for_function("window.duplex.jitterMs !== null", timeout=10_000)
            jitter = await page.evaluate("window.duplex.jitterMs")
            assert 0 < jitter < 500, jitter
            shown = await page.evaluate("Math.round(window.duplex.jitterMs)")
            assert await page.inner_text("#lat-jitter") == f"{shown} ms"
            # 2. A typed message's long reply, talked over: cut, and shown cut.
            await page.fill("#text", STORY)
            await page.keyboard.press("Enter")
            await page.wait_for_function(
                "document.querySelector('.msg.assistant.truncated .cut') !== null", timeout=40_000
            )
            events = await page.evaluate("window.duplex.events")
            assert "output_audio_buffer.cleared" in events
            truncated = await page.evaluate("window.duplex.truncated[0]")
            assert truncated["audio_end_ms"] > 1000, truncated
            print("webrtc page: first audio", await page.evaluate("window.duplex.firstAudioMs"),
                  "ms; stop", await page.evaluate("window.duplex.stopMs"), "ms after speech_started; jitter buffer",
                  await page.evaluate("window.duplex.jitterMs"), "ms")  # fmt: skip
            assert await page.evaluate("window.duplex.errors") == [], console
        finally:
            await browser.close()
