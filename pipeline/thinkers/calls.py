"""How the local model calls function tools.

A model of ~1.5 B parameters seldom writes a call in its chat template's form when it
should: it describes the call ("you can call get_weather with..."), writes the JSON
in a code block, or answers as if it knew. So the decision and the writing are
taken apart:

* the tools are told in the system prompt, in the Hermes wording Qwen's and many
  other templates use (the same prompt whether or not a call follows, so the prompt
  cache serves both);
* **whether** to call is the model's own probability that its reply begins with a
  call: its first token is one that opens one (``<``, ``{``, a code fence). Read from
  the first token's alternatives as the reply streams, so a reply that is no call
  costs nothing more;
* **what** the call is, is then written under a grammar of the tools' JSON schemas
  (GBNF, :mod:`~duplex.pipeline.thinkers.gbnf`), compact, so it is always a valid call
  to an offered tool;
* a call the model writes as text anyway is still read as one (:class:`CallReader`).
"""

from __future__ import annotations

import json
import math
import re
from typing import Any

from duplex.pipeline.thinkers.gbnf import Grammar, literal
from duplex.pipeline.tools import Tool, ToolCallDelta, ToolChoice, call_id, forced_name, parameters

CALL_PROBABILITY = 0.08
"""A reply whose first token opens a call with at least this probability is a call
(tuned on the development questions: scripts/bench_answers.py --set dev)."""
TOP_TOKENS = 10
"""First-token alternatives read."""
_OPENS_CALL = re.compile(r"^\s*[<{`\[]")


def tools_prompt(tools: tuple[Tool, ...]) -> str:
    """The tools, told as the system prompt's last part."""
    signatures = "\n".join(
        json.dumps({"type": "function", "function": {k: t[k] for k in ("name", "description", "parameters") if k in t}})
        for t in tools
    )
    return (
        "# Tools\n\nYou may call one or more functions to assist with the user query.\n\n"
        "You are provided with function signatures within <tools></tools> XML tags:\n"
        f"<tools>\n{signatures}\n</tools>\n\n"
        "For each function call, return a json object with function name and arguments within "
        "<tool_call></tool_call> XML tags:\n"
        '<tool_call>\n{"name": <function-name>, "arguments": <args-json-object>}\n</tool_call>'
    )


def call_probability(chunk: dict[str, Any]) -> float | None:
    """How likely the reply is to begin a call, from a streamed chunk carrying the first
    token's alternatives (None if it carries none)."""
    choices = chunk.get("choices") or []
    content = ((choices[0].get("logprobs") or {}).get("content") or []) if choices else []
    if not content:
        return None
    return sum(math.exp(t["logprob"]) for t in content[0].get("top_logprobs") or [] if _OPENS_CALL.match(t["token"]))


def call_grammar(tools: tuple[Tool, ...], choice: ToolChoice) -> str:
    """The grammar (GBNF) a forced call is written under: one ``{"name", "arguments"}``
    object for the named tool, or for any offered one, its arguments under the tool's
    schema; no spare whitespace (fewer tokens)."""
    name = forced_name(choice)
    names = [name] if name is not None else [str(t["name"]) for t in tools]
    g = Grammar()
    calls = []
    for i, n in enumerate(names):
        opening = literal('{"name": ' + json.dumps(n) + ', "arguments": ')
        calls.append(g.rule(f"call{i}", f'{opening} {g.schema(parameters(tools, n), f"args{i}")} "}}"'))
    return g.text(" | ".join(calls))


def written_call(text: str, request_id: str) -> ToolCallDelta:
    """The call a forced reply wrote (it is valid: the grammar saw to it)."""
    value = json.loads(text)
    return ToolCallDelta(0, call_id(request_id, 0), str(value["name"]), json.dumps(value["arguments"]))


_OPENERS = re.compile(r"[{`<]")


class CallReader:
    """Reads the calls a model writes as text when it was offered ``tools``.

    Text streams on until a ``{``, a backtick or a ``<`` (where a written call would
    begin); from there it is held to the end of the reply and read: JSON objects naming
    an offered tool (``{"name": ..., "arguments": {...}}``, or ``"parameters"``) become
    :class:`ToolCallDelta` pieces and the rest of the held text is dropped; if it holds
    none, it is said after all.
    """

    def __init__(self, tools: tuple[Tool, ...], request_id: str) -> None:
        self.names = {str(t.get("name")) for t in tools}
        self.request_id = request_id
        self._held: str | None = None

    def feed(self, text: str) -> str:
        """The part of ``text`` that is surely to be said."""
        if not self.names:
            return text
        if self._held is not None:
            self._held += text
            return ""
        m = _OPENERS.search(text)
        if m is None:
            return text
        self._held = text[m.start() :]
        return text[: m.start()]

    def finish(self) -> list[str | ToolCallDelta]:
        """At the end of the reply: the calls the held text makes, or the text itself."""
        held, self._held = self._held, None
        if not held:
            return []
        calls = [c for c in _objects(held) if c[0] in self.names]
        if not calls:
            return [held]
        return [
            ToolCallDelta(i, call_id(self.request_id, i), name, json.dumps(args))
            for i, (name, args) in enumerate(calls)
        ]


def _objects(text: str) -> list[tuple[str, dict[str, Any]]]:
    """Every ``{"name", "arguments"|"parameters"}`` JSON object in ``text``, in order."""
    decoder = json.JSONDecoder()
    out = []
    at = text.find("{")
    while at >= 0:
        try:
            value, end = decoder.raw_decode(text, at)
        except ValueError:
            at = text.find("{", at + 1)
            continue
        if isinstance(value, dict) and isinstance(value.get("name"), str):
            args = value.get("arguments", value.get("parameters", {}))
            if isinstance(args, str):
                try:
                    args = json.loads(args)
                except ValueError:
                    args = None
            if isinstance(args, dict):
                out.append((value["name"], args))
        at = text.find("{", end)
    return out
