"""Helpers for the sans-I/O core's unit tests (test_intake.py, test_tool_settings.py)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest

from duplex.app.core.protocol import ProtocolError


def refused(call: Callable[..., object], *args: Any) -> ProtocolError:
    """The ``ProtocolError`` that ``call(*args)`` raises (the test fails if it raises none)."""
    with pytest.raises(ProtocolError) as info:
        call(*args)
    return info.value
