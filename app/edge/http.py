"""Plain HTTP on the WebSocket port: the web client's files and ``/healthz``."""

from __future__ import annotations

import email.parser
import email.policy
import json
import mimetypes
from http import HTTPStatus
from importlib.util import find_spec
from pathlib import Path
from typing import Any

from websockets.datastructures import Headers
from websockets.http11 import Request, Response


def _response(status: HTTPStatus, body: bytes, content_type: str, extra: dict[str, str] | None = None) -> Response:
    # The connection ends after every plain answer, so it says so: a client that kept it
    # for its next request (httpx's pool) lost that request to the close, now and then.
    headers = Headers(
        [
            ("Content-Type", content_type),
            ("Content-Length", str(len(body))),
            ("Cache-Control", "no-cache"),
            ("Connection", "close"),
        ]
    )
    for key, value in (extra or {}).items():
        headers[key] = value
    return Response(status.value, status.phrase, headers, body)


def raw_response(status: HTTPStatus, body: bytes, content_type: str, extra: dict[str, str]) -> Response:
    return _response(status, body, content_type, extra)


def text_response(status: HTTPStatus, text: str) -> Response:
    return _response(status, (text + "\n").encode(), "text/plain; charset=utf-8")


def json_response(status: HTTPStatus, data: dict[str, Any]) -> Response:
    return _response(status, json.dumps(data).encode(), "application/json")


def metrics_response(text: str) -> Response:
    return _response(HTTPStatus.OK, text.encode(), "text/plain; version=0.0.4; charset=utf-8")


SINGLE_HEADERS = (
    "Host",
    "Upgrade",
    "Connection",
    "Origin",
    "Authorization",
    "OpenAI-Beta",
    "Sec-WebSocket-Key",
    "Sec-WebSocket-Version",
)
"""Headers a request may carry once: two of them make its meaning ambiguous."""


def duplicated_header(request: Request) -> str | None:
    """The first of :data:`SINGLE_HEADERS` that the request repeats, if any."""
    return next((h for h in SINGLE_HEADERS if len(request.headers.get_all(h)) > 1), None)


def form_fields(body: bytes, content_type: str) -> dict[str, bytes]:
    """The fields of a ``multipart/form-data`` body, by name (each part's bytes)."""
    message = email.parser.BytesParser(policy=email.policy.HTTP).parsebytes(
        b"Content-Type: " + content_type.encode("latin-1") + b"\r\n\r\n" + body
    )
    fields: dict[str, bytes] = {}
    for part in message.iter_parts():
        name = part.get_param("name", header="content-disposition")
        payload = part.get_payload(decode=True)
        if isinstance(name, str) and isinstance(payload, bytes):
            fields[name] = payload
    return fields


def is_upgrade(request: Request) -> bool:
    return "websocket" in request.headers.get("Upgrade", "").lower()


def head_only(response: Response) -> Response:
    """The response to a HEAD request: the same headers, no body."""
    return Response(response.status_code, response.reason_phrase, response.headers, b"")


def web_root() -> Path:
    """The browser client's folder, wherever the package is installed (package data).

    ``duplex.web`` holds no Python, so it is a namespace package; an editable install
    adds a non-folder entry to its path, which ``importlib.resources`` refuses. The
    first real folder on the path is the one.
    """
    spec = find_spec("duplex.web")
    for location in (spec.submodule_search_locations or []) if spec else []:
        if Path(location).is_dir():
            return Path(location)
    raise FileNotFoundError("the duplex.web package data is not installed")


def static_file(root: Path, path: str) -> Response:
    """A file under ``root`` ('/' is index.html); never one outside it.

    The path is walked name by name: no name may be empty, start with a dot or hold
    a separator or NUL, so no request can leave the folder or reach a hidden file.
    """
    rel = path.lstrip("/") or "index.html"
    target = root
    for name in rel.split("/"):
        if not name or name.startswith(".") or "\\" in name or "\x00" in name:
            return text_response(HTTPStatus.NOT_FOUND, "not found")
        target = target.joinpath(name)
    try:
        if target.is_dir():
            target = target.joinpath("index.html")
        if not target.is_file():
            return text_response(HTTPStatus.NOT_FOUND, "not found")
        body = target.read_bytes()
    except OSError:  # a name too long, a file that went away: not found either way
        return text_response(HTTPStatus.NOT_FOUND, "not found")
    ctype = mimetypes.guess_type(target.name)[0] or "application/octet-stream"
    if target.name.endswith(".js"):
        ctype = "text/javascript"  # module scripts and AudioWorklets need a JS type
    if ctype.startswith("text/"):
        ctype += "; charset=utf-8"
    return _response(HTTPStatus.OK, body, ctype)
