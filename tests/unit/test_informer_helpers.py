"""Pure pieces of the watch engine: line splitting, Retry-After parsing, config validation, event accessors."""

from __future__ import annotations

import itertools
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from airflow_jobwatch.kube.engine.informer import (
    EventType,
    Informer,
    InformerConfig,
    InformerEvent,
    split_lines,
)


@settings(max_examples=100, deadline=None)
@given(
    lines=st.lists(st.binary(min_size=1, max_size=20).filter(lambda b: b"\n" not in b), max_size=10),
    cuts=st.lists(st.integers(0, 300), max_size=8),
)
def test_split_lines_reassembles_any_chunking(lines, cuts):
    """However the stream is cut into chunks, the same complete lines come out in order."""
    stream = b"".join(line + b"\n" for line in lines)
    positions = sorted({min(c, len(stream)) for c in cuts} | {0, len(stream)})
    out: list[bytes] = []
    buffer = b""
    for start, end in itertools.pairwise(positions):
        got, buffer = split_lines(buffer, stream[start:end])
        out.extend(got)
    assert out == lines
    assert buffer == b""


def test_split_lines_keeps_the_incomplete_rest():
    assert split_lines(b'{"a"', b':1}\n{"b"') == ([b'{"a":1}'], b'{"b"')
    assert split_lines(b"", b"partial") == ([], b"partial")


@pytest.mark.parametrize(
    ("kwargs", "names"),
    [
        ({"watch_timeout_seconds": 0}, "watch_timeout_seconds"),
        ({"stall_timeout_seconds": -1}, "stall_timeout_seconds"),
        ({"connect_timeout_seconds": 0}, "connect_timeout_seconds"),
        ({"backoff_initial_seconds": 0}, "backoff_initial_seconds"),
        ({"backoff_initial_seconds": 5, "backoff_max_seconds": 1}, "backoff_max_seconds"),
        ({"backoff_reset_after_seconds": -1}, "backoff_reset_after_seconds"),
        ({"unhealthy_after_seconds": 0}, "unhealthy_after_seconds"),
        ({"resync_interval_seconds": 0}, "resync_interval_seconds"),
        ({"page_size": 0}, "page_size"),
    ],
)
def test_config_rejects_bad_values_naming_the_field(kwargs, names):
    with pytest.raises(ValueError, match=names):
        InformerConfig(**kwargs)


def test_informer_rejects_bad_arguments():
    with pytest.raises(ValueError, match="kind must be one of"):
        Informer(None, kind="deployments", namespace=None)  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="namespace"):
        Informer(None, kind="pods", namespace="")
    with pytest.raises(TypeError, match="InformerConfig"):
        Informer(None, kind="pods", namespace=None, config={"page_size": 1})  # type: ignore[arg-type]


def test_event_accessors():
    pod = {"kind": "Pod", "metadata": {"name": "p", "namespace": "ns", "uid": "u-1", "resourceVersion": "7"}}
    event = InformerEvent(EventType.DELETED_UNKNOWN, pod)
    assert (event.uid, event.namespace, event.name) == ("u-1", "ns", "p")
    assert InformerEvent(EventType.ADDED, {"metadata": {"name": "n", "uid": "u"}}).namespace is None


def test_compact_store_keeps_objects_as_json_and_every_read_is_a_fresh_copy():
    from airflow_jobwatch.kube.engine.informer import CompactStore

    store = CompactStore()
    pod = {"metadata": {"uid": "u1", "name": "p", "resourceVersion": "7", "labels": {"a": "b"}}, "status": {}}
    store["u1"] = pod
    pod["metadata"]["resourceVersion"] = "8"  # a caller's later change does not reach the store
    assert len(store) == 1 and "u1" in store and "u2" not in store
    first = store.get("u1")
    assert first is not None and first["metadata"]["resourceVersion"] == "7"
    first["metadata"]["labels"]["a"] = "changed"
    assert store["u1"]["metadata"]["labels"] == {"a": "b"}
    assert store.get("u1") == store.get("u1") and store.get("u1") is not store.get("u1")
    assert isinstance(store._data["u1"], bytes)  # one untracked object per entry
    assert [uid for uid, _ in store.items()] == ["u1"] and list(store.values()) == [store["u1"]]
    assert store.get("missing") is None and store.pop("missing", None) is None
    assert store.pop("u1")["metadata"]["name"] == "p" and len(store) == 0


def test_compact_store_deflates_objects_alike_with_the_first_as_dictionary():
    import json

    from airflow_jobwatch.kube.engine.informer import CompactStore

    def pod(i: int) -> dict[str, Any]:
        labels = {"dag_id": "etl", "task_id": f"load_{i:05d}", "try_number": "1", "airflow-worker": "1001"}
        return {
            "metadata": {
                "uid": f"uid-{i:08d}",
                "name": f"etl-load-{i:05d}",
                "resourceVersion": str(i),
                "labels": labels,
            },
            "status": {
                "phase": "Running",
                "conditions": [{"type": t, "status": "True"} for t in ("Ready", "Initialized")],
            },
        }

    store = CompactStore()
    for i in range(50):
        store[f"uid-{i:08d}"] = pod(i)
    size = len(json.dumps(pod(7), separators=(",", ":")))
    assert len(store._data["uid-00000007"]) * 3 < size  # the shared keys and values cost next to nothing
    assert [store[f"uid-{i:08d}"] for i in range(50)] == [pod(i) for i in range(50)]
    unlike = {
        "metadata": {"uid": "other", "name": "x" * 300},
        "spec": {"nodeName": "n\u00e9", "n": [1.5, None, True]},
    }
    store["other"] = unlike  # not like the dictionary: stored (less compressed) and read back intact
    assert store["other"] == unlike


def test_compact_store_is_an_informer_option():
    config = InformerConfig(compact_store=True)
    assert Informer(object(), kind="pods", namespace="ns", config=config).cache.compact
    assert not Informer(object(), kind="pods", namespace="ns").cache.compact


def test_names_lists_the_stored_objects_without_reading_them():
    informer = Informer(object(), kind="pods", namespace="ns", config=InformerConfig(compact_store=True))
    for uid, name in (("u1", "a"), ("u2", "b")):
        informer.cache.put(
            {"metadata": {"uid": uid, "name": name, "namespace": "ns", "resourceVersion": "1"}}
        )
    informer.cache.delete("u1", EventType.DELETED, informer.get("u1") or {})
    assert informer.names() == [("ns", "b")]
