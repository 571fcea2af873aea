"""The chat model's cache across the slots of one lane: what one conversation's turns
take out of it never gives another's reply the wrong cells. The real model, greedy, so
that a reply read beside another is the reply read alone."""

from __future__ import annotations

import threading

import pytest

from duplex.pipeline.thinkers.chat_models import DEFAULT_MODEL, resolve
from duplex.pipeline.thinkers.engine import Engine
from duplex.pipeline.thinkers.local import SPEECH_PROMPT

SYSTEM = {"role": "system", "content": SPEECH_PROMPT}
PLANETS = {"role": "user", "content": "How many planets are in our solar system?"}
COUNTRY = {"role": "user", "content": "What is the largest country?"}
GOES_ON = {"role": "user", "content": "in the world"}


@pytest.fixture(scope="module")
def engine():
    engine = Engine(str(resolve(DEFAULT_MODEL)), slots=2, context=1024, threads=1)  # one lane, slots 0 and 1
    yield engine
    engine.close()


def ask(
    engine: Engine, messages: list[dict], slot: int, *, words: int | None = None, begun: threading.Event | None = None
) -> str:
    """The reply (greedy), or its first ``words`` pieces when the reader stops it there
    (``begun`` is set at its first piece)."""
    out: list[str] = []

    def on_chunk(chunk: dict) -> bool:
        out.extend(c["delta"]["content"] for c in chunk["choices"] if c["delta"].get("content"))
        if out and begun is not None:
            begun.set()
        return words is not None and len(out) >= words

    body = {"messages": messages, "stream": True, "max_tokens": 24, "temperature": 0, "id_slot": slot}
    assert "error" not in engine.handle_chat_completions(body, on_chunk)
    return "".join(out)


def test_a_reply_read_beside_another_after_a_turn_was_cut_is_the_reply_read_alone(engine):
    """Four conversations at once lost an answer in every benchmark run: a reply cut after
    its first words (the user went on after a pause), the turn's whole question then read in
    the same steps as another conversation's reply was written; both came out wrong."""
    planets = ask(engine, [SYSTEM, PLANETS], 0)
    country = ask(engine, [SYSTEM, COUNTRY, GOES_ON], 1)
    assert "planets" in planets.lower() and "largest country" in country.lower()
    assert ask(engine, [SYSTEM, COUNTRY], 1, words=2)  # the reply to the pause, cut
    got: dict[str, str] = {}
    begun = threading.Event()
    writing = threading.Thread(target=lambda: got.update(planets=ask(engine, [SYSTEM, PLANETS], 0, begun=begun)))
    writing.start()
    assert begun.wait(120)  # it writes (a token a step) while the other's question is read
    got["country"] = ask(engine, [SYSTEM, COUNTRY, GOES_ON], 1)
    writing.join()
    assert got == {"planets": planets, "country": country}
    assert ask(engine, [SYSTEM, COUNTRY, GOES_ON], 1) == country  # and the slot's cache is sound
