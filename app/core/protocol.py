"""The client side of the OpenAI Realtime protocol, sans I/O.

Text frames in, validated :class:`ClientEvent` out, or a :class:`ProtocolError`
naming the problem (it becomes an ``error`` event, never a closed socket). Server
events are rendered in :mod:`duplex.app.core.wire`. No sockets, no awaits.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

REALTIME_PATH = "/v1/realtime"
"""Where the protocol is served."""
DEFAULT_PORT = 8765
DEFAULT_URL = f"ws://127.0.0.1:{DEFAULT_PORT}{REALTIME_PATH}"
"""Where a client finds a server started with the defaults."""

MAX_DEPTH = 32
"""Deepest nesting of arrays and objects a client event may have (OpenAI's events need 6)."""
MAX_INT = 2**53
"""Largest integer magnitude a client event may carry."""

_NONE = type(None)
# Client events we accept, with their top-level fields: name -> (types, required).
_SCHEMAS: dict[str, dict[str, tuple[tuple[type, ...], bool]]] = {
    "session.update": {"session": ((dict,), True)},
    "input_audio_buffer.append": {"audio": ((str,), True)},
    "input_audio_buffer.commit": {},
    "input_audio_buffer.clear": {},
    "conversation.item.create": {"item": ((dict,), True), "previous_item_id": ((str, _NONE), False)},
    "conversation.item.retrieve": {"item_id": ((str,), True)},
    "conversation.item.delete": {"item_id": ((str,), True)},
    "conversation.item.truncate": {
        "item_id": ((str,), True),
        "content_index": ((int,), True),
        "audio_end_ms": ((int,), True),
    },
    "response.create": {"response": ((dict, _NONE), False)},
    "response.cancel": {"response_id": ((str, _NONE), False)},
    # Extension: answered by session.synced once every effect of earlier events has
    # been sent (recognition, the reply it starts, paced audio): exact fast replays.
    "session.sync": {},
    # Extension (vLLM-Omni's vocabulary): how much of a reply the client has played.
    "playback.ack": {
        "response_id": ((str,), True),
        "played_samples": ((int,), True),
        "input_samples": ((int,), True),
        "epoch": ((int, _NONE), False),
    },
}

CLIENT_EVENT_TYPES = frozenset(_SCHEMAS)


@dataclass(frozen=True, slots=True)
class ClientEvent:
    """A client event whose type is known and whose top-level fields have the right types."""

    type: str
    data: dict[str, Any]

    @property
    def event_id(self) -> str | None:
        value = self.data.get("event_id")
        return value if isinstance(value, str) else None


class ProtocolError(Exception):
    """A bad client event; becomes an ``error`` event, never a closed socket."""

    def __init__(
        self,
        code: str,
        message: str,
        *,
        param: str | None = None,
        event_id: str | None = None,
        error_type: str = "invalid_request_error",
    ) -> None:
        super().__init__(message)
        self.code = code
        self.message = message
        self.param = param
        self.event_id = event_id
        self.error_type = error_type

    def with_event_id(self, event_id: str | None) -> ProtocolError:
        if self.event_id is None:
            self.event_id = event_id
        return self

    def to_error(self) -> dict[str, Any]:
        """The ``error`` object of the Realtime ``error`` event."""
        return {
            "type": self.error_type,
            "code": self.code,
            "message": self.message,
            "param": self.param,
            "event_id": self.event_id,
        }


def _type_name(types: tuple[type, ...]) -> str:
    names = {
        dict: "object",
        str: "string",
        int: "integer",
        float: "number",
        bool: "boolean",
        list: "array",
        _NONE: "null",
    }
    return " or ".join(names.get(t, t.__name__) for t in types)


def check_type(value: Any, types: tuple[type, ...], param: str) -> None:
    """Raise ProtocolError unless ``value`` is one of ``types`` (a bool is not an int).

    Integers must be exact in a double (|n| <= 2**53, JSON's safe range): a client
    sending 10**400 gets an error, not an overflow deep inside a clock."""
    ok = isinstance(value, types) and not (isinstance(value, bool) and bool not in types)
    if not ok and float in types and isinstance(value, int) and not isinstance(value, bool):
        ok = True
    if not ok:
        raise ProtocolError(
            "invalid_type", f"{param} must be {_type_name(types)}, got {type(value).__name__}", param=param
        )
    if isinstance(value, int) and not isinstance(value, bool) and abs(value) > MAX_INT:
        raise ProtocolError("invalid_value", f"{param} is out of range (|n| <= 2**53)", param=param)


def _depth(value: Any) -> int:
    """How deeply arrays and objects nest in a parsed JSON value (without recursion)."""
    deepest, stack = 0, [(value, 1)]
    while stack:
        v, d = stack.pop()
        if isinstance(v, dict | list):
            deepest = max(deepest, d)
            stack.extend((x, d + 1) for x in (v.values() if isinstance(v, dict) else v))
    return deepest


def _no_constants(name: str) -> Any:
    raise ValueError(f"{name} is not JSON")


def decode_event(message: str | bytes, *, max_bytes: int) -> ClientEvent:
    """Parse and validate one text frame from the client."""
    size = len(message.encode("utf-8") if isinstance(message, str) else message)
    if size > max_bytes:
        raise ProtocolError("message_too_large", f"message of {size} bytes exceeds the limit of {max_bytes} bytes")
    try:
        data = json.loads(message, parse_constant=_no_constants)
    except (ValueError, UnicodeDecodeError) as exc:
        raise ProtocolError("invalid_json", f"message is not valid JSON: {exc}") from None
    except RecursionError:
        raise ProtocolError("invalid_json", f"message nests deeper than {MAX_DEPTH} levels") from None
    if not isinstance(data, dict):
        raise ProtocolError("invalid_event", f"an event must be a JSON object, got {type(data).__name__}")
    if _depth(data) > MAX_DEPTH:
        raise ProtocolError("invalid_json", f"message nests deeper than {MAX_DEPTH} levels")
    event_id = data.get("event_id")
    if event_id is not None and not isinstance(event_id, str):
        raise ProtocolError("invalid_type", "event_id must be a string", param="event_id")
    etype = data.get("type")
    if not isinstance(etype, str):
        raise ProtocolError("missing_type", "an event needs a string 'type'", param="type", event_id=event_id)
    schema = _SCHEMAS.get(etype)
    if schema is None:
        raise ProtocolError("unknown_event", f"unknown event type {etype!r}", param="type", event_id=event_id)
    try:
        for field, (types, required) in schema.items():
            if field not in data:
                if required:
                    raise ProtocolError("missing_field", f"{etype} needs '{field}'", param=field)
                continue
            check_type(data[field], types, field)
    except ProtocolError as exc:
        raise exc.with_event_id(event_id) from None
    return ClientEvent(etype, data)
