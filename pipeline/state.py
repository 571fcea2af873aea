"""The opaque state handle: a reference to backend state the session never reads.

vLLM owns the KV blocks, a vocoder owns its overlap buffers; the session keeps
only this handle, which records enough to know when that state is no longer
valid: another artifact, another layout version, a retired epoch.
"""

from __future__ import annotations

import hashlib
from dataclasses import asdict, dataclass, replace
from pathlib import Path
from typing import Any

STATE_LAYOUT_VERSION = 1
"""Bumped when the meaning of backend state changes. A handle of another version
is rejected, never migrated: a silent match would hide an incompatible layout."""


@dataclass(frozen=True, slots=True)
class StateHandle:
    """A reference to one session's state inside a backend."""

    session_id: str
    backend: str
    artifact_id: str
    """The checkpoint that produced the state; the same shapes from another
    checkpoint are not the same state."""
    layout_version: int = STATE_LAYOUT_VERSION
    epoch: int = 0
    """The first of the session's epochs this state is live in (moved on by every cancel,
    to the epoch after the cancelled one); state of a lower epoch is stale."""
    replayable: bool = True
    """The state can be rebuilt by re-submitting the conversation's text."""
    migratable: bool = False
    """Never assumed: moving state between backends needs a measured conversion."""

    def after(self, epoch: int) -> StateHandle:
        """The handle once ``epoch`` (and every epoch before it) is cancelled."""
        return replace(self, epoch=max(self.epoch, epoch + 1))

    def accepts(self, other: StateHandle) -> bool:
        """Whether a request carrying ``other`` may continue this state."""
        return (
            other.session_id == self.session_id
            and other.backend == self.backend
            and other.artifact_id == self.artifact_id
            and other.layout_version == self.layout_version
            and other.epoch == self.epoch
        )

    def check(self, other: StateHandle) -> None:
        """Raise :class:`StateMismatch` naming why ``other`` is not accepted."""
        for name in ("session_id", "backend", "artifact_id", "layout_version", "epoch"):
            mine, theirs = getattr(self, name), getattr(other, name)
            if mine != theirs:
                raise StateMismatch(f"state handle {name} differs: {theirs!r} is not {mine!r}")

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


class StateMismatch(ValueError):
    """A handle from another artifact, layout or epoch was offered."""


def artifact_id(path: str | Path, *, files: tuple[str, ...] = ("config.json",)) -> str:
    """Identity of a model directory: its path plus a hash of the named files' contents.

    Hashing the config and weight index (not the weights) is cheap and still
    tells two checkpoints apart.
    """
    root = Path(path).resolve()
    digest = hashlib.sha256(str(root).encode())
    for name in files:
        f = root / name
        if f.is_file():
            digest.update(name.encode())
            digest.update(f.read_bytes())
    return f"{root.name}@{digest.hexdigest()[:16]}"
