"""The chat model's prompt: its own chat template (ChatML, as the Qwen2.5 GGUF's
template writes it), rendered in Python.

The tools are not given to the template: they are told in the system prompt
(:func:`~duplex.pipeline.thinkers.calls.tools_prompt`, the template's own wording), so
the same prompt serves a reply that calls and one that does not. A call the assistant
made is written back as the template writes it (``<tool_call>`` with the arguments as
JSON), a tool's result as the user's ``<tool_response>``.
"""

from __future__ import annotations

import json
from typing import Any

DEFAULT_SYSTEM = "You are Qwen, created by Alibaba Cloud. You are a helpful assistant."
"""The template's own system prompt, for a conversation that has none."""


def render(messages: list[dict[str, Any]], *, add_generation_prompt: bool = True) -> str:
    """The prompt for ``messages`` (OpenAI chat shapes), the assistant's header last unless
    ``add_generation_prompt`` is false (a read-ahead: the user's words may go on)."""
    out = []
    if not messages or messages[0].get("role") != "system":
        out.append(f"<|im_start|>system\n{DEFAULT_SYSTEM}<|im_end|>\n")
    for i, m in enumerate(messages):
        role, content = m.get("role"), _text(m.get("content"))
        if role == "tool":
            if i == 0 or messages[i - 1].get("role") != "tool":
                out.append("<|im_start|>user")
            out.append(f"\n<tool_response>\n{content}\n</tool_response>")
            if i == len(messages) - 1 or messages[i + 1].get("role") != "tool":
                out.append("<|im_end|>\n")
        elif role == "assistant" and m.get("tool_calls"):
            out.append("<|im_start|>assistant" + (f"\n{content}" if content else "") + calls(m) + "<|im_end|>\n")
        else:
            out.append(f"<|im_start|>{role}\n{content}<|im_end|>\n")
    if add_generation_prompt:
        out.append("<|im_start|>assistant\n")
    return "".join(out)


def calls(message: dict[str, Any]) -> str:
    """The calls an assistant's message made, as the template writes them."""
    out = []
    for call in message.get("tool_calls") or []:
        fn = call.get("function", call)
        out.append(f'\n<tool_call>\n{{"name": "{fn.get("name")}", "arguments": {_arguments(fn)}}}\n</tool_call>')
    return "".join(out)


def plain(message: dict[str, Any]) -> str:
    """A message's text as ChatML writes it between its role's markers (for another
    template, which has no place of its own for calls and results)."""
    content = _text(message.get("content"))
    if message.get("role") == "tool":
        return f"<tool_response>\n{content}\n</tool_response>"
    return content + calls(message)


def _text(content: Any) -> str:
    """A message's text (content parts joined)."""
    if isinstance(content, list):
        return "".join(str(p.get("text", "")) for p in content if isinstance(p, dict))
    return "" if content is None else str(content)


def _arguments(fn: dict[str, Any]) -> str:
    args = fn.get("arguments", {})
    if isinstance(args, str):
        try:
            args = json.loads(args)
        except ValueError:
            return json.dumps(args, ensure_ascii=False)
    return json.dumps(args, ensure_ascii=False)
