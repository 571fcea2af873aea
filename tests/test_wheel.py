"""The wheel as a user gets it: ``scripts/wheel_check.py`` as part of the test suite.

It builds the wheel, installs it alone into a fresh venv (no Pipecat, nothing
else), imports every module and starts ``duplex serve`` from outside the
checkout with its defaults (``semantic_vad`` with Smart Turn, the default voice).
The installs take a minute or two.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent


@pytest.mark.timeout(900)
def test_the_wheel_starts_alone():
    done = subprocess.run(
        [sys.executable, str(ROOT / "scripts" / "wheel_check.py")], cwd=ROOT, capture_output=True, text=True
    )
    assert done.returncode == 0, f"scripts/wheel_check.py exited {done.returncode}:\n{done.stdout}{done.stderr}"
