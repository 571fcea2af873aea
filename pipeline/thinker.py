"""The thinker: what to say. Given the conversation so far, stream the reply's text.

The conversation a thinker sees holds every assistant reply only as far as the
user heard it (a truncated reply is cut at the last word begun by then), so the
next answer knows what was actually said. Closing or cancelling ``think`` must
abort the language-model request.

A thinker offered function tools (``ThinkRequest.tools``) may call them instead of,
or after, saying something: it yields :class:`ToolCallDelta` pieces among its text.
The call goes back to the client, whose answer comes in a later request as a
``tool`` message.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from typing import Any, Protocol

from duplex.pipeline.tools import Tool, ToolCallDelta, ToolChoice, echo_call

Message = dict[str, Any]
"""A chat message as OpenAI's chat completions take it: ``{"role": "system"|"user"|
"assistant", "content": ...}``, an assistant message may carry ``tool_calls``, and a
``{"role": "tool", "tool_call_id": ..., "content": ...}`` message answers one."""


@dataclass(frozen=True, slots=True)
class ThinkRequest:
    """What the thinker answers: the conversation as chat messages, and the tools it may call."""

    request_id: str
    messages: tuple[Message, ...]
    """Oldest first."""
    options: dict[str, object] = field(default_factory=dict)
    tools: tuple[Tool, ...] = ()
    tool_choice: ToolChoice = "auto"
    conversation: str = ""
    """Whose conversation this is (a session's id): a thinker that keeps a conversation's
    state between requests (a model's prompt cache) keys it by this; empty: nobody's."""


class Thinker(Protocol):
    """Streams a reply's text (and function calls, if it supports tools) for a conversation.

    Lifecycle: ``start`` checks, before serving, what the constructor cannot (that a
    remote endpoint answers and serves the model), raising ValueError that names the
    problem; a no-op where there is nothing to check. ``aclose`` closes its
    connections or the engine it owns.
    """

    name: str
    tools: bool
    """Whether it can call function tools (a session offering tools to one that cannot is told so)."""

    async def start(self) -> None:
        """Check it can answer (a remote endpoint, say) before the server serves."""
        ...

    def think(self, request: ThinkRequest) -> AsyncIterator[str | ToolCallDelta]: ...

    async def prefill(self, request: ThinkRequest) -> None:
        """Read ``request``'s conversation ahead of answering it (a model's prompt cache
        then holds it), saying nothing; a no-op for a thinker with nothing to read ahead,
        and while it is answering the same conversation."""
        ...

    async def aclose(self) -> None:
        """Close its connections, or the engine it owns."""
        ...


NOTHING_HEARD = "I have nothing to repeat yet."
NOT_UNDERSTOOD = "Sorry, I did not catch that."


class EchoThinker:
    """The offline default: say back the last thing the user said. Offered tools, it
    calls one the user named (see :func:`duplex.pipeline.tools.echo_call`), and
    says a tool's result when that is the latest message."""

    name = "echo"
    tools = True

    async def think(self, request: ThinkRequest) -> AsyncIterator[str | ToolCallDelta]:
        last = request.messages[-1] if request.messages else None
        if last is not None and last["role"] == "tool":
            yield str(last.get("content") or "").strip() or NOT_UNDERSTOOD
            return
        users = [m["content"] for m in request.messages if m["role"] == "user"]
        call = echo_call(request.tools, request.tool_choice, request.request_id, users[-1] if users else "")
        if call is not None:
            yield call
            return
        if not users:
            yield NOTHING_HEARD
            return
        yield users[-1].strip() or NOT_UNDERSTOOD

    async def start(self) -> None:
        """Nothing to check."""

    async def prefill(self, request: ThinkRequest) -> None:
        """Nothing to read ahead."""

    async def aclose(self) -> None:
        """Nothing held."""
