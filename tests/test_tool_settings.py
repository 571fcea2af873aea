"""What a client may set for the thinker, sans I/O: the function tools (split from the
hosted kinds Duplex does not run, then checked under their caps), the tool choice, and
the truncation of the context. Each refusal is a ``ProtocolError`` naming the field."""

from __future__ import annotations

import json
from typing import Any

import pytest

from duplex.app.core.tool_settings import (
    MAX_DESCRIPTION_CHARS,
    MAX_SCHEMA_DEPTH,
    MAX_TOOLS,
    MAX_TOOLS_BYTES,
    TOOL_CHOICES,
    function_tools,
    tool_choice,
    tools,
    truncation,
)
from tests.helpers_core import refused
from tests.test_tools import WEATHER  # a full function tool: name, description, parameters


def nested(depth: int) -> dict[str, Any]:
    """A schema whose objects nest ``depth`` deep."""
    node: dict[str, Any] = {}
    for _ in range(depth - 1):
        node = {"x": node}
    return node


# -- function_tools: what Duplex runs, and the kinds it does not -----------------------
def test_function_tools_keeps_the_functions_and_names_the_other_kinds():
    mcp = {"type": "mcp", "server_label": "deepwiki"}
    untyped = {"name": "lookup"}
    functions, others = function_tools([WEATHER, mcp, untyped, {"type": "web_search"}])
    assert functions == [WEATHER, untyped], "a tool without a type is a function"
    assert others == ["mcp", "web_search"]


def test_function_tools_keeps_a_non_dict_entry_for_the_checks_to_refuse():
    functions, others = function_tools([WEATHER, "get_time"])
    assert functions == [WEATHER, "get_time"] and others == []
    assert refused(tools, functions, "session.tools").param == "session.tools[1]"


def test_function_tools_passes_a_value_that_is_no_list_through():
    assert function_tools("all") == ("all", [])
    assert refused(tools, "all", "session.tools").code == "invalid_type"


# -- tools ------------------------------------------------------------------------------
def test_a_function_tool_keeps_only_what_the_thinker_needs():
    [kept] = tools([{**WEATHER, "strict": True, "extra": 1}], "session.tools")
    assert kept == WEATHER
    assert tools([{"name": "ping"}], "session.tools") == ({"type": "function", "name": "ping"},)
    assert tools([], "session.tools") == ()


@pytest.mark.parametrize("name", ["", "x" * 65, "get weather", "get_weather\n", "wetter.heute", None, 7])
def test_a_tool_name_is_1_to_64_letters_digits_underscores_or_dashes(name: Any):
    err = refused(tools, [WEATHER, {"name": name}], "session.tools")
    assert (err.code, err.param) == ("invalid_value", "session.tools[1].name")


def test_the_longest_tool_name_and_dashes_are_fine():
    names = ["x" * 64, "get-weather_2"]
    assert [t["name"] for t in tools([{"name": n} for n in names], "tools")] == names


def test_only_function_tools_pass():
    err = refused(tools, [{"type": "mcp", "name": "wiki"}], "response.tools")
    assert err.param == "response.tools[0].type" and "'mcp'" in err.message


def test_a_name_offered_twice_is_refused():
    err = refused(tools, [WEATHER, {"name": "get_weather"}], "session.tools")
    assert err.param == "session.tools" and "twice" in err.message


def test_at_most_max_tools():
    assert len(tools([{"name": f"f{i}"} for i in range(MAX_TOOLS)], "tools")) == MAX_TOOLS
    err = refused(tools, [{"name": f"f{i}"} for i in range(MAX_TOOLS + 1)], "tools")
    assert err.param == "tools" and str(MAX_TOOLS) in err.message


def test_a_description_is_a_string_of_at_most_max_description_chars():
    assert tools([{"name": "f", "description": "d" * MAX_DESCRIPTION_CHARS}], "tools")[0]["description"]
    assert refused(tools, [{"name": "f", "description": "d" * (MAX_DESCRIPTION_CHARS + 1)}], "tools").param == (
        "tools[0].description"
    )
    assert refused(tools, [{"name": "f", "description": 3}], "tools").code == "invalid_type"
    assert "description" not in tools([{"name": "f", "description": None}], "tools")[0]


def test_the_tools_json_is_capped_in_all():
    description = "d" * MAX_DESCRIPTION_CHARS
    each = len(json.dumps({"type": "function", "name": "f00", "description": description}))
    fit = MAX_TOOLS_BYTES // each
    assert len(tools([{"name": f"f{i:02}", "description": description} for i in range(fit)], "tools")) == fit
    err = refused(tools, [{"name": f"f{i:02}", "description": description} for i in range(fit + 1)], "tools")
    assert err.param == "tools" and str(MAX_TOOLS_BYTES) in err.message


def test_parameters_nest_at_most_max_schema_depth():
    assert tools([{"name": "f", "parameters": nested(MAX_SCHEMA_DEPTH)}], "tools")
    err = refused(tools, [{"name": "f", "parameters": nested(MAX_SCHEMA_DEPTH + 1)}], "tools")
    assert err.param == "tools[0].parameters" and str(MAX_SCHEMA_DEPTH) in err.message


def test_parameters_properties_map_names_to_schemas_at_every_level():
    inner = {"type": "object", "properties": {"unit": "celsius"}}
    bad = {"type": "object", "properties": {"where": inner}}
    err = refused(tools, [{"name": "f", "parameters": bad}], "tools")
    assert err.param == "tools[0].parameters.properties.where.properties"
    assert refused(tools, [{"name": "f", "parameters": {"properties": ["city"]}}], "tools").param == (
        "tools[0].parameters.properties"
    )


def test_parameters_required_is_a_list_of_names():
    for required in ("city", [1], {"city": True}):
        err = refused(tools, [{"name": "f", "parameters": {"required": required}}], "tools")
        assert err.param == "tools[0].parameters.required"
    assert refused(tools, [{"name": "f", "parameters": "object"}], "tools").code == "invalid_type"


def test_a_schema_inside_a_list_is_checked_too():
    any_of = {"anyOf": [{"type": "string"}, {"properties": {"a": 1}}]}
    assert refused(tools, [{"name": "f", "parameters": any_of}], "tools").param == (
        "tools[0].parameters.anyOf[1].properties"
    )


# -- tool_choice --------------------------------------------------------------------------
def test_tool_choice_is_a_mode_or_an_offered_function():
    offered = tools([WEATHER], "tools")
    for mode in TOOL_CHOICES:
        assert tool_choice(mode, "tool_choice", offered) == mode
    named = tool_choice({"type": "function", "name": "get_weather", "strict": True}, "tool_choice", offered)
    assert named == {"type": "function", "name": "get_weather"}


def test_tool_choice_refuses_an_unknown_mode_an_unoffered_function_and_other_shapes():
    offered = tools([WEATHER], "tools")
    assert refused(tool_choice, "always", "tool_choice", offered).param == "tool_choice"
    err = refused(tool_choice, {"type": "function", "name": "get_time"}, "tool_choice", offered)
    assert err.param == "tool_choice.name" and "'get_time'" in err.message
    assert refused(tool_choice, {"type": "mcp", "name": "get_weather"}, "tool_choice", offered).param == "tool_choice"
    assert refused(tool_choice, {"type": "function"}, "tool_choice", offered).param == "tool_choice"
    assert refused(tool_choice, 1, "tool_choice", offered).code == "invalid_type"


# -- truncation ----------------------------------------------------------------------------
def test_truncation_is_auto_disabled_or_a_retention_ratio():
    assert truncation("auto", "truncation") == "auto"
    assert truncation("disabled", "truncation") == "disabled"
    ratio = truncation({"type": "retention_ratio", "retention_ratio": 0.5, "other": 1}, "truncation")
    assert ratio == {"type": "retention_ratio", "retention_ratio": 0.5}
    limited = truncation(
        {"type": "retention_ratio", "retention_ratio": 1, "token_limits": {"post_instructions": 1000}}, "truncation"
    )
    assert limited["token_limits"] == {"post_instructions": 1000} and limited["retention_ratio"] == 1


@pytest.mark.parametrize(
    "value, param",
    [
        ("sometimes", "truncation"),
        ({"type": "auto"}, "truncation.type"),
        ({"type": "retention_ratio"}, "truncation.retention_ratio"),
        ({"type": "retention_ratio", "retention_ratio": 1.5}, "truncation.retention_ratio"),
        ({"type": "retention_ratio", "retention_ratio": -0.1}, "truncation.retention_ratio"),
        ({"type": "retention_ratio", "retention_ratio": True}, "truncation.retention_ratio"),
        ({"type": "retention_ratio", "retention_ratio": 0.5, "token_limits": 10}, "truncation.token_limits"),
        (
            {"type": "retention_ratio", "retention_ratio": 0.5, "token_limits": {"post_instructions": 0}},
            "truncation.token_limits.post_instructions",
        ),
        (
            {"type": "retention_ratio", "retention_ratio": 0.5, "token_limits": {"post_instructions": 10_000_001}},
            "truncation.token_limits.post_instructions",
        ),
        (
            {"type": "retention_ratio", "retention_ratio": 0.5, "token_limits": {"post_instructions": 1.5}},
            "truncation.token_limits.post_instructions",
        ),
    ],
)
def test_truncation_refuses_what_it_cannot_apply(value: Any, param: str):
    assert refused(truncation, value, "truncation").param == param
