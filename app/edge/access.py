"""Who may open a session: an optional API key and an Origin allow-list.

The key is read where each kind of client can put it: ``Authorization: Bearer``
(what the OpenAI SDK sends), a ``api_key`` query parameter, or OpenAI's browser
convention, a ``openai-insecure-api-key.<key>`` WebSocket subprotocol. The Origin
check stops a random web page from driving a local server (cross-site WebSocket
hijacking): browsers always send Origin, so a request with one must match the
allow-list (by default, the server's own page); one without it is not a browser.
"""

from __future__ import annotations

import hmac
from dataclasses import dataclass
from http import HTTPStatus
from urllib.parse import parse_qs, urlsplit

from websockets.http11 import Request

KEY_PROTOCOL = "openai-insecure-api-key."


@dataclass(frozen=True, slots=True)
class Refusal:
    status: HTTPStatus
    reason: str


def presented_key(request: Request) -> str | None:
    auth = request.headers.get("Authorization", "")
    if auth.lower().startswith("bearer "):
        return auth[7:].strip()
    query = parse_qs(urlsplit(request.path).query)
    if query.get("api_key"):
        return query["api_key"][0]
    for proto in request.headers.get_all("Sec-WebSocket-Protocol"):
        for p in proto.split(","):
            if p.strip().startswith(KEY_PROTOCOL):
                return p.strip()[len(KEY_PROTOCOL) :]
    return None


def allowed_origins(configured: tuple[str, ...], host: str, port: int) -> set[str]:
    """The configured list, or the server's own page on loopback names."""
    if configured:
        return {o.rstrip("/") for o in configured}
    names = {host, "127.0.0.1", "localhost", "[::1]"} if host in ("127.0.0.1", "localhost", "::1") else {host}
    return {f"http://{n}:{port}" for n in names} | {f"https://{n}:{port}" for n in names}


def check(request: Request, *, api_key: str | None, origins: set[str]) -> Refusal | None:
    """None to let the session open, else why not."""
    origin = request.headers.get("Origin")
    if origin is not None and "*" not in origins and origin.rstrip("/") not in origins:
        return Refusal(HTTPStatus.FORBIDDEN, f"origin {origin} is not allowed")
    if api_key:
        key = presented_key(request)
        if key is None:
            return Refusal(HTTPStatus.UNAUTHORIZED, "an API key is required")
        if not hmac.compare_digest(key.encode(), api_key.encode()):
            return Refusal(HTTPStatus.UNAUTHORIZED, "the API key is wrong")
    return None
