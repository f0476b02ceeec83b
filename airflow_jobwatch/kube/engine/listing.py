"""A LIST: how it chooses its snapshot, how its pages are decoded, and what it has told so far."""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

# How a LIST chooses its snapshot (https://kubernetes.io/docs/reference/using-api/api-concepts/#semantics-for-get-and-list):
# the informer lists only at its start and after a 410, both times with resourceVersion=0 - whatever the
# apiserver's watch cache holds, cheap for the server but possibly older than what we have already seen
# (another apiserver of an HA control plane may lag behind), so its verdicts are checked before they are
# believed (relist.py).


# ---- decoding LIST pages -------------------------------------------------------------------------------
# A relist mostly finds what it already has: of 50,000 listed pods, the 45,000 unchanged ones need only their
# uid and resourceVersion. With msgspec (which Airflow itself requires, so it is installed wherever this
# provider is), a page is split into its items' raw JSON without building them, each item's uid and
# resourceVersion are read by a decoder that skips everything else, and only the items that are stored are
# decoded whole: a relist of 50,000 pods costs ~0.5 s of CPU instead of ~2 s. Without msgspec, the stdlib
# parses every item whole; the rules applied to the items are the same either way.

_Head = Callable[[Any], tuple[str, str | None]]
_Load = Callable[[Any], dict[str, Any]]
_Page = tuple[str, str | None, list[Any], _Head, _Load]


def _decode_page_stdlib(body: bytes) -> _Page:
    """(list resourceVersion, continue token, items, item -> (uid, resourceVersion), item -> object)."""
    page = json.loads(body)
    if not isinstance(page, dict):
        raise ValueError("LIST returned no list object")
    metadata = page.get("metadata") or {}
    items: list[dict[str, Any]] = page.get("items") or []
    return (
        str(metadata.get("resourceVersion") or ""),
        metadata.get("continue") or None,
        items,
        _stdlib_head,
        _identity,
    )


def _stdlib_head(obj: dict[str, Any]) -> tuple[str, str | None]:
    metadata = obj["metadata"]
    return metadata["uid"], metadata.get("resourceVersion")


def _identity(obj: dict[str, Any]) -> dict[str, Any]:
    return obj


try:
    import msgspec
except ImportError:  # pragma: no cover - Airflow requires msgspec; the engine does not
    _decode_page = _decode_page_stdlib
else:

    class _ListMeta(msgspec.Struct, gc=False):
        resourceVersion: str | None = None
        continue_: str | None = msgspec.field(default=None, name="continue")

    class _RawList(msgspec.Struct, gc=False):
        metadata: _ListMeta | None = None
        items: list[msgspec.Raw] | None = None

    class _ItemMeta(msgspec.Struct, gc=False):
        uid: str
        resourceVersion: str | None = None

    class _ItemHead(msgspec.Struct, gc=False):
        metadata: _ItemMeta

    _raw_list = msgspec.json.Decoder(_RawList)
    _item_head = msgspec.json.Decoder(_ItemHead)
    _item_whole = msgspec.json.Decoder(dict[str, Any])

    def _msgspec_head(raw: msgspec.Raw) -> tuple[str, str | None]:
        metadata = _item_head.decode(raw).metadata
        return metadata.uid, metadata.resourceVersion

    def _decode_page_msgspec(body: bytes) -> _Page:
        page = _raw_list.decode(body)
        metadata = page.metadata or _ListMeta()
        return (
            metadata.resourceVersion or "",
            metadata.continue_ or None,
            page.items or [],
            _msgspec_head,
            _item_whole.decode,
        )

    _decode_page = _decode_page_msgspec


# The decoder in use is the module's ``_decode_page``, read at each call below, so that switching it here
# (the tests run the relist rules with each decoder) reaches the relist and the compact store alike.


def decode_page(body: bytes) -> _Page:
    """One LIST page: its resourceVersion, continue token, raw items, and how to read an item's head
    (uid, resourceVersion) and the whole item; msgspec when it is installed, the stdlib's json otherwise."""
    return _decode_page(body)


def encode_item(obj: dict[str, Any]) -> bytes:
    """An object as compact JSON text, by the library the page decoder in use reads (:func:`decode_item`)."""
    if _decode_page is _decode_page_stdlib:  # pragma: no cover - Airflow requires msgspec
        return json.dumps(obj, separators=(",", ":")).encode()
    return msgspec.json.encode(obj)


def decode_item(raw: bytes) -> dict[str, Any]:
    """An object from :func:`encode_item`'s JSON text."""
    if _decode_page is _decode_page_stdlib:  # pragma: no cover - Airflow requires msgspec
        obj: dict[str, Any] = json.loads(raw)
        return obj
    whole: dict[str, Any] = _item_whole.decode(raw)
    return whole


@dataclass(slots=True)
class Listing:
    """What one LIST (all its pages) has told so far: its resourceVersion, the uids it listed, objects whose
    fate it cannot tell (uid -> stored copy), and counts for the log line (the last two once it is complete:
    objects tombstoned because the list lacks them, and doubtful ones a GET found gone)."""

    rv: str = ""
    seen: set[str] = field(default_factory=set)
    doubtful: dict[str, dict[str, Any]] = field(default_factory=dict)
    added: int = 0
    modified: int = 0
    vanished: int = 0
    confirmed_gone: int = 0
