"""Fuzzing the HTTP edge of a real ``duplex serve``: odd request lines, paths and headers.

Whatever a client sends before the WebSocket opens, the server answers with a
status below 500 (or closes), keeps serving, and logs no traceback.
"""

from __future__ import annotations

import os
import socket
from collections.abc import Iterator
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from lab.servers import ServerProcess

SINGLE = [
    "Host",
    "Upgrade",
    "Connection",
    "Origin",
    "Authorization",
    "OpenAI-Beta",
    "Sec-WebSocket-Key",
    "Sec-WebSocket-Version",
]
UPGRADE = [
    ("Upgrade", "websocket"),
    ("Connection", "Upgrade"),
    ("Sec-WebSocket-Version", "13"),
    ("Sec-WebSocket-Key", "dGhlIHNhbXBsZSBub25jZQ=="),
]
path_parts = st.sampled_from(
    [
        "",
        "v1",
        "realtime",
        "..",
        ".",
        "%2e%2e",
        "%00",
        "\x00",
        "index.html",
        "app.js",
        "healthz",
        "metrics",
        ".git",
        "web",
        "~",
        "a" * 300,
        "%",
        "?x=1",
        "#f",
        "\\",
    ]
)


@st.composite
def requests(draw) -> bytes:
    method = draw(st.sampled_from(["GET", "GET", "HEAD", "POST", "PUT", "OPTIONS", "get", "G\x00T"]))
    path = "/" + "/".join(draw(st.lists(path_parts, max_size=5)))
    if draw(st.booleans()):
        path = "/v1/realtime" + draw(st.sampled_from(["", "/", "?api_key=", "?api_key=x&api_key=y", "?model=a"]))
    headers = [("Host", "127.0.0.1")]
    if draw(st.booleans()):
        headers += UPGRADE
    for _ in range(draw(st.integers(0, 4))):
        name = draw(st.sampled_from(SINGLE + ["X-Odd", "Content-Length"]))
        value = draw(
            st.sampled_from(
                ["", "x", "websocket", "Bearer k", "http://evil.example", "realtime=v1", "0", "5", "\xff", "a" * 500]
            )
        )
        headers.append((name, value))
    head = f"{method} {path} HTTP/1.1\r\n" + "".join(f"{k}: {v}\r\n" for k, v in headers) + "\r\n"
    return head.encode("latin-1")


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerProcess]:
    log = Path(tmp_path_factory.mktemp("http-fuzz")) / "server.log"
    proc = ServerProcess("--log-level", "INFO", "--api-key", "fuzz-key", log=log)
    proc.start()
    try:
        yield proc
    finally:
        proc.stop()
        text = log.read_text()
        assert "Traceback" not in text and " ERROR " not in text, text[-3000:]


def _ask(port: int, request: bytes) -> int | None:
    """The status the server answers with, or None if it closed without one."""
    with socket.create_connection(("127.0.0.1", port), timeout=10) as s:
        s.sendall(request)
        data = b""
        while b"\r\n" not in data:
            chunk = s.recv(4096)
            if not chunk:
                return None
            data += chunk
    parts = data.split(b" ", 2)
    return int(parts[1]) if len(parts) > 1 and parts[1].isdigit() else None


@settings(
    max_examples=int(os.environ.get("DUPLEX_FUZZ_EXAMPLES", "150")),
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(request=requests())
def test_any_request_gets_a_clear_answer_and_the_server_keeps_serving(server, request):
    status = _ask(server.port, request)
    assert status is None or status < 500, (status, request[:200])
    assert b'"ok"' in server.http("/healthz")
