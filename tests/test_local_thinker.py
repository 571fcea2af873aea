"""The default thinker: the shipped chat model in process on llama.cpp. What it is told (the
speech prompt, the session's instructions, the tools), what of its writing is said, how it
calls tools, keeps a conversation's cache, reads ahead, and stops when cancelled."""

from __future__ import annotations

import asyncio
import json
import math
import threading
import time

import numpy as np
import pytest

from duplex.pipeline.recognizer import only_command
from duplex.pipeline.thinker import ThinkRequest
from duplex.pipeline.thinkers.calls import CallReader, call_grammar, call_probability, tools_prompt
from duplex.pipeline.thinkers.chatml import render
from duplex.pipeline.thinkers.engine import Engine
from duplex.pipeline.thinkers.gbnf import Grammar
from duplex.pipeline.thinkers.llama_api import api
from duplex.pipeline.thinkers.local import SPEECH_PROMPT, WAITING, LocalChatThinker
from duplex.pipeline.thinkers.said import Speakable
from duplex.pipeline.thinkers.sampling import MIN_P, TOP_K, TOP_P, logprobs, sample
from duplex.pipeline.thinkers.schedule import STARTING
from duplex.pipeline.thinkers.slots import CHARS_PER_TOKEN, CONTEXT_MARGIN, Slots, fit_context
from duplex.pipeline.tools import ToolCallDelta
from lab.questions import TOOLS


def said(pieces: list[str]) -> str:
    s = Speakable()
    return "".join(s.feed(p) for p in pieces) + s.flush()


def test_markup_is_not_said():
    assert said(["The **capital** of France", " is `Paris`."]) == "The capital of France is Paris."
    assert (
        said(["Here are three:\n", "-", " apples\n", "2.", " pears\n", "# Done"])
        == "Here are three:\napples\npears\n Done"
    )
    assert said(["In 2019 it rained."]) == "In 2019 it rained."  # a number is not a list marker


def read(pieces: list[str], tools=TOOLS) -> tuple[str, list[ToolCallDelta]]:
    reader = CallReader(tools, "resp_1")
    text = "".join(reader.feed(p) for p in pieces)
    rest = reader.finish()
    return text + "".join(p for p in rest if isinstance(p, str)), [p for p in rest if isinstance(p, ToolCallDelta)]


def test_calls_written_as_text_are_read_as_calls():
    text, calls = read(["Sure.\n```json\n", '{"name": "set_timer", ', '"arguments": {"minutes": 5}}\n```'])
    assert text == "Sure.\n" and [(c.name, json.loads(c.arguments)) for c in calls] == [("set_timer", {"minutes": 5})]
    text, calls = read(["<tool_call>\n", '{"name": "get_weather", "parameters": {"city": "Oslo"}}\n</tool_call>'])
    assert text == "" and calls[0].name == "get_weather" and json.loads(calls[0].arguments) == {"city": "Oslo"}


def test_braces_that_are_no_call_are_said_after_all():
    assert read(["The set {1, 2} has two members."]) == ("The set {1, 2} has two members.", [])
    assert read(['Call {"name": "launch_rocket", "arguments": {}} now.']) == (
        'Call {"name": "launch_rocket", "arguments": {}} now.',
        [],
    )  # not an offered tool
    assert read(["No tools here: {x}"], tools=()) == ("No tools here: {x}", [])


def test_the_first_tokens_alternatives_say_how_likely_a_call_is():
    def chunk(*alts: tuple[str, float]) -> dict:
        top = [{"token": t, "logprob": math.log(p)} for t, p in alts]
        return {"choices": [{"delta": {"content": alts[0][0]}, "logprobs": {"content": [{"top_logprobs": top}]}}]}

    assert call_probability(chunk(("The", 0.8), ("<", 0.05), ("{{", 0.04), ("```", 0.02))) == pytest.approx(0.11)
    assert call_probability(chunk(("Paris", 0.9))) == 0.0
    assert call_probability({"choices": [{"delta": {"content": "x"}}]}) is None


def test_a_forced_call_is_written_under_the_tools_schemas():
    grammar = call_grammar(TOOLS, {"type": "function", "name": "set_timer"})
    rules = dict(line.split(" ::= ", 1) for line in grammar.splitlines() if " ::= " in line)
    assert rules["root"] == "call0" and "set_timer" in rules["call0"] and "get_weather" not in grammar
    assert rules["args0"] == '"{" "\\"minutes\\": " number "}"'  # the tool's one required property, a number
    assert call_grammar(TOOLS, "required").splitlines()[0] == "root ::= call0 | call1"
    assert '"name": "get_weather"' in tools_prompt(TOOLS) and "<tool_call>" in tools_prompt(TOOLS)


def test_schemas_become_grammars_that_keep_their_types_and_choices():
    g = Grammar()
    schema = {
        "type": "object",
        "properties": {
            "unit": {"enum": ["c", "f"]},
            "days": {"type": "array", "items": {"type": "integer"}},
            "city": {"type": "string"},
        },
        "required": ["city"],
    }
    root = g.schema(schema, "args")
    text = g.text(root)
    assert g.rules["args"] == (
        '"{" "\\"city\\": " string ( ", " "\\"unit\\": " ("\\"c\\"" | "\\"f\\"") )?'
        ' ( ", " "\\"days\\": " args-days )? "}"'
    )
    assert g.rules["args-days"] == '"[" ( integer ( ", " integer )* )? "]"'
    assert "string ::= " in text and text.startswith("root ::= args")


def test_commands_are_obeyed_not_asked():
    for text in (
        "Stop.",
        "Stop talking, please.",
        "Hold on a second.",
        "Never mind.",
        "Shut up.",
        "Okay, stop.",
        "Hey, stop.",
    ):
        assert only_command(text), text
    for text in (
        "Wait, what is the capital of France?",
        "Can you stop the timer?",
        "Okay.",
        "Stop the music",
        "Hey.",
        "",
    ):
        assert not only_command(text), text


def test_the_speech_prompt_comes_first_then_the_instructions_then_the_tools():
    thinker = LocalChatThinker(slots=1)
    msgs = thinker.messages(
        ThinkRequest(
            "r", ({"role": "system", "content": "Be a pirate."}, {"role": "user", "content": "Hi"}), tools=TOOLS
        )
    )
    system = msgs[0]["content"]
    assert system.startswith(SPEECH_PROMPT) and system.index("Be a pirate.") < system.index("# Tools")
    assert [m["role"] for m in msgs] == ["system", "user"]
    none = thinker.messages(ThinkRequest("r", ({"role": "user", "content": "Hi"},), tools=TOOLS, tool_choice="none"))
    assert none[0]["content"] == SPEECH_PROMPT


def test_a_tools_result_is_read_back_greedily_and_the_session_may_still_choose():
    # At 0.2 the model now and then answered a tool's result with "I don't know" (the
    # Agents SDK's tool flow failed on it once in a full run).
    thinker = LocalChatThinker(slots=1)
    call = {"role": "assistant", "content": "", "tool_calls": [{"id": "c", "type": "function", "function": {}}]}
    result = {"role": "tool", "tool_call_id": "c", "content": "Sunny, 21 degrees."}
    asked = ({"role": "user", "content": "Weather in Paris?"},)
    assert thinker.body(ThinkRequest("r", asked), 0)["temperature"] == pytest.approx(0.2)
    assert thinker.body(ThinkRequest("r", (*asked, call, result)), 0)["temperature"] == 0.0
    chosen = ThinkRequest("r", (*asked, call, result), options={"temperature": 0.8})
    assert thinker.body(chosen, 0)["temperature"] == 0.8  # a session's own temperature is honoured


def test_a_long_conversation_is_cut_to_the_context_in_one_go():
    msgs = [{"role": "system", "content": "s"}] + [{"role": "user", "content": "x" * 100} for _ in range(40)]
    tokens = 2000 // CHARS_PER_TOKEN + CONTEXT_MARGIN  # ~2000 characters of context
    cut = fit_context(msgs, tokens)
    assert cut[0]["role"] == "system" and 1 < len(cut) <= 11  # down to half the budget: the cache survives many turns
    assert fit_context(msgs[:5], tokens) == msgs[:5]


# -- the real model --------------------------------------------------------------------------------------------------
@pytest.fixture(scope="module")
def model():
    thinker = LocalChatThinker(slots=2)
    asyncio.run(thinker.start())
    yield thinker
    asyncio.run(thinker.aclose())


async def counting(thinker: LocalChatThinker, conversations: tuple[str, ...]) -> list:
    """A long reply in each of ``conversations``, each past its first piece."""
    streams = [
        thinker.think(
            ThinkRequest(f"resp_{c}", (user("Count slowly from one to fifty."),), {"max_tokens": 60}, conversation=c)
        )
        for c in conversations
    ]
    for stream in streams:
        assert await anext(stream)
    return streams


def nobody_for_a_while(thinker: LocalChatThinker) -> None:
    """As if no conversation had asked for longer than SHARED_S (called once every call into
    the model has returned: a reply closed after its test's loop ended is not marked ended)."""
    thinker._server.used[:] = [0.0] * thinker.slots
    thinker._slots._used[:] = [-math.inf] * thinker.slots
    thinker._slots._running.clear()


async def answer(thinker: LocalChatThinker, messages, conversation="c", **kw) -> list[str | ToolCallDelta]:
    return [p async for p in thinker.think(ThinkRequest("resp_t", tuple(messages), conversation=conversation, **kw))]


def user(text: str) -> dict:
    return {"role": "user", "content": text}


async def test_it_answers_in_speech_and_keeps_the_conversation_cached(model):
    first = "".join(map(str, await answer(model, [user("What is the capital of France?")])))
    assert "paris" in first.lower() and "*" not in first
    follow = [user("What is the capital of France?"), {"role": "assistant", "content": first}, user("And Spain?")]
    second = "".join(map(str, await answer(model, follow)))
    assert "madrid" in second.lower()
    t = model.last_timings
    assert t["cache_n"] > t["prompt_n"] > 0  # only the new turn was read


async def test_reading_ahead_leaves_only_the_last_words_to_read(model):
    conv = [user("How many legs does a spider have?")]
    await model.prefill(ThinkRequest("prefill", tuple(conv), conversation="ahead"))
    await answer(model, conv, conversation="ahead")
    # The whole turn was in the cache already: only the assistant's header is left to read.
    assert model.last_timings["prompt_n"] <= 4


async def test_a_reply_that_says_nothing_is_asked_again_not_to_end_at_once(model, monkeypatch):
    real, bodies = model._server, []

    class FirstEmpty:
        """The fault (seen once in a full run, after a tool's result): the first answer is empty."""

        def __getattr__(self, name):
            return getattr(real, name)

        def handle_chat_completions(self, body, *rest):
            bodies.append(body)
            return {} if len(bodies) == 1 else real.handle_chat_completions(body, *rest)

    monkeypatch.setattr(model, "_server", FirstEmpty())
    said = "".join(map(str, await answer(model, [user("What is the capital of Italy?")], conversation="empty")))
    assert "rome" in said.lower()
    assert [b.get("min_tokens", 0) for b in bodies] == [0, 1] and all(b["cache_prompt"] for b in bodies)


async def test_a_request_may_not_end_before_its_first_tokens(model):
    engine = model._server
    body = {"messages": [user("Say nothing. Reply with an empty message.")], "max_tokens": 4, "temperature": 0}
    empty = await asyncio.to_thread(engine.handle_chat_completions, body)
    assert empty["timings"]["predicted_n"] == 0  # the model's own answer: nothing
    said = await asyncio.to_thread(engine.handle_chat_completions, {**body, "min_tokens": 1})
    assert said["timings"]["predicted_n"] >= 1 and said["choices"][0]["message"]["content"]


async def test_a_reply_a_newer_one_stopped_before_its_first_word_is_not_asked_again(model):
    await model.idle()
    long = user("Read this and say what it is about. " + "The quick brown fox jumps over the lazy dog. " * 60)
    prepared = model.think(ThinkRequest("prepared", (long,), conversation="superseded"))
    first = asyncio.ensure_future(anext(prepared))
    while "superseded" not in model._running:  # its request is with the model (its long prompt takes seconds)
        await asyncio.sleep(0.01)
    said = "".join(map(str, await answer(model, [user("What is the capital of Italy?")], conversation="superseded")))
    assert "rome" in said.lower()
    with pytest.raises(StopAsyncIteration):  # it ends saying nothing: asked again, it would wipe the slot's cache
        await first
    assert "superseded" not in model._running and not model._halted


async def test_a_named_tool_is_called_with_valid_arguments(model):
    out = await answer(
        model,
        [user("Is it cold in Berlin today?")],
        tools=TOOLS,
        tool_choice={"type": "function", "name": "get_weather"},
    )
    calls = [p for p in out if isinstance(p, ToolCallDelta)]
    assert len(calls) == 1 and calls[0].name == "get_weather"
    assert json.loads(calls[0].arguments)["city"].lower() == "berlin"


async def test_a_cancelled_reply_stops_the_model_at_once(model):
    await model.idle()
    before = model.counters()["tokens_predicted_total"]
    story = [user("Tell me a long story about a dragon, in many sentences.")]
    stream = model.think(ThinkRequest("resp_long", tuple(story), conversation="cancel", options={"max_tokens": 200}))
    assert await anext(stream)
    await stream.aclose()  # what a cancelled reply does
    await model.idle()
    assert model.counters()["tokens_predicted_total"] - before < 20  # not the 200 it was allowed


def test_conversations_keep_their_slots_and_the_least_recent_gives_way():
    slots = Slots(2)
    assert (slots.of("a"), slots.of("b"), slots.of("a")) == (0, 1, 0)
    assert slots.of("c") == 1  # b was used least recently
    assert slots.of("") is None
    slots.started(0, "a")
    assert slots.busy_for(0, "d") and not slots.busy_for(0, "a") and not slots.busy_for(1, "d")
    slots.ended(0, "someone else")
    assert slots.answering == 1
    slots.ended(0, "a")
    assert slots.answering == 0


def test_a_new_conversation_takes_an_idle_slot_in_the_lane_with_the_cores_to_spare():
    clock = [0.0]
    slots = Slots(4, lanes=2, clock=lambda: clock[0])  # slots 0 and 2 in the first lane (every thread)
    # Four conversations starting together (nothing answering yet): none takes another's slot.
    assert [slots.of(c) for c in "abcd"] == [0, 2, 1, 3]
    clock[0] = 10.0  # all of them idle
    assert slots.of("e") == 0  # nobody talking: the first lane (a's slot, its least recently used)
    slots.started(0, "e")
    clock[0] = 20.0
    assert slots.of("f") == 1  # e is answering in the first lane: the other (c's)
    assert slots.of("b") == 2  # kept its own
    assert slots.of("c") == 3  # 0 answering, 1 and 2 just used: the idle one (d's)


async def test_beyond_its_slots_a_reply_waits_and_says_so(model):
    await model.idle()
    talking = await counting(model, ("x", "y"))  # both slots are answering
    third = model.think(ThinkRequest("resp_z", (user("Say hello."),), {"max_tokens": 3}, conversation="z"))
    assert await anext(third) == WAITING
    for stream in [*talking, third]:
        await stream.aclose()
    await model.idle()


def test_the_prompt_is_the_models_own_template_with_calls_and_results_as_it_writes_them():
    call = {"id": "c", "type": "function", "function": {"name": "get_weather", "arguments": '{"city":"Paris"}'}}
    msgs = [
        {"role": "system", "content": "Be brief."},
        {"role": "user", "content": "Weather in Paris?"},
        {"role": "assistant", "content": "", "tool_calls": [call]},
        {"role": "tool", "tool_call_id": "c", "content": "Sunny."},
        {"role": "tool", "tool_call_id": "d", "content": "21 degrees."},
    ]
    assert render(msgs) == (
        "<|im_start|>system\nBe brief.<|im_end|>\n<|im_start|>user\nWeather in Paris?<|im_end|>\n"
        '<|im_start|>assistant\n<tool_call>\n{"name": "get_weather", "arguments": {"city": "Paris"}}\n</tool_call>'
        "<|im_end|>\n<|im_start|>user\n<tool_response>\nSunny.\n</tool_response>\n<tool_response>\n21 degrees.\n"
        "</tool_response><|im_end|>\n<|im_start|>assistant\n"
    )
    ahead = render(msgs[:2], add_generation_prompt=False)
    assert ahead.endswith("Paris?<|im_end|>\n") and render([{"role": "user", "content": "Hi"}]).startswith(
        "<|im_start|>system\nYou are Qwen"
    )


async def test_a_request_stopped_before_its_prompt_is_read_reads_none_of_it(model):
    await model.idle()
    engine, before = model._server, model.counters()["prompt_tokens_total"]
    stop = threading.Event()
    stop.set()
    body = model.body(ThinkRequest("r", (user("Tell me about the history of Rome. " * 40),)), 1)
    result = await asyncio.to_thread(engine.handle_chat_completions, {**body, "stream": False}, None, stop)
    assert "error" not in result and result["timings"]["predicted_n"] == 0
    assert model.counters()["prompt_tokens_total"] == before


async def test_a_request_it_cannot_serve_fails_alone_and_the_model_serves_on(model):
    engine = model._server
    body = {**model.body(ThinkRequest("r", (user("Hi."),)), 1), "stream": False, "grammar": "root ::= ("}
    assert "grammar" in (await asyncio.to_thread(engine.handle_chat_completions, body))["error"]["message"]
    body = {**body, "id_slot": 2, "grammar": None}  # the model has two
    assert "no slot 2" in (await asyncio.to_thread(engine.handle_chat_completions, body))["error"]["message"]
    said = "".join(map(str, await answer(model, [user("What is the capital of Italy?")], conversation="after")))
    assert "rome" in said.lower()


def test_another_models_template_is_llama_cpps_with_calls_and_results_as_chatml_words_them():
    engine = object.__new__(Engine)  # the template needs llama.cpp's renderer, not a model
    _, engine._lib = api()
    engine._template = b'{{ "<start_of_turn>" }}'  # a Gemma template, as llama.cpp detects one
    call = {"function": {"name": "get_weather", "arguments": '{"city": "Oslo"}'}}
    msgs = [user("Weather?"), {"role": "assistant", "content": "", "tool_calls": [call]}]
    msgs.append({"role": "tool", "content": "Sunny."})
    assert engine.prompt(msgs) == (
        "<start_of_turn>user\nWeather?<end_of_turn>\n<start_of_turn>model\n<tool_call>\n"
        '{"name": "get_weather", "arguments": {"city": "Oslo"}}\n</tool_call><end_of_turn>\n'
        "<start_of_turn>user\n<tool_response>\nSunny.\n</tool_response><end_of_turn>\n<start_of_turn>model\n"
    )
    assert engine.prompt([user("Hi")], add_generation_prompt=False) == "<start_of_turn>user\nHi<end_of_turn>\n"


def test_sampling_keeps_llama_cpps_defaults_and_the_first_tokens_alternatives_are_log_probabilities():
    logits = np.log(np.array([0.5, 0.3, 0.15, 0.04, 0.01], np.float32))
    rng = np.random.default_rng(0)
    assert sample(logits, 0.0, (TOP_K, TOP_P, MIN_P), rng) == 0
    drawn = {sample(logits, 1.0, (TOP_K, TOP_P, MIN_P), rng) for _ in range(300)}
    assert drawn == {0, 1, 2}  # top-p 0.95 keeps three; min-p 0.05 of the likeliest drops 0.01 anyway
    assert {sample(logits, 1.0, (1, 1.0, 0.0), rng) for _ in range(50)} == {0}  # top-k 1
    out = logprobs(logits, 1, 2, str)
    assert out["token"] == "1" and math.exp(out["logprob"]) == pytest.approx(0.3, rel=1e-5)
    assert [t["token"] for t in out["top_logprobs"]] == ["0", "1"]


async def test_one_conversation_gets_every_thread_and_several_share_one(model):
    engine = model._server
    await model.idle()
    assert len(engine.lanes) == model.threads == 2  # a lane a thread: slot 0 in the first, slot 1 in the second
    nobody_for_a_while(model)
    await answer(model, [user("Say hi.")], conversation="alone", options={"max_tokens": 2})
    assert model._slots.of("alone") % 2 == 0  # the first lane: the one with every thread
    assert engine.lanes[0].threads_now == model.threads == 2
    await answer(model, [user("Say hello.")], conversation="another", options={"max_tokens": 2})
    assert model._slots.of("another") != model._slots.of("alone")  # (the other slot: "alone" was used last)
    assert engine.lanes[model._slots.of("another") % 2].threads_now == 1  # two conversations within SHARED_S


async def test_two_conversations_are_written_at_once_on_two_lanes(model):
    engine = model._server
    await model.idle()
    nobody_for_a_while(model)
    streams = await counting(model, ("lane-a", "lane-b"))  # both are writing now
    assert [lane.running for lane in engine.lanes] == [1, 1]  # one in each context, neither waits for the other
    for stream in streams:
        await stream.aclose()
    await model.idle()
    assert "llamacpp:requests_processing 0.0" in engine.handle_metrics()


async def test_a_stream_whose_reader_is_gone_still_ends_and_the_model_serves_on(model):
    engine = model._server

    def gone(chunk: dict) -> bool:
        if chunk["choices"][0].get("finish_reason"):
            raise RuntimeError("Event loop is closed")  # what call_soon_threadsafe raises once a test's loop ended
        return False

    body = {**model.body(ThinkRequest("r", (user("Say hi."),)), 0), "stream": True, "max_tokens": 3}
    result = await asyncio.wait_for(asyncio.to_thread(engine.handle_chat_completions, body, gone), 120)
    assert "error" not in result and result["timings"]["predicted_n"] >= 1
    said = "".join(map(str, await answer(model, [user("What is the capital of Italy?")], conversation="later")))
    assert "rome" in said.lower()


@pytest.mark.parametrize("ahead", [True, False], ids=["ahead of its voice", "not ahead"])
async def test_a_reply_well_ahead_of_its_voice_sits_out_while_another_in_its_lane_starts(model, ahead):
    engine = Engine(str(model.path), slots=2, context=512, threads=model.threads, lanes=1)  # both slots in one lane
    t0 = time.monotonic()
    # Frozen, the clock says the first reply's words are ahead of its voice as soon as they are
    # written; racing, that its voice has long said them.
    engine._m.clock = (lambda: t0) if ahead else (lambda: t0 + (time.monotonic() - t0) * 1000)
    log: list[str] = []
    a_writing, a_again = threading.Event(), threading.Event()

    def recorder(who: str):
        def on_chunk(chunk: dict) -> bool:
            if chunk["choices"][0]["delta"].get("content") is not None:
                log.append(who)  # (both requests are written by the lane's one thread: the log is its order)
                if log.count("a") == STARTING + 4:
                    a_writing.set()
                if who == "a" and log.count("b") == STARTING + 2:
                    a_again.set()
            return False

        return on_chunk

    def body(slot: int, tokens: int) -> dict:
        return {
            "messages": [user("Count slowly from one to fifty.")],
            "id_slot": slot,
            "stream": True,
            "max_tokens": tokens,
            "temperature": 0,
        }

    stop_a = threading.Event()
    try:
        write_a = engine.handle_chat_completions
        a = asyncio.ensure_future(asyncio.to_thread(write_a, body(0, 300), recorder("a"), stop_a))
        assert await asyncio.to_thread(a_writing.wait, 120)
        b = await asyncio.wait_for(
            asyncio.to_thread(engine.handle_chat_completions, body(1, STARTING + 2), recorder("b")), 120
        )
        assert "error" not in b and b["timings"]["predicted_n"] == STARTING + 2
        assert await asyncio.to_thread(a_again.wait, 120)  # the first reply goes on once the other has begun
        stop_a.set()
        assert "error" not in await asyncio.wait_for(a, 120)
    finally:
        stop_a.set()
        await asyncio.to_thread(engine.close)
    first_b = log.index("b")
    starting = log[first_b : [i for i, who in enumerate(log) if who == "b"][STARTING - 1]]
    if ahead:
        assert "a" not in starting  # every step was the starting reply's alone
    else:
        assert starting.count("a") >= STARTING - 2  # a token of each in every step: neither waits


async def test_a_prompt_starts_from_another_slots_cache_in_its_lane_or_another(model):
    engine = Engine(str(model.path), slots=3, context=1024, threads=model.threads, lanes=2)  # slots 0, 2 | 1
    system = "You answer in a few plain words. " * 40

    def ask(slot: int, prompt: str = system) -> tuple[int, str]:
        messages = [{"role": "system", "content": prompt}, user("What is the capital of Italy?")]
        out = engine.handle_chat_completions({"messages": messages, "id_slot": slot, "max_tokens": 8, "temperature": 0})
        return out["timings"]["prompt_n"], out["choices"][0]["message"]["content"]

    try:
        read, cold = await asyncio.to_thread(ask, 0)
        assert read > 300 and "rome" in cold.lower()
        # (the same cells: the same answer, but for a last token read in a batch of one, not of many)
        copied, said = await asyncio.to_thread(ask, 1)
        assert copied == 1 and "rome" in said.lower()  # copied from the other lane: only the last token read
        shared, said = await asyncio.to_thread(ask, 2)
        assert shared == 1 and "rome" in said.lower()  # shared within the lane
        assert [lane.borrowed for lane in engine.lanes] == [read, read]
        await asyncio.to_thread(ask, 1, "You are terse. " * 40)  # slot 1 now holds another prompt
        with engine.lanes[0]._lock:  # the lane that holds it is mid-step for longer than a copy waits
            again, said = await asyncio.to_thread(ask, 1)
        assert again > read - 10 and "rome" in said.lower()  # read, not copied
    finally:
        await asyncio.to_thread(engine.close)
