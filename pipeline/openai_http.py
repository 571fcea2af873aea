"""What the clients of OpenAI-compatible servers share (the vLLM talker's remote engine,
the chat thinker, the remote recogniser): the start-up check that a server answers
and serves the model, and the one line saying why a server refused a request.

The check's rule, the same for all three: ``GET /v1/models`` must be answered.
When it names models, the model must be among them. A server without the route
(404 or 405: faster-whisper-server, some proxies) or whose answer names none cannot
be checked there, and passes; the first real request then says what is wrong.
"""

from __future__ import annotations

from typing import Any

import httpx

DETAIL = 200
"""Characters of a server's error message kept in ours."""


def one_line(exc: BaseException) -> str:
    """An exception's message on one line (its type's name if it has none)."""
    return " ".join(str(exc).split()) or type(exc).__name__


def reason(response: httpx.Response) -> str:
    """One line saying why the server refused: its error message if it sent one in
    a known shape (OpenAI's ``{"error": {"message"}}``, FastAPI's ``{"detail"}``), else
    its body. A streamed response must have been read (``await response.aread()``)."""
    message: Any = None
    try:
        body: Any = response.json()
    except ValueError:
        body = None
    # OpenAI and vLLM: {"error": {"message": ...}}; FastAPI: {"detail": ...}, which
    # faster-whisper-server fills with OpenAI's shape; older vLLM: {"message": ...}.
    for key in ("error", "detail", "error", "message"):
        if isinstance(body, dict) and key in body:
            body = body[key]
            message = body
    if not isinstance(message, str):
        message = response.text if message is None else str(message)
    line = " ".join(message.split()) or response.reason_phrase
    return line if len(line) <= DETAIL else line[: DETAIL - 3] + "..."


def listed_models(response: httpx.Response) -> list[str]:
    """The model ids a ``/v1/models`` answer names (none if it is not OpenAI's shape)."""
    try:
        body: Any = response.json()
    except ValueError:
        return []
    data = body.get("data") if isinstance(body, dict) else None
    if not isinstance(data, list):
        return []
    return [str(m["id"]) for m in data if isinstance(m, dict) and m.get("id") is not None]


async def check_model(client: httpx.AsyncClient, model: str, server: str) -> bool:
    """Check, by the rule above, that the server behind ``client`` answers and serves
    ``model``; ``server`` names it in the errors (``"the chat endpoint http://..."``).

    Returns whether the server has the route (False: nothing could be checked).
    Raises ValueError saying what is wrong.
    """
    try:
        r = await client.get("/v1/models")
    except (httpx.HTTPError, httpx.InvalidURL) as exc:
        raise ValueError(f"{server} is not reachable: {one_line(exc)}") from None
    if r.status_code in (404, 405):
        return False
    if r.status_code != 200:
        raise ValueError(f"{server} answered {r.status_code} to /v1/models: {reason(r)}")
    served = listed_models(r)
    if served and model not in served:
        raise ValueError(f"{server} serves {served}, not {model!r}")
    return True
