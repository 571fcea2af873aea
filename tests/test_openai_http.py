"""The one rule the OpenAI-compatible clients check a server by, and the one line of
a server's refusal (against httpx's mock transport: the live servers are in
test_asr_remote.py and test_vllm_remote.py)."""

from __future__ import annotations

import socket
from collections.abc import Callable

import httpx
import pytest

from duplex.pipeline.openai_http import check_model, reason
from duplex.pipeline.recognizers.openai_remote import OpenAIRecognizer
from duplex.pipeline.talkers.vllm import RemoteEngine
from duplex.pipeline.thinkers.openai_chat import OpenAIChatThinker

SERVER = "the test server http://test"


def free_port() -> int:
    """A loopback port nothing listens on (once the socket closes)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _client(answer: Callable[[httpx.Request], httpx.Response]) -> httpx.AsyncClient:
    return httpx.AsyncClient(base_url="http://test", transport=httpx.MockTransport(answer))


def _models(*ids: str) -> httpx.Response:
    return httpx.Response(200, json={"object": "list", "data": [{"id": i, "object": "model"} for i in ids]})


async def test_a_listed_model_passes_and_another_is_named():
    async with _client(lambda _: _models("a", "b")) as client:
        assert await check_model(client, "b", SERVER)
        with pytest.raises(ValueError, match=r"^the test server http://test serves \['a', 'b'\], not 'c'$"):
            await check_model(client, "c", SERVER)


@pytest.mark.parametrize(
    "answer",
    [_models(), httpx.Response(200, text="<html>hello</html>"), httpx.Response(200, json={"data": "x"})],
)
async def test_a_server_that_names_no_model_passes(answer: httpx.Response):
    async with _client(lambda _: answer) as client:
        assert await check_model(client, "m", SERVER)


@pytest.mark.parametrize("status", [404, 405])
async def test_a_server_without_the_route_cannot_be_checked(status: int):
    async with _client(lambda _: httpx.Response(status)) as client:
        assert not await check_model(client, "m", SERVER)


async def test_a_refusal_is_named_with_the_servers_reason():
    refusal = httpx.Response(401, json={"error": {"message": "bad   key\n", "type": "auth"}})
    async with _client(lambda _: refusal) as client:
        with pytest.raises(ValueError, match=r"^the test server http://test answered 401 to /v1/models: bad key$"):
            await check_model(client, "m", SERVER)


async def test_no_answer_is_not_reachable():
    async with httpx.AsyncClient(base_url=f"http://127.0.0.1:{free_port()}") as client:
        with pytest.raises(ValueError, match="^the test server http://test is not reachable: "):
            await check_model(client, "m", SERVER)


@pytest.mark.parametrize(
    ("answer", "said"),
    [
        (httpx.Response(400, json={"error": {"message": "unknown model"}}), "unknown model"),
        (httpx.Response(422, json={"detail": "field required"}), "field required"),
        (httpx.Response(400, json={"detail": {"error": {"message": "nested"}}}), "nested"),
        (httpx.Response(400, json={"message": "old vllm"}), "old vllm"),
        (httpx.Response(500, text="plain\ntext"), "plain text"),
        (httpx.Response(503), "Service Unavailable"),
        (httpx.Response(500, text="x" * 500), "x" * 197 + "..."),
    ],
)
def test_reason_is_one_line_in_any_shape(answer: httpx.Response, said: str):
    assert reason(answer) == said


async def test_every_client_checks_by_the_one_rule():
    """The vLLM talker's engine, the chat thinker and the recogniser refuse alike."""
    port = free_port()
    url = f"http://127.0.0.1:{port}"
    clients = [RemoteEngine(url, "m"), OpenAIChatThinker(url, "m"), OpenAIRecognizer(url, "m")]
    for client in clients:
        with pytest.raises(ValueError, match=f"{url} is not reachable"):
            await client.start()
        await client._client.aclose()
        transport = httpx.MockTransport(lambda _: _models("other"))
        client._client = httpx.AsyncClient(base_url=url, transport=transport)
        with pytest.raises(ValueError, match=rf"{url} serves \['other'\], not 'm'"):
            await client.start()
        await client._client.aclose()
