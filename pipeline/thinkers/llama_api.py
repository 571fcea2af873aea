"""ik_llama.cpp's C API as the engine uses it: the bindings its wheel declares, the
calls they leave out, and llama.cpp's renderer of the chat templates it knows."""

from __future__ import annotations

import ctypes
from typing import Any

from duplex.pipeline.thinkers.chatml import plain


def api() -> tuple[Any, Any]:
    """ik_llama.cpp's bindings, with the calls they do not declare."""
    from ik_llama_cpp import _ctypes_api as C  # noqa: N812 (the bindings' own name)

    lib = C._lib
    p, i32 = ctypes.c_void_p, ctypes.c_int32
    for name, args, res in (
        ("llama_kv_cache_seq_rm", [p, i32, i32, i32], ctypes.c_bool),
        ("llama_kv_cache_seq_cp", [p, i32, i32, i32, i32], None),
        ("llama_kv_cache_defrag", [p], None),
        ("llama_kv_cache_update", [p], None),
        # (the last argument, flags, is newer than some builds: 0 either way)
        ("llama_state_seq_get_size", [p, i32, i32], ctypes.c_size_t),
        ("llama_state_seq_get_data", [p, p, ctypes.c_size_t, i32, i32], ctypes.c_size_t),
        ("llama_state_seq_set_data", [p, p, ctypes.c_size_t, i32, i32], ctypes.c_size_t),
        ("llama_sampler_init_grammar", [p, ctypes.c_char_p, ctypes.c_char_p], p),
        ("llama_grammar_sample", [p, p, ctypes.POINTER(C.llama_token_data_array)], None),
        ("llama_grammar_accept_token", [p, p, i32], None),
        ("llama_grammar_free", [p], None),
        ("llama_free", [p], None),
        ("llama_set_n_threads", [p, ctypes.c_uint32, ctypes.c_uint32], None),
        ("llama_init_from_model", [p, C.llama_context_params], p),
        ("llama_model_chat_template", [p, ctypes.c_char_p], ctypes.c_char_p),
        ("llama_chat_apply_template", [ctypes.c_char_p, p, ctypes.c_size_t, ctypes.c_bool, p, i32], i32),
    ):
        fn = getattr(lib, name)
        fn.argtypes, fn.restype = args, res
    return C, lib


_LOG = ctypes.CFUNCTYPE(None, ctypes.c_int, ctypes.c_char_p, ctypes.c_void_p)
QUIET = _LOG(lambda level, text, data: None)  # kept alive for as long as the library


class _Message(ctypes.Structure):
    _fields_ = [("role", ctypes.c_char_p), ("content", ctypes.c_char_p)]


def apply_template(lib: Any, template: bytes, messages: list[dict[str, Any]], add_generation_prompt: bool) -> str:
    """``messages`` under ``template`` by llama.cpp's renderer (no Jinja: the templates it
    knows by their markers); a call and a tool's result as ChatML words them, as the user's."""
    roles = [m["role"] if m["role"] in ("system", "user", "assistant") else "user" for m in messages]
    texts = [(r.encode(), plain(m).encode()) for r, m in zip(roles, messages, strict=True)]
    chat = (_Message * len(texts))(*(_Message(r, t) for r, t in texts))
    size = 2 * sum(len(t) for _, t in texts) + 256
    for _ in range(2):
        buf = ctypes.create_string_buffer(size)
        n = lib.llama_chat_apply_template(template, chat, len(texts), add_generation_prompt, buf, size)
        if n < 0:
            raise ValueError("llama.cpp does not know this model's chat template")
        if n <= size:
            return buf.raw[:n].decode("utf-8", "replace")
        size = n
    raise ValueError("the prompt did not fit")
