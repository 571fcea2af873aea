"""Cutting a reply's text into spoken pieces: the first words alone when the model is far
ahead of the voice, the first clause when it is not, sentences after; driven on a clock
given by the test, a streamed delta a token."""

from __future__ import annotations

import re

import pytest

from duplex.pipeline.segmenter import AHEAD, TOKENS_PER_WORD, VOICE_WORDS_PER_S, Segment, Segmenter, spoken_words

TEXT = "The capital of Japan is Tokyo, a city of fourteen million people. It is very large."
NEEDED = AHEAD * VOICE_WORDS_PER_S * TOKENS_PER_WORD
"""Tokens a second a model must write for its first words to go alone."""


def tokens(text: str) -> list[str]:
    """The text as a model streams it: a word (with its leading space) at a time."""
    return re.findall(r"\s*\S+", text)


def cut(text: str | list[str], seconds_per_token: float, **kwargs: object) -> list[Segment]:
    seg = Segmenter(**kwargs)  # type: ignore[arg-type]
    out: list[Segment] = []
    for i, token in enumerate(tokens(text) if isinstance(text, str) else text):
        out += seg.feed(token, 10.0 + i * seconds_per_token)  # any origin
    return out + seg.finish()


def whole(segments: list[Segment], text: str) -> None:
    assert "".join(s.text for s in segments) == text
    assert all(text[s.offset : s.offset + len(s.text)] == s.text for s in segments)


def test_a_model_far_ahead_of_the_voice_has_its_first_words_spoken_alone():
    fast = 1 / (3 * NEEDED)  # three times the pace needed
    segments = cut(TEXT, fast)
    assert [s.text for s in segments] == [
        "The capital of ",
        "Japan is Tokyo,",
        " a city of fourteen million people.",
        " It is very large.",
    ]
    whole(segments, TEXT)


def test_clauses_until_twelve_words_are_out_then_sentences():
    text = (
        "Well, to boil an egg, you put it in water, bring it to a boil, and wait for six minutes, "
        "then you cool it in cold water, peel it, and eat it while it is warm. Enjoy it."
    )
    seg = Segmenter()
    segments = seg.feed(text) + seg.finish()  # written at once
    said = [s.text for s in segments]
    assert said[:4] == ["Well,", " to boil an egg,", " you put it in water,", " bring it to a boil,"]  # 15 words
    assert said[4:] == [
        " and wait for six minutes, then you cool it in cold water, peel it, and eat it while it is warm.",
        " Enjoy it.",
    ]
    whole(segments, text)


def test_a_model_slower_than_that_waits_for_the_first_clause():
    slow = 1 / (0.5 * NEEDED)  # half the pace needed: three words would run dry
    segments = cut(TEXT, slow)
    assert segments[0].text == "The capital of Japan is Tokyo,"
    whole(segments, TEXT)


def test_the_words_written_go_before_what_plays_runs_out():
    # "You should boil " goes alone (fast), then the clause is long: at twice the voice's
    # pace its words would come 0.6 s after the first three had been said.
    text = "You should boil an egg for about seven minutes for a soft yolk. Enjoy."
    pace = 1 / (2.2 * VOICE_WORDS_PER_S)
    segments = cut(text, pace)
    assert segments[0].text == "You should boil "
    assert segments[1].text.startswith("an egg") and not segments[1].text.endswith("yolk.")
    whole(segments, text)
    seg, t, queued = Segmenter(), 10.0, 0.0
    for i, token in enumerate(tokens(text)):
        t = 10.0 + i * pace
        for s in seg.feed(token, t):
            queued = max(queued, t) + len(s.text.split()) / VOICE_WORDS_PER_S
        assert queued == 0.0 or queued - t > -1e-9 or i < 3, "what plays never ran out while words waited"


def test_a_model_slower_than_the_voice_is_spoken_in_phrases_not_word_by_word():
    segments = cut(TEXT, 1.0)
    assert all(len(s.text.split()) >= 2 for s in segments[1:-1]), [s.text for s in segments]
    whole(segments, TEXT)


@pytest.mark.parametrize("pace", [0.0, 0.01, 1.0])
def test_a_clause_shorter_than_three_words_goes_first_whatever_the_pace(pace: float):
    text = "Sure, I can help with that. Here it is."
    segments = cut(text, pace)
    assert segments[0].text == "Sure,"
    whole(segments, text)


def test_a_clause_already_written_goes_whole_and_first_words_can_be_turned_off():
    seg = Segmenter()  # (the voices make its first words alone anyway)
    assert seg.feed(TEXT + " ")[0].text == "The capital of Japan is Tokyo,"
    fast = 1 / (3 * NEEDED)
    assert cut(TEXT, fast, first_words=0)[0].text == "The capital of Japan is Tokyo,"


def test_a_first_clause_past_its_bound_is_cut_at_a_space():
    text = "Supercalifragilistic expialidocious antidisestablishmentarianism floccinaucinihilipilification, yes."
    segments = cut(text, 1.0)  # slow: no first words alone
    assert len(segments[0].text) <= 48 and segments[0].text.endswith(" ")
    whole(segments, text)


POUND = ["There", " are", " ", "1", "6", " ounces", " in", " a", " pound", "."]
"""As the shipped model writes it: a number's digits a token each, its space one too."""


@pytest.mark.parametrize("pace", [1.2, 0.4], ids=["fast enough", "too slow"])
def test_a_numbers_digits_count_as_the_tokens_they_are(pace: float):
    # Five tokens to its third word: by words (three in the time of five tokens) the model
    # looked slower than the voice at 1.2 times the pace its tokens need, and the first
    # words waited for the whole sentence.
    segments = cut(POUND, 1 / (pace * NEEDED))
    first = "There are 16 " if pace > 1 else "There are 16 ounces in a pound."
    assert segments[0].text == first
    whole(segments, "".join(POUND))


def test_a_model_a_little_slower_than_the_voice_starts_once_enough_words_are_written():
    # At 0.6 of the pace: three words would be said before the rest of a clause is
    # written, five are not (k >= 12 * (1 - 0.6)); the whole sentence had been waited for
    # (four at once, held out: "There are 8 planets in our solar system." 2.4 s after the
    # speech, its first token at 0.8 s).
    pace = 1 / (0.6 * NEEDED)
    seg, queued = Segmenter(), None
    said: list[str] = []
    for i, token in enumerate(POUND):
        t = 10.0 + i * pace
        for s in seg.feed(token, t):
            assert queued is None or queued >= t, "what plays never ran out"
            queued = max(queued or t, t) + len(s.text.split()) / VOICE_WORDS_PER_S
            said.append(s.text)
    said += [s.text for s in seg.finish()]
    assert said[0] == "There are 16 ounces in "
    assert "".join(said) == "".join(POUND)


SLEEP = ["Adults", " typically", " need", " ", "7", "-", "9", " hours", " of", " sleep", " per", " night", "."]


def test_a_number_counts_as_the_words_the_voice_says_for_it():
    assert spoken_words("7-9 hours ") == 3 and spoken_words("There are 16 ounces") == 4
    assert spoken_words("Don't, it's 3.5 km.") == 5 and spoken_words(" , ") == 0
    # Four at once, held out: "Adults typically need " went alone at ~4 tokens a second and
    # ran out before "7-9" was written; counted as one word it waited for "hours" too (a
    # reply that has run out waits for two words), and the reply ran dry 20-40 ms.
    pace = 0.25  # four tokens a second
    seg, out = Segmenter(), []
    for i, token in enumerate(SLEEP):
        out += [(10.0 + i * pace, s.text) for s in seg.feed(token, 10.0 + i * pace)]
    assert [text for _, text in out[:2]] == ["Adults typically need ", "7-9 "]
    assert out[1][0] == 10.0 + SLEEP.index(" hours") * pace, "as soon as the number is whole"


def test_a_comma_after_a_word_ends_the_clause_as_it_is_written_and_a_numbers_does_not():
    seg = Segmenter()
    assert seg.feed("Yes") == []
    assert [s.text for s in seg.feed(",")] == ["Yes,"]  # not waiting for the next token
    seg = Segmenter()
    said = [s.text for t in ["It", " costs", " ", "1", ",", "0", "0", "0", " dollars", "."] for s in seg.feed(t)]
    assert said[0] == "It costs 1,000 " and "".join(said) == "It costs 1,000 dollars."  # (its first words, at once)


def test_a_decimal_point_is_not_taken_for_a_full_stop():
    text = ["About", " ", "6", ".", "4", " million", " people", " live", " there", "."]
    segments = cut(text, 1 / (0.5 * NEEDED))  # slow: the first clause goes whole
    assert segments[0].text == "About 6.4 million people live there."
    whole(segments, "".join(text))
