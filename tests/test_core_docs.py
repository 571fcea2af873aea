"""docs/core.md's example runs, and prints what the page says it prints."""

from __future__ import annotations

import contextlib
import io
import re
from pathlib import Path

DOC = Path(__file__).resolve().parent.parent / "docs" / "core.md"


def test_the_sans_io_pages_example_runs_as_written():
    [code] = re.findall(r"```python\n(.*?)```", DOC.read_text(), re.S)
    lines = code.splitlines()
    expected = [
        lines[i + 1].strip().removeprefix("# ")
        for i, line in enumerate(lines[:-1])
        if line.startswith("print(") and lines[i + 1].strip().startswith("# ")
    ]
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        exec(compile(code, str(DOC), "exec"), {"__name__": "docs_core"})
    printed = out.getvalue().splitlines()
    assert len(printed) == len(expected) == 5
    for got, want in zip(printed, expected, strict=True):
        if "..." in want:  # the page elides the middle: its ends must match
            head, tail = want.split("...")
            assert got.startswith(head.rstrip(" ")) and got.endswith(tail.lstrip(" ")), (got, want)
        else:
            assert got == want
