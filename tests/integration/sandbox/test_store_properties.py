"""Property: whatever the sequence of changes, folding a watch's events over the list it started
from gives exactly what a fresh list returns, with and without a label selector (the guarantee an
informer's cache rests on). Exercised on the store directly, as it runs inside the API server."""

from __future__ import annotations

import asyncio
import json
from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from airflow_jobwatch_testing.sandbox.selectors import parse_field_selector, parse_label_selector
from airflow_jobwatch_testing.sandbox.store import Store, Watcher

NAMES = st.sampled_from(["a", "b", "c", "d"])
OPS = st.lists(st.tuples(st.sampled_from(["put", "delete"]), NAMES, st.sampled_from(["x", "y"])), max_size=30)


def fold(state: dict[str, dict[str, Any]], lines: list[bytes]) -> dict[str, dict[str, Any]]:
    out = dict(state)
    for line in lines:
        event = json.loads(line)
        name = event["object"]["metadata"]["name"]
        if event["type"] == "DELETED":
            assert name in out, f"DELETED for {name} that the watcher never saw"
            out.pop(name)
        else:
            assert (event["type"] == "ADDED") == (name not in out), f"{event['type']} for {name}"
            out[name] = event["object"]
    return out


def listing(store: Store, selector: str) -> dict[str, dict[str, Any]]:
    match = parse_label_selector(selector)
    return {
        e.obj["metadata"]["name"]: json.loads(e.full)
        for e in store.iter("pods", "default")
        if match(e.obj["metadata"].get("labels") or {})
    }


def apply(store: Store, ops: list[tuple[str, str, str]]) -> None:
    for op, name, team in ops:
        old = store.get("pods", "default", name)
        if op == "delete":
            if old is not None:
                store.commit("pods", "DELETED", dict(old.obj), old.obj)
            continue
        obj = {"metadata": {"name": name, "namespace": "default", "labels": {"team": team}}, "spec": {}}
        store.commit("pods", "ADDED" if old is None else "MODIFIED", obj, old.obj if old else None)


@settings(max_examples=150, deadline=None)
@given(before=OPS, after=OPS, selector=st.sampled_from(["", "team=x", "team!=x"]))
def test_list_then_watch_equals_list(before: list[Any], after: list[Any], selector: str) -> None:
    async def run() -> None:
        store = Store(history_window=1000)
        apply(store, before)
        start_state = listing(store, selector)
        start_rv = store.rv
        field_match, _ = parse_field_selector(None, "pods")
        live = Watcher("pods", "default", parse_label_selector(selector), field_match, bool(selector))
        store.add_watcher(live)
        apply(store, after)
        # A live watcher and a replay from the list's resourceVersion see the same thing.
        replay = Watcher("pods", "default", parse_label_selector(selector), field_match, bool(selector))
        for event in store.replay_from(start_rv) or []:
            replay.offer(event)
        expected = listing(store, selector)
        assert fold(start_state, list(live.buffer)) == expected
        assert fold(start_state, list(replay.buffer)) == expected

    asyncio.run(run())


@settings(max_examples=100, deadline=None)
@given(ops=OPS, window=st.integers(min_value=0, max_value=10))
def test_replay_or_410_never_a_partial_history(ops: list[Any], window: int) -> None:
    store = Store(history_window=window)
    apply(store, ops)
    for rv in range(1, store.rv + 1):
        replay = store.replay_from(rv)
        if replay is None:
            assert rv < store.compacted_rv  # only compacted revisions are refused
        else:
            assert [e.rv for e in replay] == list(range(rv + 1, store.rv + 1))


# Keys across namespaces whose names order differently as (namespace, name) tuples and as etcd keys
# ("a-b/x" < "a/x" because "-" < "/"), which is the order a paged LIST must follow.
KEYS = st.tuples(st.sampled_from(["a", "a-b", "a.c", "ab", "b"]), st.sampled_from(["x", "x-1", "y"]))
KEY_OPS = st.lists(st.tuples(st.sampled_from(["put", "delete"]), KEYS), max_size=40)


def apply_keys(store: Store, ops: list[tuple[str, tuple[str, str]]]) -> None:
    for op, (namespace, name) in ops:
        old = store.get("pods", namespace, name)
        if op == "delete":
            if old is not None:
                store.commit("pods", "DELETED", dict(old.obj), old.obj)
            continue
        obj = {"metadata": {"name": name, "namespace": namespace}, "spec": {}}
        store.commit("pods", "ADDED" if old is None else "MODIFIED", obj, old.obj if old else None)


@settings(max_examples=150, deadline=None)
@given(
    before=KEY_OPS,
    after=KEY_OPS,
    namespace=st.sampled_from([None, "a", "a-b", "ab"]),
    limit=st.integers(1, 4),
)
def test_paged_listing_is_the_state_at_its_revision_in_etcd_order(
    before: list[Any], after: list[Any], namespace: str | None, limit: int
) -> None:
    """Store.listing (an index kept up to date by commit, and cached past states) pages like a scan of
    the objects sorted by their etcd key, with the key after the last item as the page's start, whatever
    was written after the list began."""
    store = Store(history_window=1000)
    store.listing("pods")  # the index exists before the writes, so commit keeps it up to date
    apply_keys(store, before)
    rv = store.rv

    def etcd_order(objects: Any) -> list[tuple[str, str]]:
        keys = [k for k in objects if namespace is None or k[0] == namespace]
        return sorted(keys, key=lambda k: f"{k[0]}/{k[1]}")

    expected = etcd_order(store.objects["pods"])
    apply_keys(store, after)
    # The index of the current state, kept up to date by every commit, is the objects in etcd order.
    assert store.listing("pods")[1].keys == sorted(store.objects["pods"], key=lambda k: f"{k[0]}/{k[1]}")
    got: list[tuple[str, str]] = []
    start = ""
    while True:
        objects, index = store.listing("pods", rv)
        page = [k for k, _ in zip(index.after(namespace, start), range(limit), strict=False)]
        assert all(k in objects for k in page)
        got += page
        if len(page) < limit:
            break
        start = f"/{page[-1][1]}" if namespace is not None else f"{page[-1][0]}/{page[-1][1]}"
    assert got == expected
