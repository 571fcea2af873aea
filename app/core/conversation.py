"""The conversation: ordered items, and each assistant reply as far as it was heard."""

from __future__ import annotations

import base64
import binascii
from dataclasses import dataclass, field
from typing import Any

from duplex.app.core.events import ItemAdded, ItemDeleted, ItemDone, ItemView, PartView, ServerEvent
from duplex.app.core.protocol import ProtocolError, check_type
from duplex.pipeline.talker import WordMark

ROLES = ("user", "assistant", "system")
_USER_PARTS = {"input_text", "input_audio"}
_ASSISTANT_PARTS = {"output_text", "text", "output_audio", "audio"}
AUDIO_PARTS = frozenset({"input_audio", "output_audio", "audio"})
"""Part types whose text is a transcript of audio."""


@dataclass(slots=True)
class Part:
    """One content part: typed text, or audio and its transcript (None: not yet known)."""

    type: str
    text: str | None = None

    @property
    def audio(self) -> bool:
        return self.type in AUDIO_PARTS

    def view(self) -> PartView:
        return PartView(self.type, self.text)


@dataclass(slots=True)
class Item:
    """One conversation item, and for assistant audio what truncation needs."""

    id: str
    role: str
    content: list[Part]
    status: str = "completed"
    type: str = "message"
    # For assistant audio: what was sent, and where each word starts in it.
    audio_rate: int = 0
    audio_samples: int = 0
    words: list[WordMark] = field(default_factory=list)
    full_text: str = ""
    truncated_ms: int | None = None
    # For function calls (``function_call``) and their results (``function_call_output``).
    call_id: str = ""
    name: str = ""
    arguments: str = ""
    output: str = ""

    def view(self) -> ItemView:
        """The item as it stands now, for an event."""
        parts = tuple(p.view() for p in self.content)
        if self.type == "function_call":
            return ItemView(self.id, self.type, self.status, "", (), self.call_id, self.name, self.arguments)
        if self.type == "function_call_output":
            return ItemView(self.id, self.type, self.status, "", (), self.call_id, output=self.output)
        return ItemView(self.id, self.type, self.status, self.role, parts)

    def text(self) -> str:
        """What the item says, as text (typed text, or the transcript of audio)."""
        return " ".join(p.text for p in self.content if p.text)

    @property
    def chars(self) -> int:
        """Characters of text it holds (what the conversation's bound counts)."""
        typed = sum(len(p.text) for p in self.content if p.text) + len(self.arguments) + len(self.output)
        return max(typed, len(self.full_text))

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
            if p.audio:
                p.text = kept
        return kept


def added(item: Item, prev: str | None) -> list[ServerEvent]:
    """The events that announce a new, complete item after ``prev``."""
    view = item.view()
    return [ItemAdded(prev, view), ItemDone(prev, view)]


def decode_audio(b64: str, param: str, *, pcm16: bool = True) -> bytes:
    """Base64 audio from the client (PCM16 unless ``pcm16`` is false: G.711), checked for shape."""
    try:
        raw = base64.b64decode(b64, validate=True)
    except (binascii.Error, ValueError):
        raise ProtocolError("invalid_audio", f"{param} is not valid base64", param=param) from None
    if pcm16 and len(raw) % 2:
        raise ProtocolError(
            "invalid_audio", f"{param} has an odd number of bytes ({len(raw)}); PCM16 needs whole samples", param=param
        )
    return raw


ITEM_TYPES = ("message", "function_call", "function_call_output")


def parse_item(data: dict[str, Any], new_id: str, *, max_chars: int) -> Item:
    """Validate a client ``conversation.item.create`` item (at most ``max_chars`` of text)."""
    p = "item"
    kind = data.get("type", "message")
    if kind not in ITEM_TYPES:
        raise ProtocolError(
            "unsupported_value", f"{p}.type {kind!r} is not supported; one of {list(ITEM_TYPES)}", param=f"{p}.type"
        )
    item = _parse_call(data, kind, new_id) if kind != "message" else _parse_message(data, new_id)
    if item.chars > max_chars:
        raise ProtocolError(
            "item_too_large", f"{p} holds {item.chars} characters of text; at most {max_chars}", param=f"{p}.content"
        )
    return item


def _parse_call(data: dict[str, Any], kind: str, new_id: str) -> Item:
    """A function call (the client keeps its own history) or a function's result."""
    item_id = data.get("id", new_id)
    check_type(item_id, (str,), "item.id")
    check_type(data.get("call_id"), (str,), "item.call_id")
    call_id = str(data["call_id"])
    if kind == "function_call_output":
        check_type(data.get("output"), (str,), "item.output")
        return Item(item_id, "tool", [], type=kind, call_id=call_id, output=data["output"])
    check_type(data.get("name"), (str,), "item.name")
    arguments = data.get("arguments", "")
    check_type(arguments, (str,), "item.arguments")
    return Item(item_id, "assistant", [], type=kind, call_id=call_id, name=data["name"], arguments=arguments)


def _parse_message(data: dict[str, Any], new_id: str) -> Item:
    p = "item"
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
    parts: list[Part] = []
    for i, part in enumerate(content):
        pp = f"{p}.content[{i}]"
        check_type(part, (dict,), pp)
        ptype = part.get("type")
        if ptype not in allowed:
            raise ProtocolError(
                "invalid_value", f"{pp}.type must be one of {sorted(allowed)} for role {role}", param=f"{pp}.type"
            )
        if ptype in ("input_text", "output_text", "text"):
            check_type(part.get("text"), (str,), f"{pp}.text")
            parts.append(Part(ptype, part["text"]))
        else:
            transcript = part.get("transcript")
            if transcript is not None:
                check_type(transcript, (str,), f"{pp}.transcript")
            if "audio" in part:
                check_type(part["audio"], (str,), f"{pp}.audio")
                decode_audio(part["audio"], f"{pp}.audio")
            parts.append(Part(ptype, transcript))
    return Item(item_id, role, parts)


class Conversation:
    """Items in order, addressable by id."""

    def __init__(self) -> None:
        self.items: list[Item] = []
        self._by_id: dict[str, Item] = {}
        self._promised: set[str] = set()
        """Ids the server has given items it will add (a reply's message, announced with its
        first output): no client item may take one meanwhile."""
        self._chars = 0
        self._counted: dict[str, int] = {}  # each item's chars as last counted

    def __contains__(self, item_id: str) -> bool:
        return item_id in self._by_id

    def taken(self, item_id: str) -> bool:
        """Whether ``item_id`` names an item, or one the server has promised."""
        return item_id in self._by_id or item_id in self._promised

    def promise(self, item_id: str) -> None:
        """Hold ``item_id`` for an item the server will add (``add(..., promised=True)``)."""
        self._promised.add(item_id)

    def release(self, item_id: str) -> None:
        """The promised item will not be added after all."""
        self._promised.discard(item_id)

    def get(self, item_id: str) -> Item:
        try:
            return self._by_id[item_id]
        except KeyError:
            raise ProtocolError("item_not_found", f"no item with id {item_id!r}", param="item_id") from None

    def add(self, item: Item, previous_item_id: str | None = None, *, promised: bool = False) -> str | None:
        """Insert after ``previous_item_id`` ('root' = first; None = last); return the
        id of the item now before it. ``promised``: the server's own item, whose id it held."""
        if item.id in self._by_id or (item.id in self._promised and not promised):
            raise ProtocolError("duplicate_item_id", f"an item with id {item.id!r} already exists", param="item.id")
        if previous_item_id is None:
            index = len(self.items)
        elif previous_item_id == "root":
            index = 0
        elif previous_item_id in self._by_id:
            index = self.items.index(self._by_id[previous_item_id]) + 1
        else:
            raise ProtocolError(
                "item_not_found",
                f"previous_item_id {previous_item_id!r} is not in the conversation",
                param="previous_item_id",
            )
        self.items.insert(index, item)
        self._by_id[item.id] = item
        self._promised.discard(item.id)
        self._counted[item.id] = 0
        self.recount(item)
        return self.items[index - 1].id if index > 0 else None

    def previous(self, item: Item) -> str | None:
        """The id of the item before ``item``."""
        index = self.items.index(item)
        return self.items[index - 1].id if index > 0 else None

    def delete(self, item_id: str) -> None:
        self.items.remove(self.get(item_id))
        del self._by_id[item_id]
        self._chars -= self._counted.pop(item_id)

    def recount(self, item: Item) -> None:
        """``item``'s text has changed (a transcript, a reply's growing text, a truncation):
        keep the running total true. An item not in the conversation is not counted."""
        if item.id in self._counted and self._by_id.get(item.id) is item:
            chars = item.chars
            self._chars += chars - self._counted[item.id]
            self._counted[item.id] = chars

    def __len__(self) -> int:
        return len(self.items)

    @property
    def chars(self) -> int:
        """Characters of text in every item: a running total (summing every item on each
        ``conversation.item.create`` was O(n), ~1.2 ms at the 1000-item bound), kept by
        :meth:`add`, :meth:`delete` and :meth:`recount`."""
        return self._chars

    def evict(self, max_items: int, max_chars: int, keep: set[str]) -> list[str]:
        """Drop the oldest items (but those in ``keep``) until the conversation is within
        bounds; return their ids."""
        gone: list[str] = []
        for item in list(self.items):
            if len(self.items) <= max_items and self._chars <= max_chars:
                break
            if item.id in keep:
                continue
            self.delete(item.id)
            gone.append(item.id)
        return gone

    def make_room(self, max_items: int, max_chars: int, keep: set[str]) -> list[ItemDeleted]:
        """:meth:`evict`, as the events that tell the client."""
        return [ItemDeleted(item_id) for item_id in self.evict(max_items, max_chars, keep)]
