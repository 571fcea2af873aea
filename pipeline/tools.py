"""Function tools between the Realtime shape and the thinkers' back ends.

Realtime clients describe a tool as ``{"type": "function", "name", "description",
"parameters"}``; chat-completions endpoints want it wrapped in ``{"type":
"function", "function": {...}}``. A forced choice (``"required"`` or one named
function) is what a model can be made to obey with structured output: the JSON
schemas for that are here too, and the offline echo thinker's rule for which tool
a user asked for.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from typing import Any

Tool = dict[str, Any]
"""A function tool in the Realtime shape: ``{"type": "function", "name", "description",
"parameters"}`` (parameters: a JSON schema)."""

ToolChoice = str | dict[str, Any]
"""``"auto"``, ``"none"``, ``"required"`` or ``{"type": "function", "name": ...}``."""


@dataclass(frozen=True, slots=True)
class ToolCallDelta:
    """A piece of one function call: the first piece of call ``index`` names it, every
    piece carries more of its JSON arguments."""

    index: int
    call_id: str
    name: str
    arguments: str = ""

    @property
    def nbytes(self) -> int:
        return len(self.arguments)


def calls_allowed(tools: tuple[Tool, ...], choice: ToolChoice) -> bool:
    """Whether a request with these tools may call one."""
    return bool(tools) and choice != "none"


def chat_tools(tools: tuple[Tool, ...]) -> list[dict[str, Any]]:
    """The tools as chat completions take them."""
    return [
        {
            "type": "function",
            "function": {k: t[k] for k in ("name", "description", "parameters") if k in t},
        }
        for t in tools
    ]


def chat_tool_choice(choice: ToolChoice) -> str | dict[str, Any]:
    """The tool choice as chat completions take it."""
    if isinstance(choice, dict):
        return {"type": "function", "function": {"name": choice["name"]}}
    return choice


def forced_name(choice: ToolChoice) -> str | None:
    """The function a choice forces, if it names one."""
    return str(choice["name"]) if isinstance(choice, dict) else None


def parameters(tools: tuple[Tool, ...], name: str) -> dict[str, Any]:
    """The JSON schema of a tool's arguments (an object, whatever the tool says)."""
    for t in tools:
        if t.get("name") == name:
            schema = t.get("parameters")
            return schema if isinstance(schema, dict) and schema else {"type": "object"}
    raise ValueError(f"tool {name!r} is not among the tools offered")


def required_schema(tools: tuple[Tool, ...]) -> dict[str, Any]:
    """What a model must write when it must call at least one tool: a list of
    ``{"name", "parameters"}`` calls (the shape vLLM's server uses for ``required``)."""
    return {
        "type": "array",
        "minItems": 1,
        "items": {
            "type": "object",
            "anyOf": [
                {
                    "properties": {
                        "name": {"type": "string", "enum": [t["name"]]},
                        "parameters": parameters(tools, t["name"]),
                    },
                    "required": ["name", "parameters"],
                }
                for t in tools
            ],
        },
    }


def call_id(request_id: str, index: int) -> str:
    """A call id unique within the session (request ids are)."""
    return f"call_{request_id[-10:]}_{index}"


def echo_call(tools: tuple[Tool, ...], choice: ToolChoice, request_id: str, said: str) -> ToolCallDelta | None:
    """The offline thinker's rule: call the tool the choice forces, else one whose name
    the user said (``get_weather`` or, spoken, "get weather"); ``required`` with none
    named calls the first. Arguments: a JSON object in what was said, else the words
    after the name for a tool with one string parameter, else ``{}``."""
    if not calls_allowed(tools, choice):
        return None
    name = forced_name(choice)
    rest = ""
    if name is None:
        lowered = said.lower()
        for t in tools:
            spoken = [t["name"].lower(), t["name"].lower().replace("_", " ")]
            at = next((lowered.find(s) + len(s) for s in spoken if s in lowered), -1)
            if at >= 0:
                name, rest = t["name"], said[at:]
                break
    if name is None and choice == "required":
        name = tools[0]["name"]
    if name is None:
        return None
    return ToolCallDelta(0, call_id(request_id, 0), name, _arguments(parameters(tools, name), said, rest))


MAX_ARGUMENT_DEPTH = 32
"""Nesting of a JSON object in the user's words that is read as arguments (deeper is
words: the parser would recurse that deep)."""


def _depth(text: str, start: int, end: int) -> int:
    """The deepest bracket nesting in ``text[start:end]`` (brackets in strings count too)."""
    depth = most = 0
    for c in text[start:end]:
        if c in "{[":
            depth += 1
            most = max(most, depth)
        elif c in "}]":
            depth -= 1
    return most


def _arguments(schema: dict[str, Any], said: str, rest: str) -> str:
    # From the first "{" to the last "}": two scans (a regex here backtracked
    # quadratically: 32 KiB of "{" held the event loop for seconds).
    start, end = said.find("{"), said.rfind("}")
    if 0 <= start < end and _depth(said, start, end) <= MAX_ARGUMENT_DEPTH:
        try:
            value = json.loads(said[start : end + 1])
            if isinstance(value, dict):
                return json.dumps(value)
        except (ValueError, RecursionError):  # not JSON, or nested deeper than the parser goes
            pass
    props = schema.get("properties") or {}
    strings = [k for k, v in props.items() if isinstance(v, dict) and v.get("type") == "string"]
    words = re.sub(r"^[\s,.:;!?-]*(?:(?:in|for|of|on|at|about)\s+)?", "", rest).strip(" .,!?;:")
    if len(strings) == 1 and len(props) == 1 and words:
        return json.dumps({strings[0]: words})
    return "{}"
