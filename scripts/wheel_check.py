"""Build the wheel, install it into a fresh venv, and use it from outside the checkout.

    python scripts/wheel_check.py

Checks what an editable install hides: the wheel holds every module and web file
of the source tree under ``duplex`` (and nothing else at the top of
site-packages; not the lab, ``scripts/lab``), Smart Turn's weights and license among its assets; installed
alone in a fresh venv (``pip install duplex-*.whl``, nothing else: Pipecat is not
there) every module imports with the default dependencies; ``duplex serve`` with
its defaults (``semantic_vad`` with Smart Turn, the default voice) started from
another directory answers ``/healthz``, serves the page and stops cleanly on
SIGTERM; and ``--thinker openai`` is wired. Exits non-zero with the reason on the
first failure. ``tests/test_wheel.py`` runs it as part of the test suite.
"""

from __future__ import annotations

import json
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import urllib.request
import zipfile
from pathlib import Path

from lab.net import free_port

ROOT = Path(__file__).resolve().parent.parent
ROOMS = ("app", "pipeline", "web", "assets")
# Package data the default server cannot start without, named so that a pattern
# dropped from pyproject's package-data fails here by name.
SHIPPED = ("assets/models/smart_turn/smart-turn-v3.2-cpu.onnx", "assets/models/smart_turn/LICENSE")

# The first event of a new session (with the server's default settings).
FIRST_EVENT = """
import asyncio, sys, websockets
async def main():
    async with websockets.connect(f"ws://127.0.0.1:{sys.argv[1]}/v1/realtime") as ws:
        print(await ws.recv())
asyncio.run(main())
"""

IMPORT_ALL = """
import importlib, pkgutil, duplex.app, duplex.pipeline
names = []
for pkg in (duplex.app, duplex.pipeline):
    names += [m.name for m in pkgutil.walk_packages(pkg.__path__, pkg.__name__ + ".")]
for name in names:
    if not name.endswith(".__main__"):  # that one runs the command
        importlib.import_module(name)
print(len(names))
"""


def fail(message: str) -> None:
    sys.exit(f"wheel check: {message}")


def sh(*cmd: str | Path, cwd: Path | None = None) -> str:
    done = subprocess.run([str(c) for c in cmd], cwd=cwd, capture_output=True, text=True)
    if done.returncode:
        fail(f"{' '.join(map(str, cmd))} exited {done.returncode}:\n{done.stdout[-2000:]}{done.stderr[-2000:]}")
    return done.stdout


def main() -> None:
    with tempfile.TemporaryDirectory() as tmp_name:
        tmp = Path(tmp_name)
        # Built from a copy of the source (tracked files and new ones git does not ignore):
        # a build in the checkout leaves build/lib behind, whose stale files would reach
        # the next wheel and hide a file that package-data no longer ships.
        src = tmp / "src"
        for name in sh("git", "ls-files", "--cached", "--others", "--exclude-standard", cwd=ROOT).splitlines():
            if (ROOT / name).is_file():
                (src / name).parent.mkdir(parents=True, exist_ok=True)
                shutil.copy2(ROOT / name, src / name)
        sh(sys.executable, "-m", "pip", "wheel", "-q", "--no-deps", "-w", tmp / "dist", src)
        (wheel,) = (tmp / "dist").glob("duplex-*.whl")
        names = set(zipfile.ZipFile(wheel).namelist())
        tops = {n.split("/")[0] for n in names if not n.split("/")[0].endswith(".dist-info")}
        if tops != {"duplex"}:
            fail(f"the wheel puts {sorted(tops)} at the top of site-packages, not only duplex")
        # Tracked files and new ones not yet committed (but not what git ignores).
        listed = sh("git", "ls-files", "--cached", "--others", "--exclude-standard", *ROOMS, cwd=ROOT).split()
        tracked = [f for f in listed if (ROOT / f).is_file() and "__pycache__" not in f]
        missing = [f for f in [*tracked, *SHIPPED] if f"duplex/{f}" not in names]
        if missing:
            fail(f"the wheel lacks {sorted(set(missing))}")
        # The lab (scripts/lab) and the tests are the checkout's, never the product's.
        lab = sorted(n for n in names if n.startswith(("duplex/scripts/", "duplex/tests/", "duplex/app/harness/")))
        if lab:
            fail(f"the wheel carries the lab or the tests: {lab[:5]}")
        print(f"wheel: {wheel.name}, {len(names)} files, everything of app/ pipeline/ web/ assets/ in it, no lab")

        venv = tmp / "venv"
        sh(sys.executable, "-m", "venv", venv)
        py = venv / "bin" / "python"
        sh(py, "-m", "pip", "install", "-q", wheel)  # the wheel alone, as the README's first command
        away = tmp / "elsewhere"  # not the checkout: nothing can come from the source tree
        away.mkdir()
        pipecat = sh(py, "-c", "import importlib.util as u; print(u.find_spec('pipecat') is not None)", cwd=away)
        if pipecat.strip() != "False":
            fail("pipecat is importable in the wheel's venv: the check would not prove the wheel starts alone")
        sh(py, "-c", "from duplex.pipeline.detectors.smart_turn import WEIGHTS; WEIGHTS.read()", cwd=away)
        print("installed alone (no pipecat): Smart Turn's weights are the wheel's own and match their sha256")
        count = sh(py, "-c", IMPORT_ALL, cwd=away).strip()
        print(f"every module imports from the installed wheel ({count} modules)")
        help_text = sh(venv / "bin" / "duplex", "serve", "--help", cwd=away)
        if "--thinker-url" not in help_text or "openai" not in help_text:
            fail("duplex serve --help does not offer --thinker openai")
        sh(py, "-c", "import duplex.pipeline.thinkers.openai_chat, httpx", cwd=away)

        port = str(free_port())
        server = subprocess.Popen(
            [venv / "bin" / "duplex", "serve", "--port", port],
            cwd=away,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
        )
        try:
            health = _get(f"http://127.0.0.1:{port}/healthz", server)
            if b'"ok"' not in health:
                fail(f"/healthz answered {health!r}")
            page = _get(f"http://127.0.0.1:{port}/", server)
            if b"<html" not in page.lower():
                fail("/ does not serve the page")
            _get(f"http://127.0.0.1:{port}/app.js", server)
            created = json.loads(sh(py, "-c", FIRST_EVENT, port, cwd=away))
            turn = created["session"]["audio"]["input"]["turn_detection"]
            if created["type"] != "session.created" or turn["type"] != "semantic_vad":
                fail(f"a new session does not hear turns with semantic_vad by default: {created}")
            print("duplex serve from the wheel: /healthz ok, / and /app.js served, sessions on semantic_vad")
        finally:
            server.send_signal(signal.SIGTERM)
            try:
                code = server.wait(30)
            except subprocess.TimeoutExpired:
                server.kill()
                fail("duplex serve did not stop on SIGTERM")
        log = server.stdout.read() if server.stdout else ""
        if code != 0:
            fail(f"duplex serve exited {code}: {log}")
        if "voice hibari" not in log:  # the default voice, installed by the wheel's own dependencies
            fail(f"duplex serve from the wheel does not speak with the default voice (hibari):\n{log}")
        print("the wheel's default voice is hibari's")
        print("wheel check passed")


def _get(url: str, server: subprocess.Popen[str], timeout: float = 60.0) -> bytes:
    deadline = time.monotonic() + timeout
    while True:
        if server.poll() is not None:
            fail(f"duplex serve exited {server.returncode}: {server.stdout.read() if server.stdout else ''}")
        try:
            with urllib.request.urlopen(url, timeout=5) as r:
                body: bytes = r.read()
                return body
        except OSError:
            if time.monotonic() > deadline:
                fail(f"{url} did not answer within {timeout:g} s")
            time.sleep(0.2)


if __name__ == "__main__":
    main()
