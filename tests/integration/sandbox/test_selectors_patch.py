"""Table-driven checks of the sandbox's selector parser and patch functions (pure code)."""

from __future__ import annotations

import copy
from typing import Any

import pytest

from airflow_jobwatch_testing.sandbox.errors import ApiError
from airflow_jobwatch_testing.sandbox.patch import PatchError, json_patch, merge_patch, strategic_merge_patch
from airflow_jobwatch_testing.sandbox.selectors import parse_field_selector, parse_label_selector

LABELS = {"app": "web", "tier": "front", "env": "prod"}


@pytest.mark.parametrize(
    ("selector", "expected"),
    [
        ("", True),
        ("app=web", True),
        ("app==web", True),
        ("app!=web", False),
        ("missing!=x", True),
        ("app in (web,db)", True),
        ("app in (db)", False),
        ("app notin (db)", True),
        ("missing notin (db)", True),
        ("tier", True),
        ("!tier", False),
        ("!missing", True),
        ("app=web,env=prod", True),
        ("app=web,env=dev", False),
        (" app = web , tier in ( front ) ", True),
    ],
)
def test_label_selector(selector: str, expected: bool) -> None:
    assert parse_label_selector(selector)(LABELS) is expected


@pytest.mark.parametrize(
    ("selector", "message"),
    [
        ("a in b", "unable to parse requirement: found 'b' expected: '('"),
        ("a in (b", "unable to parse requirement: found '' expected: ')'"),
        ("=x", "unable to parse requirement: found '=' expected: identifier"),
        ("a b", "unable to parse requirement: found 'b'"),
    ],
)
def test_bad_label_selector(selector: str, message: str) -> None:
    with pytest.raises(ApiError) as err:
        parse_label_selector(selector)
    assert err.value.code == 400 and err.value.message.startswith(message)


def test_field_selector() -> None:
    pod = {"metadata": {"name": "p", "namespace": "ns"}, "status": {"phase": "Running"}}
    match, equals = parse_field_selector("metadata.name=p,status.phase!=Failed", "pods")
    assert match(pod) and equals == {"metadata.name": "p"}
    assert not parse_field_selector("status.phase=Succeeded", "pods")[0](pod)
    with pytest.raises(ApiError, match="field label not supported: spec.bogus"):
        parse_field_selector("spec.bogus=x", "pods")
    with pytest.raises(ApiError, match="field label not supported: status.phase"):
        parse_field_selector("status.phase=x", "jobs")


@pytest.mark.parametrize(
    ("target", "patch", "expected"),
    [
        ({"a": 1, "b": 2}, {"b": None}, {"a": 1}),
        ({"a": {"x": 1}}, {"a": {"y": 2}}, {"a": {"x": 1, "y": 2}}),
        ({"l": [1, 2]}, {"l": [3]}, {"l": [3]}),
    ],
)
def test_merge_patch(target: Any, patch: Any, expected: Any) -> None:
    before = copy.deepcopy(target)
    assert merge_patch(target, patch) == expected
    assert target == before  # the target is not modified in place


def test_strategic_merge_patch_by_merge_keys() -> None:
    pod = {
        "spec": {"containers": [{"name": "a", "image": "1"}, {"name": "b", "image": "1"}]},
        "status": {"conditions": [{"type": "Ready", "status": "False"}]},
        "metadata": {"finalizers": ["x"]},
    }
    patched = strategic_merge_patch(
        pod,
        {
            "spec": {"containers": [{"name": "b", "image": "2"}, {"name": "c", "image": "3"}]},
            "status": {
                "conditions": [{"type": "Ready", "status": "True"}, {"type": "Initialized", "status": "True"}]
            },
            "metadata": {"finalizers": ["y"]},
        },
    )
    assert [(c["name"], c["image"]) for c in patched["spec"]["containers"]] == [
        ("a", "1"),
        ("b", "2"),
        ("c", "3"),
    ]
    assert [(c["type"], c["status"]) for c in patched["status"]["conditions"]] == [
        ("Ready", "True"),
        ("Initialized", "True"),
    ]
    assert patched["metadata"]["finalizers"] == ["x", "y"]
    removed = strategic_merge_patch(patched, {"spec": {"containers": [{"name": "a", "$patch": "delete"}]}})
    assert [c["name"] for c in removed["spec"]["containers"]] == ["b", "c"]
    with pytest.raises(PatchError, match="merge key"):
        strategic_merge_patch(pod, {"spec": {"containers": [{"image": "no-name"}]}})


def test_json_patch() -> None:
    doc = {"metadata": {"labels": {"a": "1"}}, "items": [1, 2]}
    out = json_patch(
        doc,
        [
            {"op": "add", "path": "/metadata/labels/b", "value": "2"},
            {"op": "replace", "path": "/metadata/labels/a", "value": "9"},
            {"op": "remove", "path": "/items/0"},
            {"op": "add", "path": "/items/-", "value": 3},
            {"op": "copy", "from": "/metadata/labels/b", "path": "/metadata/labels/c"},
            {"op": "test", "path": "/items", "value": [2, 3]},
        ],
    )
    assert out == {"metadata": {"labels": {"a": "9", "b": "2", "c": "2"}}, "items": [2, 3]}
    assert doc == {"metadata": {"labels": {"a": "1"}}, "items": [1, 2]}
    with pytest.raises(PatchError, match="testing value"):
        json_patch(doc, [{"op": "test", "path": "/items", "value": []}])
