"""JSON schemas as GBNF grammars (llama.cpp's grammar language), compact JSON only.

Enough of JSON Schema for function tools' parameters: objects (the required properties
in their order, then the others each optional, in theirs), strings, numbers, integers,
booleans, null, arrays, ``enum``, ``const``, ``anyOf``/``oneOf`` and lists of types;
anything else is any JSON value. And what a grammar allows next, judged by llama.cpp.
"""

from __future__ import annotations

import ctypes
import json
from typing import Any

import numpy as np

GRAMMAR_FIRST = 256
"""Candidates a grammar judges before the whole vocabulary (~150 k tokens: slow to judge each step)."""

BASE = r"""
value ::= object | array | string | number | boolean | null
object ::= "{" ( string ": " value ( ", " string ": " value )* )? "}"
array ::= "[" ( value ( ", " value )* )? "]"
string ::= "\"" ( [^"\\\x7F\x00-\x1F] | "\\" ( ["\\/bfnrt] | "u" hex hex hex hex ) )* "\""
hex ::= [0-9a-fA-F]
integer ::= "-"? ( [0-9] | [1-9] [0-9]* )
number ::= integer ( "." [0-9]+ )? ( [eE] [-+]? [0-9]+ )?
boolean ::= "true" | "false"
null ::= "null"
"""
"""The generic JSON rules every grammar ends with."""

_TYPES = {"string": "string", "number": "number", "integer": "integer", "boolean": "boolean", "null": "null"}


def literal(text: str) -> str:
    """``text`` as a GBNF string literal."""
    return '"' + text.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n") + '"'


class Grammar:
    """Rules built up from schemas; :meth:`text` is the whole grammar."""

    def __init__(self) -> None:
        self.rules: dict[str, str] = {}

    def rule(self, name: str, body: str) -> str:
        self.rules[name] = body
        return name

    def schema(self, schema: Any, name: str) -> str:
        """A rule (or the body of one) for values of ``schema``."""
        if not isinstance(schema, dict):
            return "value"
        if "const" in schema:
            return literal(json.dumps(schema["const"]))
        if "enum" in schema:
            return "(" + " | ".join(literal(json.dumps(v)) for v in schema["enum"]) + ")"
        for key in ("anyOf", "oneOf"):
            if isinstance(schema.get(key), list):
                alts = [self.schema({**schema, key: None, **s}, f"{name}-{i}") for i, s in enumerate(schema[key])]
                return self.rule(name, " | ".join(alts))
        kind = schema.get("type")
        if isinstance(kind, list):
            return self.rule(name, " | ".join(self.schema({**schema, "type": k}, f"{name}-{k}") for k in kind))
        if kind == "object" or "properties" in schema:
            return self._object(schema, name)
        if kind == "array":
            item = self.schema(schema.get("items"), f"{name}-item")
            return self.rule(name, f'"[" ( {item} ( ", " {item} )* )? "]"')
        return _TYPES.get(str(kind), "value")

    def _object(self, schema: dict[str, Any], name: str) -> str:
        props = schema.get("properties")
        if not isinstance(props, dict) or not props:
            return "object"
        required = [k for k in schema.get("required", []) if k in props]
        others = [k for k in props if k not in required]

        def pair(key: str) -> str:
            return f"{literal(json.dumps(key) + ': ')} {self.schema(props[key], f'{name}-{_safe(key)}')}"

        if required:
            body = ' ", " '.join(pair(k) for k in required) + "".join(f' ( ", " {pair(k)} )?' for k in others)
        else:
            anyone = self.rule(f"{name}-kv", " | ".join(pair(k) for k in others))
            body = f'( {anyone} ( ", " {anyone} )* )?'
        return self.rule(name, f'"{{" {body} "}}"')

    def text(self, root: str) -> str:
        lines = [f"root ::= {root}", *(f"{k} ::= {v}" for k, v in self.rules.items())]
        return "\n".join(lines) + BASE


def _safe(key: str) -> str:
    """A rule-name part for a property name (letters, digits and dashes only)."""
    return "".join(c if c.isalnum() else "-" for c in key) or "p"


def allowed(C: Any, lib: Any, ctx: Any, grammar: Any, logits: np.ndarray) -> np.ndarray:
    """``logits`` with the tokens llama.cpp's ``grammar`` sampler forbids next at -inf:
    the likeliest :data:`GRAMMAR_FIRST` are judged first, the whole vocabulary only if
    none of them may follow."""
    first = np.argpartition(-logits, GRAMMAR_FIRST)[:GRAMMAR_FIRST]
    for ids in (first, np.arange(logits.size)):
        data = np.zeros(ids.size, dtype=[("id", "<i4"), ("logit", "<f4"), ("p", "<f4")])
        data["id"], data["logit"] = ids, logits[ids]
        arr = C.llama_token_data_array(data.ctypes.data_as(ctypes.POINTER(C.llama_token_data)), ids.size, -1, False)
        lib.llama_grammar_sample(grammar, ctx, ctypes.byref(arr))
        kept = data[: int(arr.size)]
        kept = kept[np.isfinite(kept["logit"])]
        if kept.size:
            out = np.full(logits.size, -np.inf, np.float32)
            out[kept["id"]] = kept["logit"]
            return out
    raise RuntimeError("the grammar allows no token")
