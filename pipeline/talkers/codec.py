"""How a codec-token talker's text prompt and output tokens are laid out.

Orpheus-style TTS models speak SNAC: each audio frame is 7 tokens across SNAC's 3
levels (1 + 2 + 4 codes), and token ``audio_base + position * position_stride +
code`` stands for ``code`` at ``position`` within the frame. The prompt is the
text in a template between fixed prefix and suffix ids. All of it is
configuration: :data:`ORPHEUS` is the published layout, a JSON file can describe
another (the test model uses one flat block of codes for every position).
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

# Orpheus interleaves SNAC's levels within a frame: level 0 gets position 0,
# level 1 positions 1 and 4, level 2 positions 2, 3, 5 and 6.
SNAC_FRAME_LEVELS = ((0,), (1, 4), (2, 3, 5, 6))


@dataclass(frozen=True, slots=True)
class CodecLayout:
    """Prompt template and token -> codec mapping of one talker model family."""

    name: str
    prompt: str = "{voice}: {text}"
    prefix_ids: tuple[int, ...] = ()
    suffix_ids: tuple[int, ...] = ()
    audio_base: int = 0
    codebook_size: int = 4096
    tokens_per_frame: int = 7
    position_stride: int = 4096
    stop_ids: tuple[int, ...] = ()
    frame_samples: int = 2048
    sample_rate: int = 24000
    default_voice: str = "tara"
    frames_per_char: float = 1.0
    """Frame budget per character of text (speech runs ~0.8 frames a character)."""
    voices: tuple[str, ...] = field(default=())

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> CodecLayout:
        known = set(cls.__dataclass_fields__)
        unknown = set(data) - known
        if unknown:
            raise ValueError(f"codec layout: unknown keys {sorted(unknown)}")
        tuples = {k: tuple(v) for k, v in data.items() if isinstance(v, list)}
        return cls(**{**data, **tuples})

    @classmethod
    def load(cls, spec: str | Path) -> CodecLayout:
        """A preset name (``orpheus``) or a JSON file."""
        if str(spec) in PRESETS:
            return PRESETS[str(spec)]
        path = Path(spec)
        if not path.is_file():
            raise ValueError(f"no codec layout named {spec!r} and no such file (presets: {sorted(PRESETS)})")
        return cls.from_dict(json.loads(path.read_text()))

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @property
    def frame_rate(self) -> float:
        return self.sample_rate / self.frame_samples

    @property
    def audio_ids(self) -> range:
        """Every token id that stands for a code at some position."""
        span = self.position_stride * (self.tokens_per_frame - 1) + self.codebook_size
        return range(self.audio_base, self.audio_base + span)

    @property
    def highest_id(self) -> int:
        return max([self.audio_ids[-1], *self.prefix_ids, *self.suffix_ids, *self.stop_ids])

    def prompt_text(self, text: str, voice: str) -> str:
        """The text part of the prompt (it goes between ``prefix_ids`` and ``suffix_ids``)."""
        return self.prompt.format(text=text, voice=voice)

    def max_tokens(self, text: str) -> int:
        frames = int(len(text) * self.frames_per_char) + 4
        return frames * self.tokens_per_frame


class FrameAssembler:
    """Turns a talker's token stream into whole codec frames ``[tokens_per_frame]``."""

    def __init__(self, layout: CodecLayout) -> None:
        self.layout = layout
        self._codes: list[int] = []
        self.frames = 0
        self.dropped = 0
        """Frames thrown away because a token was not a code for its position."""
        self._bad = False

    def push(self, token: int) -> np.ndarray | None:
        """Feed one token; a completed frame comes back."""
        lay = self.layout
        pos = len(self._codes)
        code = token - lay.audio_base - pos * lay.position_stride
        if not 0 <= code < lay.codebook_size:
            self._bad = True
        self._codes.append(code)
        if len(self._codes) < lay.tokens_per_frame:
            return None
        codes, bad = self._codes, self._bad
        self._codes, self._bad = [], False
        if bad:
            self.dropped += 1
            return None
        self.frames += 1
        return np.asarray(codes, np.int64)


ORPHEUS = CodecLayout(
    name="orpheus",
    prompt="{voice}: {text}",
    prefix_ids=(128259,),  # start of human turn
    suffix_ids=(128009, 128260, 128261, 128257),  # end of text, end of human, start of AI, start of speech
    audio_base=128266,  # <custom_token_10>
    codebook_size=4096,
    tokens_per_frame=7,
    position_stride=4096,
    stop_ids=(128258, 128009),  # end of speech, end of text
    default_voice="tara",
    voices=("tara", "leah", "jess", "leo", "dan", "mia", "zac", "zoe"),
)
PRESETS = {"orpheus": ORPHEUS}
