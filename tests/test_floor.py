"""The background's floor, sans I/O: where the words end under a steady bed of sound."""

from __future__ import annotations

from duplex.app.core.listening.floor import GAP_DB, NEAR_DB, QUIET_MS, RESUME_DB, SMOOTH_MS, Floor

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
    f.levels(SPEECH, 1.5)  # the user's words over it
    words_end = f.at
    at = f.until_ended(BED, SPEECH)
    assert at is not None, "the level came back to the floor: the words ended"
    # Where the short-term level first sat at the floor: the voice's last windows, 10 dB
    # over the bed, still in its span, pull it only 3-5 dB over the floor.
    assert words_end - 2 * W <= at <= words_end + W, "the words ended where the level came down"
    assert f.at - at >= ms(QUIET_MS), "after QUIET_MS of it, not at once"
    assert f.at - words_end <= ms(SMOOTH_MS + QUIET_MS) + W, "...and no later"
    assert f.floor.background()


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
    f.levels(SPEECH, 1.5)
    assert f.until_ended(near, SPEECH) is None, "the user's own quieter sounds sit at such a floor"


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
    f.levels(SPEECH, 1.0)
    assert f.until_ended(BED, SPEECH) is not None
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
