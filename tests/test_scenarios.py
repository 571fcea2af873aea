"""The duplex suite: every scenario in tests/scenarios/ replayed against the real server."""

from __future__ import annotations

import asyncio
import json
import re
import sys
import wave
from pathlib import Path

import pytest

from duplex.app.clients.replay import Runner
from duplex.app.clients.scenario import ScenarioError, load, parse
from tests.util import stage_tasks, until

SCENARIOS = sorted(Path(__file__).parent.joinpath("scenarios").glob("*.toml"))


@pytest.fixture
def runner(talker, tmp_path) -> Runner:
    return Runner("ws://placeholder", talker=talker, wav_dir=tmp_path / "wav")


async def _run(runner: Runner, server, name: str):
    runner.url = f"ws://127.0.0.1:{server.port}/v1/realtime"
    return await runner.run(load(Path(__file__).parent / "scenarios" / f"{name}.toml"))


@pytest.mark.parametrize("path", SCENARIOS, ids=[p.stem for p in SCENARIOS])
async def test_scenario(path: Path, server, runner, espeak_runtime):
    runner.url = f"ws://127.0.0.1:{server.port}/v1/realtime"
    result = await runner.run(load(path))
    assert result.passed, "\n".join(result.failures)
    assert result.stale_bytes == 0
    # Whatever the scenario did, the server let go of it afterwards.
    await until(lambda: not server.connections, what="session freed")
    assert stage_tasks() == []
    assert await asyncio.to_thread(espeak_runtime.wait_idle, 10)
    assert result.wav and Path(result.wav).is_file()


async def test_disconnect_mid_reply_frees_the_reply(server, runner):
    result = await _run(runner, server, "disconnect_mid_reply")
    assert result.passed
    await until(lambda: not server.connections, what="session freed")
    assert server.metrics.value("duplex_cancels_total", reason="client_disconnected") == 1
    assert stage_tasks() == []


async def test_a_client_that_stops_reading_holds_memory_within_bounds(server, runner):
    result = await _run(runner, server, "stalled_reader")
    assert result.passed, result.failures
    bound = server.config.queues.talker_queue.max_bytes + server.config.queues.output_queue.max_bytes
    assert 0 < server.metrics.value("duplex_queue_high_water_bytes") <= bound
    assert result.replies[0]["received_ms"] > 20_000, "the stall held the reply back, it did not lose it"
    await until(lambda: not server.connections, what="clean close")


async def test_two_scenarios_on_two_connections_at_once(server, runner):
    runner.url = f"ws://127.0.0.1:{server.port}/v1/realtime"
    scenarios = [load(Path(__file__).parent / "scenarios" / f"{n}.toml") for n in ("plain_turn", "barge_in_mid")]
    results = await runner.run_many(scenarios, parallel=True)
    assert [r.passed for r in results] == [True, True], [r.failures for r in results]
    assert results[1].metrics["stop"] and results[0].metrics["response"]


async def test_a_failed_expectation_fails_the_scenario(server, runner):
    scenario = parse(
        {
            "step": [{"silence": 0.5}, {"say": "hello how are you today"}, {"wait": "answered", "timeout": 15}],
            "expect": [
                {"event": "response.done", "where": {"response.status": "cancelled"}, "count": 1},
                {"latency": "response", "max_ms": 1},
            ],
        },
        name="wrong on purpose",
    )
    runner.url = f"ws://127.0.0.1:{server.port}/v1/realtime"
    result = await runner.run(scenario)
    assert not result.passed
    assert len(result.failures) == 2 and "wanted exactly 1" in result.failures[0]


def test_scenario_files_are_parsed_strictly(tmp_path):
    bad = tmp_path / "bad.toml"
    bad.write_text('[[step]]\nsay = "hi"\nvoise = "en-us"\n')
    with pytest.raises(ScenarioError, match="step 1.*voise"):
        load(bad)
    bad.write_text('[[step]]\nsilence = 1\n[[expect]]\nlatency = "sometime"\nmax_ms = 3\n')
    with pytest.raises(ScenarioError, match="latency must be one of"):
        load(bad)
    bad.write_text('[[step]]\nwav = "missing.wav"\n')
    with pytest.raises(ScenarioError, match="no WAV file"):
        load(bad)
    bad.write_text('name = "x"\nstep = []\n')
    with pytest.raises(ScenarioError, match="at least one"):
        load(bad)


async def test_replay_command_line(server, tmp_path):
    """``duplex replay`` as a user runs it: table, JSON report, WAVs, exit status."""
    good = Path(__file__).parent / "scenarios" / "plain_turn.toml"
    failing = tmp_path / "failing.toml"
    failing.write_text(
        'name = "expects a cancel"\n[[step]]\nsay = "hello how are you today"\n'
        '[[step]]\nwait = "answered"\n[[expect]]\nreplies = 1\nstatus = "cancelled"\n'
    )
    report = tmp_path / "report.json"
    proc = await asyncio.create_subprocess_exec(
        sys.executable,
        "-m",
        "duplex.app",
        "replay",
        str(good),
        str(failing),
        "--url",
        f"ws://127.0.0.1:{server.port}/v1/realtime",
        "--report",
        str(report),
        "--wav-dir",
        str(tmp_path / "wav"),
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.STDOUT,
    )
    out, _ = await asyncio.wait_for(proc.communicate(), 120)
    text = out.decode()
    assert proc.returncode == 1, text
    assert "| plain turn | pass |" in text and "| expects a cancel | FAIL |" in text
    data = json.loads(report.read_text())
    assert [r["passed"] for r in data] == [True, False]
    with wave.open(str(tmp_path / "wav" / "plain_turn.wav")) as w:
        assert w.getnchannels() == 2 and w.getframerate() == 24000 and w.getnframes() > 24000


@pytest.fixture(scope="module")
def default_server():
    from lab.servers import ServerProcess

    # Every default (semantic_vad, hibari, Whisper, Smart Turn) but the thinker: a scenario judges
    # the replies' words against what was said (the echo's), not a model's answers.
    with ServerProcess("--thinker", "echo").running() as proc:
        yield proc


@pytest.mark.parametrize("path", SCENARIOS, ids=[p.stem for p in SCENARIOS])
async def test_scenario_against_the_default_server(path: Path, default_server, talker, tmp_path):
    # The scenarios were written against the test configuration (server_vad); a user replays
    # them against `duplex serve` as it starts, and they must hold there too.
    runner = Runner(default_server.url, talker=talker, wav_dir=tmp_path / "wav")
    result = await runner.run(load(path))
    assert result.passed, "\n".join(result.failures)
    assert result.stale_bytes == 0


async def test_the_default_server_counts_the_turns_each_whisper_heard(default_server):
    from duplex.app.clients.realtime import RealtimeClient
    from lab.voices import load_corpus, resample

    def counts() -> dict[str, int]:
        metrics = default_server.http("/metrics").decode()
        found = re.findall(r'^duplex_turn_transcripts_total\{model="([^"]+)"\} (\S+)$', metrics, re.M)
        return {model: int(float(n)) for model, n in found}

    before = counts()
    clip = next(c for c in load_corpus().turns if c.split == "heldout")
    c = await RealtimeClient.connect(default_server.port)
    await c.update(turn_detection=None)
    await c.append(resample(clip.pcm, clip.rate, 24000))
    await c.send("input_audio_buffer.commit")
    await c.until("conversation.item.input_audio_transcription.completed")
    await c.close()
    after = counts()
    assert set(after) == {"tiny.en", "base"}
    assert sum(after.values()) == sum(before.get(m, 0) for m in after) + 1  # one turn, one model
