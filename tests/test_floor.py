"""The background's floor, sans I/O: where the words end under a steady bed of sound."""

from __future__ import annotations

from duplex.app.core.listening.floor import GAP_DB, NEAR_DB, QUIET_MS, RESUME_DB, SMOOTH_MS, SOFT_TAIL_MS, Floor

RATE = 16000
W = 512  # 32 ms windows, as Silero's
BED, SPEECH = -36.0, -26.0


def ms(n: int) -> int:
    return n * RATE // 1000


class Feed:
    """Windows of given levels, one after another on the input clock."""

    def __init__(self) -> None:
        self.floor = Floor(RATE)
        self.at = 0

    def levels(self, level: float, seconds: float) -> None:
        for _ in range(int(seconds * RATE) // W):
            self.floor.window(self.at, self.at + W, level)
            self.at += W

    def until_ended(self, level: float, speech_db: float, since: int = 0, most: float = 2.0) -> int | None:
        for _ in range(int(most * RATE) // W):
            self.levels(level, W / RATE)
            if (at := self.floor.ended(self.at, speech_db, since=since)) is not None:
                return at
        return None


def test_words_over_a_bed_heard_before_end_where_the_bed_came_back():
    f = Feed()
    f.levels(BED, 1.0)  # the bed alone first
    since = f.at  # the words begin
    f.levels(SPEECH, 1.5)  # the user's words over it
    words_end = f.at
    at = f.until_ended(BED, SPEECH, since)
    assert at is not None, "the level came back to the floor: the words ended"
    # After the last window loud over the floor in the first short-term span that sat at
    # it, and a soft last sound's allowance after that (SOFT_TAIL_MS).
    assert abs(at - ms(SOFT_TAIL_MS) - words_end) <= W, "the words ended where the level came down"
    assert f.at - words_end >= ms(QUIET_MS), "after QUIET_MS of it, not at once"
    assert f.at - words_end <= ms(SMOOTH_MS + QUIET_MS) + W, "...and no later"
    assert f.floor.background()


def test_a_soft_last_syllable_is_still_the_words():
    """The short-term level sits at the floor with a soft last syllable in its span (a
    stop's closure, then "-ble" 9 dB over the bed): the words ended after it, not where
    that span began (which cut a mid-sentence pause's silence short by ~0.2 s)."""
    f = Feed()
    f.levels(BED, 1.0)
    since = f.at  # the words begin
    f.levels(SPEECH, 1.5)
    f.levels(BED, 0.1)
    f.levels(BED + NEAR_DB + 3, 0.064)
    syllable_end = f.at
    at = f.until_ended(BED, SPEECH, since)
    assert at is not None
    assert abs(at - ms(SOFT_TAIL_MS) - syllable_end) <= W


def test_a_level_falling_for_the_first_time_is_no_floor():
    """A quieter sound never heard before the words is not yet known to be the bed (the
    user's voice trailing off falls too); the transcripts decide there."""
    f = Feed()
    f.levels(SPEECH, 1.5)
    assert f.until_ended(BED, SPEECH, most=0.3) is None


def test_a_floor_too_near_the_speech_is_not_trusted():
    f = Feed()
    near = SPEECH - GAP_DB + 1
    f.levels(near, 1.0)
    since = f.at
    f.levels(SPEECH, 1.5)
    assert f.until_ended(near, SPEECH, since) is None, "the user's own quieter sounds sit at such a floor"


def test_quiet_before_the_speech_began_does_not_end_it():
    f = Feed()
    f.levels(BED, 1.0)
    f.levels(SPEECH, 0.1)  # a blip, then the bed: a run at the floor...
    f.levels(BED, 0.5)
    since = f.at  # ...but the speech asked about began after it
    f.levels(SPEECH, 0.05)  # the run broken by speech
    f.levels(BED + NEAR_DB - 1, 0.05)
    assert f.floor.ended(f.at, SPEECH, since=since) is None


def test_once_ended_the_beds_swells_stay_background_and_the_voice_is_not():
    f = Feed()
    f.levels(BED, 1.0)
    since = f.at  # the words begin
    f.levels(SPEECH, 1.0)
    assert f.until_ended(BED, SPEECH, since) is not None
    f.levels(BED + RESUME_DB - 1, 0.3)  # a swell of the bed
    assert f.floor.background() and f.floor.at is not None
    f.levels(BED + RESUME_DB + 2, 0.3)  # the user again
    assert not f.floor.background()
    f.floor.resumed()
    assert f.floor.at is None


def test_the_floor_forgets_after_its_horizon():
    f = Feed()
    f.levels(-60.0, 1.0)  # a quiet room...
    f.levels(BED, 5.0)  # ...then the bed for longer than the horizon
    assert abs(f.floor.db - BED) < 0.01


def test_digital_silence_before_the_bed_is_no_floor():
    # A session that began with digital zeros (a microphone starting, a replay's padding),
    # then a bed a second before the words: its floor is the bed's at once, not the silence's
    # for the 4 s it stays in the horizon (short turns in babble ended only when it left).
    f = Feed()
    f.levels(-120.0, 0.5)
    f.levels(BED, 1.0)
    since = f.at  # the words begin
    f.levels(SPEECH, 1.5)
    words_end = f.at
    at = f.until_ended(BED, SPEECH, since)
    assert at is not None and abs(at - ms(SOFT_TAIL_MS) - words_end) <= W, "the words ended where the level came down"
    assert abs(f.floor.db - BED) < 0.01


def test_a_clean_line_has_no_floor_in_its_words():
    """Digital silence, then words with quieter stretches and no bed under them (a clean
    line, a synthetic voice): the floor would be the words' own quietest stretch, and a
    later one would end them where voice activity hears them go on."""
    f = Feed()
    f.levels(-120.0, 0.5)
    since = f.at
    f.levels(SPEECH, 1.0)
    f.levels(BED, 0.4)  # a quiet stretch of the words themselves
    f.levels(SPEECH, 1.0)
    assert f.until_ended(BED, SPEECH, since=since) is None, "no bed was heard before the words"
