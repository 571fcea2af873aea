"""Build the wheel, install it into a fresh venv, and use it from outside the checkout.

    python scripts/wheel_check.py

Checks what an editable install hides: the wheel holds every module and web file
of the source tree under ``duplex`` (and nothing else at the top of
site-packages); every module imports with the default dependencies; ``duplex
serve`` started from another directory answers ``/healthz``, serves the page and
stops cleanly on SIGTERM; and ``--thinker openai`` is wired. Exits non-zero with
the reason on the first failure.
"""

from __future__ import annotations

import signal
import subprocess
import sys
import tempfile
import time
import urllib.request
import zipfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent

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
        sh(sys.executable, "-m", "pip", "wheel", "-q", "--no-deps", "-w", tmp / "dist", ROOT)
        (wheel,) = (tmp / "dist").glob("duplex-*.whl")
        names = set(zipfile.ZipFile(wheel).namelist())
        tops = {n.split("/")[0] for n in names if not n.split("/")[0].endswith(".dist-info")}
        if tops != {"duplex"}:
            fail(f"the wheel puts {sorted(tops)} at the top of site-packages, not only duplex")
        tracked = sh("git", "ls-files", "app", "pipeline", "web", "assets", cwd=ROOT).split()
        missing = [f for f in tracked if f"duplex/{f}" not in names]
        if missing:
            fail(f"the wheel lacks {missing}")
        print(f"wheel: {wheel.name}, {len(names)} files, everything of app/ pipeline/ web/ assets/ in it")

        venv = tmp / "venv"
        sh(sys.executable, "-m", "venv", venv)
        py = venv / "bin" / "python"
        sh(py, "-m", "pip", "install", "-q", wheel)
        sh(
            py, "-m", "pip", "install", "-q", "--no-deps", "pipecat-ai==1.14.0"
        )  # Smart Turn's weights, as the README says
        away = tmp / "elsewhere"  # not the checkout: nothing can come from the source tree
        away.mkdir()
        count = sh(py, "-c", IMPORT_ALL, cwd=away).strip()
        print(f"every module imports from the installed wheel ({count} modules)")
        help_text = sh(venv / "bin" / "duplex", "serve", "--help", cwd=away)
        if "--thinker-url" not in help_text or "openai" not in help_text:
            fail("duplex serve --help does not offer --thinker openai")
        sh(py, "-c", "import duplex.pipeline.thinkers.openai_chat, httpx", cwd=away)

        port = sh(py, "-c", "from duplex.app.harness.net import free_port; print(free_port())", cwd=away).strip()
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
            print("duplex serve from the wheel: /healthz ok, / and /app.js served")
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
        if "voice kokoro-82m" not in log:  # the voice styles are package data: the wheel must carry them
            fail(f"duplex serve from the wheel does not speak with the neural voice:\n{log}")
        print("the wheel's default voice is Kokoro-82M (its weights from their packages, its voices from the wheel)")
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
