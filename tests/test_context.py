"""The thinker's context, sans I/O: conversation items as chat messages (a function call
joined to the reply that made it, its output a ``tool`` message), cut to fit as the
session's ``truncation`` says, the stored items untouched."""

from __future__ import annotations

import copy

from duplex.app.core.context import CHARS_PER_TOKEN, chat_messages, fit
from duplex.app.core.conversation import Item, Part

BIG = 1_000_000  # a context nothing here outgrows


def said(role: str, text: str | None, *, part: str = "", status: str = "completed") -> Item:
    kind = part or ("input_text" if role == "user" else "output_text")
    return Item(f"item_{role}_{text}", role, [Part(kind, text)], status=status)


def call(call_id: str, name: str = "get_weather", arguments: str = '{"city": "Oslo"}') -> Item:
    return Item(
        f"item_{call_id}", "assistant", [], type="function_call", call_id=call_id, name=name, arguments=arguments
    )


def output(call_id: str, result: str) -> Item:
    return Item(f"item_out_{call_id}", "user", [], type="function_call_output", call_id=call_id, output=result)


def tool_call(call_id: str, name: str = "get_weather", arguments: str = '{"city": "Oslo"}') -> dict:
    return {"id": call_id, "type": "function", "function": {"name": name, "arguments": arguments}}


def test_items_become_messages_after_the_system_prompt():
    items = [said("user", "hello"), said("assistant", "hi there")]
    assert chat_messages(items, "Be brief.", "auto", BIG) == (
        {"role": "system", "content": "Be brief."},
        {"role": "user", "content": "hello"},
        {"role": "assistant", "content": "hi there"},
    )


def test_without_instructions_there_is_no_system_message():
    assert chat_messages([said("user", "hello")], "", "auto", BIG) == ({"role": "user", "content": "hello"},)


def test_a_transcript_is_the_text_of_audio_and_parts_join_with_spaces():
    spoken = said("user", "what time is it", part="input_audio")
    both = Item("item_both", "user", [Part("input_text", "first"), Part("input_audio", "second")])
    assert chat_messages([spoken, both], "", "auto", BIG) == (
        {"role": "user", "content": "what time is it"},
        {"role": "user", "content": "first second"},
    )


def test_items_in_progress_are_left_out():
    items = [said("user", "hello"), said("assistant", "I was say", status="in_progress")]
    assert chat_messages(items, "", "auto", BIG) == ({"role": "user", "content": "hello"},)


def test_an_empty_user_turn_is_still_a_turn_but_an_empty_reply_is_nothing():
    items = [said("user", None, part="input_audio"), said("assistant", ""), said("user", "hello")]
    assert chat_messages(items, "", "auto", BIG) == (
        {"role": "user", "content": ""},
        {"role": "user", "content": "hello"},
    )


def test_a_call_joins_the_reply_that_made_it_and_its_output_is_a_tool_message():
    items = [
        said("user", "weather in Oslo and Rome?"),
        said("assistant", "Let me look."),
        call("call_1"),
        call("call_2", arguments='{"city": "Rome"}'),
        output("call_1", '{"temp": 3}'),
        output("call_2", '{"temp": 18}'),
        said("assistant", "Oslo 3, Rome 18."),
    ]
    assert chat_messages(items, "", "auto", BIG) == (
        {"role": "user", "content": "weather in Oslo and Rome?"},
        {
            "role": "assistant",
            "content": "Let me look.",
            "tool_calls": [tool_call("call_1"), tool_call("call_2", arguments='{"city": "Rome"}')],
        },
        {"role": "tool", "tool_call_id": "call_1", "content": '{"temp": 3}'},
        {"role": "tool", "tool_call_id": "call_2", "content": '{"temp": 18}'},
        {"role": "assistant", "content": "Oslo 3, Rome 18."},
    )


def test_a_call_without_words_before_it_is_an_assistant_message_of_its_own():
    items = [said("user", "weather?"), call("call_1")]
    assert chat_messages(items, "", "auto", BIG)[-1] == {
        "role": "assistant",
        "content": "",
        "tool_calls": [tool_call("call_1")],
    }


def test_the_stored_items_are_not_changed():
    items = [said("user", "a" * 40), said("assistant", "b" * 40), call("call_1"), said("user", "c" * 40)]
    before = copy.deepcopy(items)
    chat_messages(items, "system", "auto", 50)
    assert items == before


# -- fit: the truncation setting ------------------------------------------------------------
def texts(messages: list | tuple) -> list[str]:
    return [m["content"] for m in messages]


TEN = [{"role": "user" if i % 2 == 0 else "assistant", "content": str(i) * 10} for i in range(10)]


def test_auto_drops_the_oldest_messages_until_the_rest_fits():
    assert fit(TEN, "auto", 100) == TEN, "100 characters fit in 100"
    assert texts(fit(TEN, "auto", 99)) == texts(TEN[1:])
    assert texts(fit(TEN, "auto", 35)) == texts(TEN[7:])


def test_disabled_never_drops():
    assert fit(TEN, "disabled", 10) == TEN


def test_a_retention_ratio_cuts_below_the_limit_so_the_next_cut_comes_later():
    ratio = {"type": "retention_ratio", "retention_ratio": 0.5}
    assert fit(TEN, ratio, 100) == TEN, "nothing is cut while it fits"
    # 99 is outgrown: cut to 49 (half of it), not to just under 99.
    assert texts(fit(TEN, ratio, 99)) == texts(TEN[6:])
    assert texts(fit(TEN, {**ratio, "retention_ratio": 1.0}, 99)) == texts(TEN[1:])


def test_token_limits_set_the_limit_at_four_characters_a_token():
    assert CHARS_PER_TOKEN == 4
    ratio = {"type": "retention_ratio", "retention_ratio": 1.0, "token_limits": {"post_instructions": 10}}
    assert texts(fit(TEN, ratio, BIG)) == texts(TEN[6:]), "10 tokens: 40 characters, whatever the caller's limit"
    assert fit(TEN, {**ratio, "token_limits": {"post_instructions": None}}, BIG) == TEN


def test_the_latest_message_stays_even_when_it_alone_is_too_long():
    assert fit([{"role": "user", "content": "x" * 500}], "auto", 10) == [{"role": "user", "content": "x" * 500}]
    assert texts(fit(TEN, "auto", 1)) == texts(TEN[-1:])


def test_a_cut_does_not_leave_a_tool_result_without_its_call():
    items = [
        said("user", "u" * 30),
        said("assistant", "a" * 30),
        call("call_1", arguments="{}"),
        output("call_1", "r" * 10),
        said("assistant", "done"),
    ]
    messages = chat_messages(items, "", "auto", BIG)
    assert [m["role"] for m in fit(list(messages), "auto", 20)] == ["assistant"]
    assert fit(list(messages), "auto", 20)[0]["content"] == "done"


def test_a_tool_calls_arguments_and_name_count_toward_the_size():
    heavy = [
        {"role": "user", "content": "u"},
        {"role": "assistant", "content": "", "tool_calls": [tool_call("c", name="n" * 10, arguments="a" * 40)]},
        {"role": "user", "content": "go on"},
    ]
    assert fit(heavy, "auto", 56) == heavy
    assert texts(fit(heavy, "auto", 54)) == ["go on"], "the call's 50 characters no longer fit with the rest"


def test_chat_messages_cuts_the_conversation_but_never_the_system_prompt():
    items = [said("user", "a" * 40), said("assistant", "b" * 40), said("user", "c" * 40)]
    messages = chat_messages(items, "S" * 500, "auto", 80)
    assert texts(messages) == ["S" * 500, "b" * 40, "c" * 40]
