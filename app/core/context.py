"""The thinker's context: the conversation as chat messages, cut to fit.

Items become chat-completions messages: a function call joins the assistant
message before it as a ``tool_call`` and its output is a ``tool`` message.

A session's ``truncation`` setting (OpenAI's) says what happens when the
conversation after the instructions outgrows the context: ``auto`` drops the
oldest messages until it fits, a ``retention_ratio`` drops them until only that
fraction of the limit is used (so the next cuts come less often), ``disabled``
never drops. Tokens are counted as four characters each: the thinker's tokenizer
is not known here, and the limit is a budget, not an exact window. The stored
conversation is not changed.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from duplex.pipeline.thinker import Message

if TYPE_CHECKING:
    from duplex.app.core.conversation import Item

CHARS_PER_TOKEN = 4


def _size(m: Message) -> int:
    calls = m.get("tool_calls") or []
    return len(str(m.get("content") or "")) + sum(
        len(c["function"]["arguments"]) + len(c["function"]["name"]) for c in calls
    )


def fit(messages: list[Message], truncation: str | dict[str, Any], limit_chars: int) -> list[Message]:
    """``messages`` (no system prompt) cut as ``truncation`` says to ``limit_chars``
    (or the setting's own ``token_limits``)."""
    if truncation == "disabled":
        return messages
    keep = 1.0
    if isinstance(truncation, dict):
        keep = float(truncation["retention_ratio"])
        post = (truncation.get("token_limits") or {}).get("post_instructions")
        if post:
            limit_chars = int(post) * CHARS_PER_TOKEN
    total = sum(_size(m) for m in messages)
    if total <= limit_chars:
        return messages
    target = int(limit_chars * keep)
    start = 0
    while start < len(messages) - 1 and total > target:
        total -= _size(messages[start])
        start += 1
    # A tool result whose call was dropped would answer nothing.
    while start < len(messages) - 1 and messages[start]["role"] == "tool":
        start += 1
    return messages[start:]


def chat_messages(
    items: Sequence[Item], system: str, truncation: str | dict[str, Any], limit_chars: int
) -> tuple[Message, ...]:
    """The items (finished ones) as chat messages after the ``system`` prompt, cut to fit."""
    out: list[Message] = []
    for item in items:
        if item.status == "in_progress":
            continue
        if item.type == "function_call":
            call = {
                "id": item.call_id,
                "type": "function",
                "function": {"name": item.name, "arguments": item.arguments},
            }
            if out and out[-1]["role"] == "assistant":  # the reply that made the call
                out[-1] = {**out[-1], "tool_calls": [*out[-1].get("tool_calls", []), call]}
            else:
                out.append({"role": "assistant", "content": "", "tool_calls": [call]})
        elif item.type == "function_call_output":
            out.append({"role": "tool", "tool_call_id": item.call_id, "content": item.output})
        elif (text := item.text()) or item.role == "user":  # an empty user turn is still a turn
            out.append({"role": item.role, "content": text})
    out = fit(out, truncation, limit_chars)
    return tuple([{"role": "system", "content": system}, *out] if system else out)
