"""The static checks and the CI script, as part of the README's test command.

``scripts/check.py`` (ruff lint and format, mypy) runs here, so a user's ``pytest``
checks what CI checks; and ``.ci/run`` must run the README's test command exactly
as written (after the Debian packages), so CI cannot pass on a run a user lacks.
"""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent


def _readme_command(step: str) -> str:
    """The command under ``# <step>.`` in the README's quick start."""
    lines = (ROOT / "README.md").read_text().splitlines()
    for i, line in enumerate(lines):
        if line.startswith(f"# {step}."):
            return lines[i + 1]
    raise AssertionError(f"the README's quick start has no step {step}")


@pytest.mark.timeout(900)
def test_static_checks_pass():
    done = subprocess.run(
        [sys.executable, str(ROOT / "scripts" / "check.py")], cwd=ROOT, capture_output=True, text=True
    )
    assert done.returncode == 0, f"scripts/check.py exited {done.returncode}:\n{done.stdout}{done.stderr}"


def test_ci_runs_the_readmes_test_command_as_written():
    command = _readme_command("2")
    assert command.endswith(".venv/bin/pytest"), command
    ci = (ROOT / ".ci" / "run").read_text().splitlines()
    assert command in ci, f".ci/run does not run the README's test command as written:\n{command}"
    before = ci[: ci.index(command)]
    # Before it, CI may install Debian packages and nothing a user's run would lack.
    installs = [line for line in before if not line.lstrip().startswith("#") and re.search(r"\.venv|\bpip3?\b", line)]
    assert not installs, f".ci/run does more than a user's run before the README's test command: {installs}"


def test_the_readmes_first_command_is_one_install():
    command = _readme_command("1")
    assert command == "python3 -m venv .venv && .venv/bin/pip install -e . && .venv/bin/duplex serve", command
