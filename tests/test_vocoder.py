"""The PCM vocoder's streaming resampler: chunked equals whole, no boundary clicks."""

from __future__ import annotations

import numpy as np
import soxr
from hypothesis import given, settings
from hypothesis import strategies as st

from duplex.pipeline.frames import AudioBuffer
from duplex.pipeline.vocoders.pcm import PcmVocoder


def _sweep(n: int, rate: int) -> np.ndarray:
    t = np.arange(n) / rate
    f = 100 + 4000 * t / t[-1]
    return (np.sin(2 * np.pi * np.cumsum(f) / rate) * 12000).astype(np.int16)


def _run(signal: np.ndarray, cuts: list[int], in_rate: int, out_rate: int) -> tuple[np.ndarray, list[int]]:
    stream = PcmVocoder().open(in_rate, out_rate)
    outs, boundaries, pos = [], [], 0
    edges = sorted({0, *[c for c in cuts if 0 < c < signal.size], signal.size})
    for a, b in zip(edges, edges[1:], strict=False):
        out = stream.push(AudioBuffer.pcm(signal[a:b], in_rate, "test"))
        if out is not None:
            outs.append(out.data)
            pos += out.length
            boundaries.append(pos)
    tail = stream.flush()
    if tail is not None:
        outs.append(tail.data)
    return np.concatenate(outs), boundaries[:-1]


@settings(max_examples=60, deadline=None)
@given(cuts=st.lists(st.integers(1, 22049), max_size=40), out_rate=st.sampled_from([16000, 24000, 48000]))
def test_chunked_output_equals_whole_signal_resampling(cuts, out_rate):
    signal = _sweep(22050, 22050)
    chunked, _ = _run(signal, cuts, 22050, out_rate)
    whole = soxr.resample(signal.astype(np.float32) / 32768.0, 22050, out_rate, quality="HQ")
    whole16 = np.clip(np.rint(whole * 32767.0), -32768, 32767).astype(np.int16)
    assert chunked.size == whole16.size
    assert np.abs(chunked.astype(np.int32) - whole16).max() <= 1  # one LSB of rounding


def test_no_clicks_at_chunk_boundaries():
    rate_in, rate_out = 22050, 24000
    signal = (np.sin(2 * np.pi * 440 * np.arange(rate_in) / rate_in) * 16000).astype(np.int16)
    out, boundaries = _run(signal, list(range(1324, rate_in, 1324)), rate_in, rate_out)
    assert len(boundaries) > 10
    step = np.abs(np.diff(out.astype(np.int32)))
    # A 440 Hz sine at 24 kHz moves at most 16000*2*pi*440/24000 ~ 1843 per sample.
    limit = 16000 * 2 * np.pi * 440 / rate_out * 1.05
    inner = step[1000:-1000]
    assert inner.max() < limit
    assert max(step[b - 1] for b in boundaries if 1000 < b < out.size - 1000) < limit


def test_same_rate_is_pass_through_and_positions_map():
    stream = PcmVocoder().open(24000, 24000)
    buf = AudioBuffer.pcm(_sweep(2400, 24000), 24000, "test")
    assert stream.push(buf) is buf
    assert stream.flush() is None
    assert PcmVocoder().open(22050, 24000).output_position(22050) == 24000


def test_rejects_wrong_input():
    stream = PcmVocoder().open(22050, 24000)
    try:
        stream.push(AudioBuffer.pcm(np.zeros(10, np.int16), 16000, "test"))
    except ValueError as exc:
        assert "22050" in str(exc)
    else:
        raise AssertionError("a buffer at the wrong rate must be refused")
