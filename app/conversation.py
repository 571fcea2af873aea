"""The conversation: ordered items, and each assistant reply as far as it was heard."""

from __future__ import annotations

import base64
import binascii
from dataclasses import dataclass, field
from typing import Any

from app.protocol import ProtocolError, check_type
from pipeline.talker import WordMark

ROLES = ("user", "assistant", "system")
_USER_PARTS = {"input_text", "input_audio"}
_ASSISTANT_PARTS = {"output_text", "text", "output_audio", "audio"}


@dataclass(slots=True)
class Item:
    """One conversation item, in its wire shape plus what truncation needs."""

    id: str
    role: str
    content: list[dict[str, Any]]
    status: str = "completed"
    type: str = "message"
    # For assistant audio: what was sent, and where each word starts in it.
    audio_rate: int = 0
    audio_samples: int = 0
    words: list[WordMark] = field(default_factory=list)
    full_text: str = ""
    truncated_ms: int | None = None

    def to_wire(self) -> dict[str, Any]:
        return {
            "id": self.id,
            "object": "realtime.item",
            "type": self.type,
            "status": self.status,
            "role": self.role,
            "content": [dict(p) for p in self.content],
        }

    def text(self) -> str:
        """What the item says, as text (typed text, or the transcript of audio)."""
        parts = []
        for p in self.content:
            value = p.get("text") if p.get("text") is not None else p.get("transcript")
            if isinstance(value, str) and value:
                parts.append(value)
        return " ".join(parts)

    @property
    def audio_ms(self) -> int:
        """Milliseconds of audio this item has had sent to the client."""
        return self.audio_samples * 1000 // self.audio_rate if self.audio_rate else 0

    def truncate(self, audio_end_ms: int) -> str:
        """Cut the audio at ``audio_end_ms`` and the transcript at the last word begun
        by then; return the transcript kept."""
        end = audio_end_ms * self.audio_rate // 1000
        heard = [w for w in self.words if w.position < end]
        kept = self.full_text[: heard[-1].end] if heard else ""
        self.audio_samples = min(self.audio_samples, end)
        self.words = heard
        self.truncated_ms = audio_end_ms
        for p in self.content:
            if "transcript" in p:
                p["transcript"] = kept
        return kept


def decode_audio(b64: str, param: str) -> bytes:
    """Base64 PCM16 from the client, checked for shape."""
    try:
        raw = base64.b64decode(b64, validate=True)
    except (binascii.Error, ValueError):
        raise ProtocolError("invalid_audio", f"{param} is not valid base64", param=param) from None
    if len(raw) % 2:
        raise ProtocolError("invalid_audio", f"{param} has an odd number of bytes ({len(raw)}); PCM16 needs whole samples", param=param)
    return raw


def parse_item(data: dict[str, Any], new_id: str) -> Item:
    """Validate a client ``conversation.item.create`` item."""
    p = "item"
    kind = data.get("type", "message")
    if kind != "message":
        raise ProtocolError("unsupported_value", f"{p}.type {kind!r} is not supported; only 'message'", param=f"{p}.type")
    role = data.get("role")
    if role not in ROLES:
        raise ProtocolError("invalid_value", f"{p}.role must be one of {list(ROLES)}", param=f"{p}.role")
    item_id = data.get("id", new_id)
    check_type(item_id, (str,), f"{p}.id")
    content = data.get("content")
    check_type(content, (list,), f"{p}.content")
    if not content:
        raise ProtocolError("invalid_value", f"{p}.content must not be empty", param=f"{p}.content")
    allowed = _ASSISTANT_PARTS if role == "assistant" else _USER_PARTS
    parts: list[dict[str, Any]] = []
    for i, part in enumerate(content):
        pp = f"{p}.content[{i}]"
        check_type(part, (dict,), pp)
        ptype = part.get("type")
        if ptype not in allowed:
            raise ProtocolError("invalid_value", f"{pp}.type must be one of {sorted(allowed)} for role {role}", param=f"{pp}.type")
        if ptype in ("input_text", "output_text", "text"):
            check_type(part.get("text"), (str,), f"{pp}.text")
            parts.append({"type": ptype, "text": part["text"]})
        else:
            transcript = part.get("transcript")
            if transcript is not None:
                check_type(transcript, (str,), f"{pp}.transcript")
            if "audio" in part:
                check_type(part["audio"], (str,), f"{pp}.audio")
                decode_audio(part["audio"], f"{pp}.audio")
            parts.append({"type": ptype, "transcript": transcript})
    return Item(item_id, role, parts)


class Conversation:
    """Items in order, addressable by id."""

    def __init__(self) -> None:
        self.items: list[Item] = []

    def get(self, item_id: str) -> Item:
        for item in self.items:
            if item.id == item_id:
                return item
        raise ProtocolError("item_not_found", f"no item with id {item_id!r}", param="item_id")

    def add(self, item: Item, previous_item_id: str | None = None) -> str | None:
        """Insert after ``previous_item_id`` ('root' = first; None = last); return the
        id of the item now before it."""
        if any(i.id == item.id for i in self.items):
            raise ProtocolError("duplicate_item_id", f"an item with id {item.id!r} already exists", param="item.id")
        if previous_item_id is None:
            index = len(self.items)
        elif previous_item_id == "root":
            index = 0
        else:
            try:
                index = self.items.index(self.get(previous_item_id)) + 1
            except ProtocolError:
                raise ProtocolError(
                    "item_not_found", f"previous_item_id {previous_item_id!r} is not in the conversation",
                    param="previous_item_id",
                ) from None
        self.items.insert(index, item)
        return self.items[index - 1].id if index > 0 else None

    def delete(self, item_id: str) -> None:
        self.items.remove(self.get(item_id))
