"""The OpenAI Agents JS SDK's default browser transport (WebRTC), unchanged, in a real
headless Chromium against Duplex: a spoken question answered, a barge-in truncated.

The SDK is the conformance suite's pinned ``@openai/agents-realtime`` (its UMD bundle,
``tests/conformance/install.sh``); the page that drives it is served on the server's
own origin by the browser's request routing, so its ``POST /v1/realtime/calls`` is a
same-origin request, as a page served next to Duplex makes it. The microphone is a WAV
file (Chromium's fake capture device). Needs Debian's ``chromium``, Playwright and the
conformance install; without them the test is skipped with the reason printed.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

from duplex.app.clients.sounds import mix, noise, silence, speech, trim, write_wav
from tests.util import need

CHROMIUM = shutil.which("chromium") or "/usr/bin/chromium"
SDK = Path(__file__).parent / "conformance/node/node_modules/@openai/agents-realtime/dist/bundle"
UMD = SDK / "openai-realtime-agents.umd.js"
try:
    from playwright import async_api as playwright
except ImportError:  # reported by the test itself
    playwright = None
RATE = 48000
TALK_OVER_S = 2.5
"""How long after the question ends the user talks over the reply (the echo thinker's
reply says the question back: ~4 s of speech, begun ~1 s after the question)."""

PAGE = """<!doctype html><meta charset="utf-8"><title>Agents SDK over WebRTC</title>
<script src="/sdk/openai-realtime-agents.umd.js"></script>
<script>
const { RealtimeAgent, RealtimeSession } = OpenAIAgentsRealtime;
window.events = [];
window.errors = [];
(async () => {
  try {
    const agent = new RealtimeAgent({ name: "assistant", instructions: "Answer briefly." });
    const session = new RealtimeSession(agent, { transport: "webrtc" });
    session.on("transport_event", (e) => window.events.push(e));
    session.on("error", (e) => window.errors.push(String(e.error && (e.error.message || e.error))));
    session.on("audio_interrupted", () => { window.interrupted = true; });
    // An ephemeral-looking key: the SDK refuses a plain one in a browser; Duplex has none set.
    await session.connect({ apiKey: "ek_duplex_local", url: location.origin + "/v1/realtime/calls" });
    window.session = session;
    window.connected = true;
  } catch (err) {
    window.errors.push(String(err && (err.stack || err.message || err)));
  }
})();
</script>"""


async def test_the_agents_sdk_in_a_browser_talks_to_duplex_over_webrtc(server, talker, tmp_path):
    need(playwright is not None, "the browser test needs the playwright package")
    need(Path(CHROMIUM).exists(), "the browser test needs Debian's chromium (apt-get install -y chromium)")
    need(UMD.exists(), "the Agents SDK test needs tests/conformance/install.sh (the pinned @openai/agents-realtime)")
    ask = trim(
        await speech(talker, "please tell me a long story about a dog and a cat who lived on a farm", RATE), RATE
    )
    stop = trim(await speech(talker, "wait, please stop talking now", RATE), RATE)
    head = mix(silence(3.0, RATE), ask)
    track = mix(head, silence(TALK_OVER_S, RATE), stop, silence(10.0, RATE))
    room = noise(track.size / RATE + 1, RATE, level=20, seed=5)[: track.size]
    mic = tmp_path / "mic.wav"
    write_wav(mic, RATE, (track // 2 + room).astype(track.dtype))
    args = [
        "--no-sandbox",
        "--disable-gpu",
        "--no-first-run",
        "--disable-background-networking",
        "--use-fake-ui-for-media-stream",
        "--use-fake-device-for-media-stream",
        f"--use-file-for-fake-audio-capture={mic}%noloop",
        "--autoplay-policy=no-user-gesture-required",
    ]
    origin = f"http://127.0.0.1:{server.port}"
    async with playwright.async_playwright() as p:
        browser = await p.chromium.launch(executable_path=CHROMIUM, headless=True, args=args)
        try:
            page = await browser.new_page()
            console: list[str] = []
            page.on("console", lambda m: console.append(f"{m.type}: {m.text}"))
            await page.route(f"{origin}/sdk-test.html", lambda r: r.fulfill(body=PAGE, content_type="text/html"))
            await page.route(
                f"{origin}/sdk/openai-realtime-agents.umd.js",
                lambda r: r.fulfill(path=str(UMD), content_type="text/javascript"),
            )
            await page.goto(f"{origin}/sdk-test.html")
            await page.wait_for_function("window.connected === true || window.errors.length > 0", timeout=20_000)
            assert await page.evaluate("window.errors") == [], console
            # The question, answered on the track the SDK plays.
            await page.wait_for_function(
                "window.events.some(e => e.type === 'output_audio_buffer.started')", timeout=30_000
            )
            # The user talks over the reply: cancelled and cut.
            await page.wait_for_function(
                "window.events.some(e => e.type === 'conversation.item.truncated')", timeout=30_000
            )
            events = await page.evaluate("window.events")
        finally:
            await browser.close()
    types = [e["type"] for e in events]
    heard = [e["transcript"] for e in events if e["type"] == "conversation.item.input_audio_transcription.completed"]
    assert heard and "story" in heard[0].lower(), heard
    first = next(e["response"]["id"] for e in events if e["type"] == "response.created")
    done = [e["response"]["status"] for e in events if e["type"] == "response.done" and e["response"]["id"] == first]
    assert done == ["cancelled"], json.dumps(types)
    assert "output_audio_buffer.cleared" in types
    assert "response.output_audio.delta" not in types, "audio on the track, not the channel"
    cut = next(e for e in events if e["type"] == "conversation.item.truncated")
    assert cut["audio_end_ms"] > 500, cut
