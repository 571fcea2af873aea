"""The buffer reference and the opaque state handle."""

from __future__ import annotations

import json

import numpy as np
import pytest

from duplex.pipeline.frames import AudioBuffer
from duplex.pipeline.state import StateHandle, StateMismatch, artifact_id


def test_pcm_buffer_describes_itself_and_is_read_only():
    buf = AudioBuffer.pcm(np.array([0.0, 0.5, -1.0, 2.0], np.float32), 24000, "vocoder")
    assert buf.format == "pcm16" and buf.rate == 24000 and buf.owner == "vocoder"
    assert buf.shape == (4,) and buf.nbytes == 8 and buf.length == 4
    assert list(buf.data) == [0, 16384, -32767, 32767]  # clipped, not wrapped
    assert buf.to_bytes() == np.array([0, 16384, -32767, 32767], "<i2").tobytes()
    with pytest.raises(ValueError):
        buf.data[0] = 1


def test_codes_buffer_shape_and_size():
    codes = AudioBuffer(np.zeros((3, 7), np.int64), "codes", 12, "talker")
    assert codes.length == 7 and codes.nbytes == 3 * 7 * 8 and codes.duration_s == pytest.approx(7 / 12)
    with pytest.raises(TypeError):
        codes.to_bytes()


@pytest.mark.parametrize(
    "data, fmt",
    [
        (np.zeros(4, np.float32), "pcm16"),
        (np.zeros((2, 2), np.int16), "pcm16"),
        (np.zeros(4, np.int64), "codes"),
        (np.zeros((2, 2), np.float32), "codes"),
        (np.zeros(4, np.int16), "mp3"),
    ],
)
def test_buffer_rejects_wrong_shapes(data, fmt):
    with pytest.raises(ValueError):
        AudioBuffer(data, fmt, 24000, "x")


def test_state_handle_accepts_only_its_own_state():
    h = StateHandle("s1", "vllm", "model@abc")
    assert h.accepts(h)
    assert not h.accepts(StateHandle("s1", "vllm", "model@def")), "another artifact"
    assert not h.accepts(StateHandle("s1", "vllm", "model@abc", layout_version=2)), "another layout"
    assert not h.accepts(h.after(0)), "a later epoch"
    assert not h.accepts(StateHandle("s2", "vllm", "model@abc"))
    with pytest.raises(StateMismatch, match="artifact_id"):
        h.check(StateHandle("s1", "vllm", "model@def"))
    assert h.after(3).epoch == 4 and h.after(3).after(1).epoch == 4 and not h.migratable
    assert json.dumps(h.to_dict())


def test_artifact_id_follows_config_content(tmp_path):
    (tmp_path / "config.json").write_text('{"hidden": 64}')
    a = artifact_id(tmp_path)
    assert a == artifact_id(tmp_path)
    (tmp_path / "config.json").write_text('{"hidden": 128}')
    assert artifact_id(tmp_path) != a
