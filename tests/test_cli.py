"""``duplex serve`` as a user runs it: a real process, a real port, SIGTERM."""

from __future__ import annotations

import asyncio
import importlib.util
import json
import os
import signal
import socket
import sys
import urllib.request

import websockets

from lab.net import free_port
from tests.util import need

HAVE_VLLM = all(importlib.util.find_spec(m) is not None for m in ("vllm", "snac", "torch"))


async def test_serve_starts_answers_and_closes_sessions_on_sigterm():
    port = free_port()
    proc = await asyncio.create_subprocess_exec(
        sys.executable,
        "-m",
        "duplex.app",
        "serve",
        "--port",
        str(port),
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.STDOUT,
        env={**os.environ, "PYTHONUNBUFFERED": "1"},
    )
    try:
        # A bound, not a target: the default server loads the chat model (~14 s idle; past
        # 30 s twice in a full run on two busy cores).
        async with asyncio.timeout(90):
            while b"listening" not in (line := await proc.stdout.readline()):
                assert line, "server exited before listening"
        body = await asyncio.to_thread(lambda: urllib.request.urlopen(f"http://127.0.0.1:{port}/healthz").read())
        assert json.loads(body)["status"] == "ok"
        async with websockets.connect(f"ws://127.0.0.1:{port}/v1/realtime") as ws:
            assert json.loads(await ws.recv())["type"] == "session.created"
            proc.send_signal(signal.SIGTERM)
            try:
                async with asyncio.timeout(10):
                    await ws.recv()
            except websockets.ConnectionClosed as closed:
                assert closed.rcvd is not None and closed.rcvd.code == 1001  # going away
        assert await asyncio.wait_for(proc.wait(), 10) == 0
        assert proc.stdout is not None
        rest = await proc.stdout.read()
        assert b"Traceback" not in rest and b" ERROR " not in rest, rest.decode()[-2000:]
    finally:
        if proc.returncode is None:
            proc.kill()
            await proc.wait()


def test_bad_port_is_a_clear_error(capsys):
    from duplex.app.cli.main import main

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        s.listen()
        assert main(["serve", "--port", str(s.getsockname()[1])]) == 1
    assert "cannot serve" in capsys.readouterr().err
    assert main(["serve", "--asr-workers", "0"]) == 2
    assert "--asr-workers must be at least 1" in capsys.readouterr().err


def _serve(*args: str) -> tuple[int, str]:
    """``duplex serve`` in this process on a free port: its exit code and stderr."""
    import contextlib
    import io

    from duplex.app.cli.main import main

    err = io.StringIO()
    with contextlib.redirect_stderr(err):
        code = main(["serve", "--port", "0", *args])
    return code, err.getvalue()


def test_thinker_configuration_is_checked_at_start(tmp_path):
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        dead = s.getsockname()[1]  # nothing listens here once the socket closes
    code, err = _serve("--thinker", "openai", "--thinker-url", f"http://127.0.0.1:{dead}", "--thinker-model", "m")
    assert code == 2 and "not reachable" in err
    code, err = _serve("--thinker", "openai")
    assert code == 2 and "--thinker-url" in err
    code, err = _serve("--thinker-sampling", "{not json")
    assert code == 2 and "not JSON" in err
    # The default, the local model: its model, its slots, no URL.
    code, err = _serve("--thinker-model", "gpt-9")
    assert code == 2 and "unknown chat model 'gpt-9'" in err and "qwen2.5-coder-1.5b" in err
    code, err = _serve("--thinker-model", str(tmp_path / "missing.gguf"))
    assert code == 2 and "no such file" in err
    code, err = _serve("--thinker-slots", "0")
    assert code == 2 and "--thinker-slots" in err
    code, err = _serve("--thinker-url", "http://127.0.0.1:1")
    assert code == 2 and "--thinker-url is for --thinker openai" in err
    if not HAVE_VLLM:  # without the extra: one line that names it, not a traceback
        code, err = _serve("--thinker", "vllm", "--thinker-model", str(tmp_path))
        assert code == 2 and "the vLLM backend is not installed" in err and "Traceback" not in err


def test_vllm_thinker_configuration_is_checked_at_start(tmp_path):
    need(HAVE_VLLM, "the vLLM tests need the vllm extra: pip install -e '.[vllm]'", extra="vllm")
    code, err = _serve("--thinker", "vllm", "--thinker-model", str(tmp_path / "missing"))
    assert code == 2 and "does not exist" in err
    model = tmp_path / "no-template"
    model.mkdir()
    (model / "config.json").write_text('{"architectures": ["LlamaForCausalLM"], "vocab_size": 100}')
    (model / "model.safetensors").write_bytes(b"")
    code, err = _serve("--thinker", "vllm", "--thinker-model", str(model))
    assert code == 2 and "no chat template" in err
