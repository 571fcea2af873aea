"""Plain HTTP on the WebSocket port: the web client's files and ``/healthz``."""

from __future__ import annotations

import json
import mimetypes
from http import HTTPStatus
from pathlib import Path
from typing import Any

from websockets.datastructures import Headers
from websockets.http11 import Request, Response

REALTIME_PATH = "/v1/realtime"


def _response(status: HTTPStatus, body: bytes, content_type: str, extra: dict[str, str] | None = None) -> Response:
    headers = Headers(
        [("Content-Type", content_type), ("Content-Length", str(len(body))), ("Cache-Control", "no-cache")]
    )
    for key, value in (extra or {}).items():
        headers[key] = value
    return Response(status.value, status.phrase, headers, body)


def text_response(status: HTTPStatus, text: str) -> Response:
    return _response(status, (text + "\n").encode(), "text/plain; charset=utf-8")


def json_response(status: HTTPStatus, data: dict[str, Any]) -> Response:
    return _response(status, json.dumps(data).encode(), "application/json")


def metrics_response(text: str) -> Response:
    return _response(HTTPStatus.OK, text.encode(), "text/plain; version=0.0.4; charset=utf-8")


def is_upgrade(request: Request) -> bool:
    return "websocket" in request.headers.get("Upgrade", "").lower()


def static_file(web_dir: Path, path: str) -> Response:
    """A file from ``web_dir`` ('/' is index.html); never a path outside it."""
    rel = path.lstrip("/") or "index.html"
    root = web_dir.resolve()
    target = (root / rel).resolve()
    if root not in target.parents and target != root:
        return text_response(HTTPStatus.NOT_FOUND, "not found")
    if target.is_dir():
        target = target / "index.html"
    if not target.is_file():
        return text_response(HTTPStatus.NOT_FOUND, "not found")
    ctype = mimetypes.guess_type(target.name)[0] or "application/octet-stream"
    if target.suffix == ".js":
        ctype = "text/javascript"  # module scripts and AudioWorklets need a JS type
    if ctype.startswith("text/"):
        ctype += "; charset=utf-8"
    return _response(HTTPStatus.OK, target.read_bytes(), ctype)
