"""The vocoder interface: a talker's buffers in, PCM16 at the session's rate out."""

from __future__ import annotations

from typing import Protocol

from duplex.pipeline.frames import AudioBuffer


class VocoderStream(Protocol):
    """Per-reply decoding state. Dropping the object drops the carry-over state."""

    output_rate: int

    def push(self, buf: AudioBuffer) -> AudioBuffer | None:
        """Decode one input buffer; return the PCM that is now final, if any."""
        ...

    def flush(self) -> AudioBuffer | None:
        """End of input: return whatever PCM is still held back."""
        ...

    def output_position(self, input_position: int) -> int:
        """Map an offset in the input (samples or frames) to output samples."""
        ...


class Vocoder(Protocol):
    """Opens one decoding stream per reply.

    Lifecycle: ready once built (its weights load in the constructor, so a bad path
    fails while the server is being built); no ``start``. ``aclose`` frees the model
    (a no-op where there is none); no stream is opened after it.
    """

    name: str
    blocking: bool
    """True when ``push`` does enough work (a neural decode) that the engine must
    run it off the event loop."""

    def open(self, input_rate: int, output_rate: int) -> VocoderStream: ...

    async def aclose(self) -> None:
        """Free the model, if it holds one."""
        ...
