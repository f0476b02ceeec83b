"""Property: the store's owner index (what the Job controller and garbage collector look a Job's pods up
in) always names exactly the pods a scan of the namespace finds owned by that uid, in the same order,
whatever sequence of creates, owner changes and deletions came before."""

from __future__ import annotations

from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from airflow_jobwatch_testing.sandbox.store import Store

NAMES = st.sampled_from(["p1", "p2", "p3", "p4"])
NAMESPACES = st.sampled_from(["default", "other"])
OWNERS = st.lists(st.sampled_from(["u1", "u2", "u3"]), max_size=2, unique=True)
OPS = st.lists(st.tuples(st.sampled_from(["put", "delete"]), NAMESPACES, NAMES, OWNERS), max_size=40)


def pod(namespace: str, name: str, owners: list[str]) -> dict[str, Any]:
    refs = [
        {"apiVersion": "batch/v1", "kind": "Job", "name": u, "uid": u, "controller": True} for u in owners
    ]
    return {
        "metadata": {
            "name": name,
            "namespace": namespace,
            "uid": f"{namespace}-{name}",
            "ownerReferences": refs,
        }
    }


def scanned(store: Store, namespace: str | None, uid: str) -> list[tuple[str, str]]:
    return sorted(
        (e.obj["metadata"]["namespace"], e.obj["metadata"]["name"])
        for e in store.iter("pods", namespace)
        if any(r.get("uid") == uid for r in e.obj["metadata"].get("ownerReferences") or [])
    )


@settings(max_examples=200, deadline=None)
@given(OPS)
def test_owner_index_matches_a_scan(ops: list[tuple[str, str, str, list[str]]]) -> None:
    store = Store(history_window=100)
    for op, namespace, name, owners in ops:
        current = store.get("pods", namespace, name)
        if op == "delete":
            if current is not None:
                store.commit("pods", "DELETED", dict(current.obj), current.obj)
        else:
            store.commit("pods", "MODIFIED" if current else "ADDED", pod(namespace, name, owners))
    for uid in ("u1", "u2", "u3"):
        for namespace in ("default", "other", None):
            indexed = [
                (e.obj["metadata"]["namespace"], e.obj["metadata"]["name"])
                for e in store.owned_by("pods", namespace, uid)
            ]
            assert indexed == scanned(store, namespace, uid), (uid, namespace)
