"""Static checks: ruff (lint and format) and mypy, as CI runs them.

    python scripts/check.py

mypy must see the rooms at the repository root under their installed names
(``duplex.app``, ``duplex.pipeline``); it does not follow the editable install's
import hook, so it is pointed at a temporary folder in which ``duplex`` links to
the repository root (and at ``scripts/`` for the lab).
"""

from __future__ import annotations

import os
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
BIN = Path(sys.executable).parent


def run(*cmd: str, env: dict[str, str] | None = None) -> int:
    print("$", " ".join(cmd), flush=True)
    return subprocess.call(cmd, cwd=ROOT, env=env)


def main() -> int:
    failed = run(str(BIN / "ruff"), "check", ".")
    failed |= run(str(BIN / "ruff"), "format", "--check", ".")
    with tempfile.TemporaryDirectory() as tmp:
        (Path(tmp) / "duplex").symlink_to(ROOT)
        env = {**os.environ, "MYPYPATH": os.pathsep.join((tmp, str(ROOT / "scripts")))}
        failed |= run(
            str(BIN / "mypy"),
            "--cache-dir",
            str(ROOT / ".mypy_cache"),
            "-p",
            "duplex.app",
            "-p",
            "duplex.pipeline",
            "-p",
            "lab",  # the benchmarks' and tests' lab (scripts/lab), outside the wheel
            env=env,
        )
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
