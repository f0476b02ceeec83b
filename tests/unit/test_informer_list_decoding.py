"""The two decoders of a LIST page in kube/engine/listing.py - msgspec (items kept as raw JSON, only uid and
resourceVersion read until an item is stored) and the stdlib's json (every item parsed) - say the same
thing about every page: the list's resourceVersion and continue token, each item's uid and resourceVersion,
and each item's whole object. Pages recorded from a real kube-apiserver, and the edge shapes a server or a
proxy may send."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from airflow_jobwatch.kube.engine import listing

FIXTURES = Path(__file__).resolve().parent.parent / "fixtures" / "real-apiserver"


def decoders() -> list[Any]:
    out = [pytest.param(listing._decode_page_stdlib, id="stdlib")]
    if hasattr(listing, "_decode_page_msgspec"):
        out.append(pytest.param(listing._decode_page_msgspec, id="msgspec"))
    return out


def real_page(name: str) -> bytes:
    return json.dumps(json.loads((FIXTURES / name).read_text())["body"]).encode()


PAGES = {
    "real page 1 (continue)": real_page("podlist-page1-continue.json"),
    "real page 2": real_page("podlist-page2.json"),
    "null metadata and items": b'{"kind":"PodList","metadata":null,"items":null}',
    "no metadata, empty items": b'{"items":[]}',
    "empty continue": b'{"metadata":{"resourceVersion":"7","continue":""},"items":'
    b'[{"metadata":{"uid":"u1","name":"a"},"status":{"phase":"Running","n":1.5,"ok":true,"x":null}}]}',
}


def decoded(decode: Any, body: bytes) -> tuple[Any, ...]:
    rv, cont, items, head, load = decode(body)
    return rv, cont, [head(i) for i in items], [load(i) for i in items]


@pytest.mark.parametrize("name", list(PAGES))
@pytest.mark.parametrize("decode", decoders())
def test_decoders_agree_with_a_plain_parse(decode: Any, name: str) -> None:
    body = PAGES[name]
    page = json.loads(body)
    metadata = page.get("metadata") or {}
    items = page.get("items") or []
    assert decoded(decode, body) == (
        str(metadata.get("resourceVersion") or ""),
        metadata.get("continue") or None,
        [(o["metadata"]["uid"], o["metadata"].get("resourceVersion")) for o in items],
        items,
    )


def test_the_real_pages_are_read_as_recorded() -> None:
    rv, cont, items, head, load = listing._decode_page(PAGES["real page 1 (continue)"])
    assert rv == "2747" and cont and cont.startswith("eyJ2Ijoi")
    assert [head(i)[0] for i in items] == [
        "034b6cdd-deab-41bc-b573-a8da7bb2bdba",
        load(items[1])["metadata"]["uid"],
    ]
    rv2, cont2, items2, _, _ = listing._decode_page(PAGES["real page 2"])
    assert rv2 == "2747" and cont2 and cont2 != cont and len(items2) == 2  # the same snapshot, further on


@pytest.mark.parametrize("decode", decoders())
@pytest.mark.parametrize(
    "body",
    [
        b'{"metadata":{"resourceVersion":"7"},"items":[{"metadata":{"uid":"u1"}',  # cut short
        b'{"metadata":{"resourceVersion":"7"},"items":[{"metadata":{"name":"no-uid"}}]}',
        b"[]",
    ],
    ids=["truncated", "item without uid", "not a list object"],
)
def test_a_malformed_page_is_an_error_the_engine_retries(decode: Any, body: bytes) -> None:
    """Informer._run backs off and retries the list on ValueError (json.JSONDecodeError and msgspec's
    DecodeError are both ValueErrors) and on any other exception; what matters is that nothing is applied."""
    with pytest.raises((ValueError, KeyError, TypeError)):
        decoded(decode, body)
