"""What a client may set for the thinker beyond its voice: function tools, the tool
choice, and how its context is truncated. The same checks serve ``session.update``
and ``response.create`` (see :mod:`duplex.app.core.settings`)."""

from __future__ import annotations

import json
import re
from typing import Any

from duplex.app.core.protocol import ProtocolError, check_type


def _bad(param: str, message: str) -> ProtocolError:
    return ProtocolError("invalid_value", message, param=param)


def _in_range(value: Any, types: tuple[type, ...], lo: float, hi: float, param: str) -> Any:
    check_type(value, types, param)
    if not lo <= value <= hi:
        raise _bad(param, f"{param} must be within [{lo}, {hi}]")
    return value


_TOOL_NAME = re.compile(r"[A-Za-z0-9_-]{1,64}")  # fullmatch: "$" would let a trailing newline in
TOOL_CHOICES = ("auto", "none", "required")
MAX_TOOLS = 128
"""Function tools a session (or a response) may offer: OpenAI's own bound."""
MAX_TOOLS_BYTES = 64 * 1024
"""...and their JSON in all: a session keeps them parsed (~26x the bytes) and every
reply hands them to the thinker."""
MAX_SCHEMA_DEPTH = 32
"""Nesting of one tool's ``parameters``."""
MAX_DESCRIPTION_CHARS = 4096


def tools(value: Any, param: str) -> tuple[dict[str, Any], ...]:
    """Function tools: each ``{"type": "function", "name", "description"?, "parameters"?}``
    (other tool kinds are refused by the caller before this, see :func:`function_tools`)."""
    check_type(value, (list,), param)
    if len(value) > MAX_TOOLS:
        raise _bad(param, f"{param} offers {len(value)} tools; at most {MAX_TOOLS}")
    out: list[dict[str, Any]] = []
    size = 0
    for i, tool in enumerate(value):
        tp = f"{param}[{i}]"
        check_type(tool, (dict,), tp)
        if tool.get("type", "function") != "function":
            raise _bad(f"{tp}.type", f"{tp}.type {tool.get('type')!r} is not supported; only function tools")
        name = tool.get("name")
        if not isinstance(name, str) or not _TOOL_NAME.fullmatch(name):
            raise _bad(f"{tp}.name", f"{tp}.name must be 1-64 letters, digits, '_' or '-'")
        kept: dict[str, Any] = {"type": "function", "name": name}
        if tool.get("description") is not None:
            kept["description"] = _str(tool, "description", tp)
            if len(kept["description"]) > MAX_DESCRIPTION_CHARS:
                raise _bad(f"{tp}.description", f"{tp}.description is longer than {MAX_DESCRIPTION_CHARS} characters")
        if tool.get("parameters") is not None:
            kept["parameters"] = _schema(tool["parameters"], f"{tp}.parameters")
        size += len(json.dumps(kept))
        if size > MAX_TOOLS_BYTES:
            raise _bad(param, f"{param} holds more than {MAX_TOOLS_BYTES} bytes of JSON")
        out.append(kept)
    if len({t["name"] for t in out}) != len(out):
        raise _bad(param, f"{param} names a function twice")
    return tuple(out)


def function_tools(value: Any) -> tuple[list[Any], list[str]]:
    """Split a tools list into the function tools and the types of the others (MCP and
    other hosted tools, which Duplex does not run)."""
    if not isinstance(value, list):
        return value, []
    kinds = [t.get("type") if isinstance(t, dict) else None for t in value]
    return [t for t, k in zip(value, kinds, strict=True) if k in (None, "function")], [
        str(k) for k in kinds if k not in (None, "function")
    ]


def tool_choice(value: Any, param: str, offered: tuple[dict[str, Any], ...]) -> str | dict[str, Any]:
    """``auto``, ``none``, ``required``, or ``{"type": "function", "name"}`` naming an offered tool."""
    if isinstance(value, str):
        if value not in TOOL_CHOICES:
            raise _bad(param, f"{param} must be one of {list(TOOL_CHOICES)} or a function")
        return value
    check_type(value, (dict,), param)
    if value.get("type") != "function" or not isinstance(value.get("name"), str):
        raise _bad(param, f"{param} must name a function: {{'type': 'function', 'name': ...}}")
    if value["name"] not in {t["name"] for t in offered}:
        raise _bad(f"{param}.name", f"{param}.name {value['name']!r} is not among the tools")
    return {"type": "function", "name": value["name"]}


def _str(obj: dict[str, Any], key: str, at: str) -> str:
    check_type(obj[key], (str,), f"{at}.{key}")
    return str(obj[key])


def _schema(value: Any, param: str) -> dict[str, Any]:
    """A tool's ``parameters``: a JSON Schema object whose ``properties`` (at every level)
    map names to schemas and whose ``required`` lists names; at most
    :data:`MAX_SCHEMA_DEPTH` deep. Checked here, not where a thinker would trip on it."""
    check_type(value, (dict,), param)
    stack: list[tuple[Any, str, int]] = [(value, param, 1)]
    while stack:
        node, at, depth = stack.pop()
        if depth > MAX_SCHEMA_DEPTH:
            raise _bad(param, f"{param} is nested deeper than {MAX_SCHEMA_DEPTH}")
        if isinstance(node, list):
            stack += [(x, f"{at}[{i}]", depth + 1) for i, x in enumerate(node)]
            continue
        if not isinstance(node, dict):
            continue
        props, required = node.get("properties"), node.get("required")
        if props is not None and not (isinstance(props, dict) and all(isinstance(v, dict) for v in props.values())):
            raise _bad(f"{at}.properties", f"{at}.properties must map each name to a schema object")
        if required is not None and not (isinstance(required, list) and all(isinstance(r, str) for r in required)):
            raise _bad(f"{at}.required", f"{at}.required must be a list of property names")
        stack += [(v, f"{at}.{k}", depth + 1) for k, v in node.items()]
    return dict(value)


def truncation(value: Any, param: str) -> str | dict[str, Any]:
    """``auto``, ``disabled`` or ``{"type": "retention_ratio", "retention_ratio": 0..1,
    "token_limits": {"post_instructions": N}?}``."""
    if value in ("auto", "disabled"):
        return str(value)
    check_type(value, (dict,), param)
    if value.get("type") != "retention_ratio":
        raise _bad(f"{param}.type", f"{param} must be 'auto', 'disabled' or a retention_ratio object")
    out: dict[str, Any] = {
        "type": "retention_ratio",
        "retention_ratio": _in_range(value.get("retention_ratio"), (float,), 0.0, 1.0, f"{param}.retention_ratio"),
    }
    limits = value.get("token_limits")
    if limits is not None:
        check_type(limits, (dict,), f"{param}.token_limits")
        post = limits.get("post_instructions")
        if post is not None:
            _in_range(post, (int,), 1, 10_000_000, f"{param}.token_limits.post_instructions")
        out["token_limits"] = {"post_instructions": post}
    return out
