"""The informers' projection (kube/engine/projection.py) keeps every field that states.py and the adapters read.

Two independent checks:

* a tracer: run ``classify_pod`` / ``classify_job`` / ``pod_summary`` and the trigger registry's pod-index
  helpers over every fixture object wrapped in a dict that records each key anyone *tries* to read (present or
  not), and require the projection to keep every recorded path. Reading a new field in states.py without
  adding it to projection.py fails here, naming the field;
* property tests: for any generated object (realistic values, garbage and unknown extra fields at every level)
  the classification of the projected object equals that of the full object.
"""

from __future__ import annotations

import copy
import json
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st
from test_states_properties import SETTINGS, garbage, jobs, pod_lists, pods

from airflow_jobwatch.kube.engine import projection
from airflow_jobwatch.kube.engine.projection import (
    JOB_FIELDS,
    POD_FIELDS,
    Spec,
    Without,
    project,
    project_job,
    project_pod,
)
from airflow_jobwatch.kube.meaning.states import classify_job, classify_pod, pod_summary
from airflow_jobwatch.triggers.registry import _owner_uid

FIXTURES = Path(__file__).parent / "fixtures"
POD_FIXTURES = sorted((FIXTURES / "pods").glob("*.json"))
JOB_FIXTURES = sorted((FIXTURES / "jobs").glob("*.json"))


class Traced(dict):  # type: ignore[type-arg]
    """A dict that records the path of every key read through get / [] / in."""

    def __init__(self, data: dict[str, Any], path: tuple[str, ...], reads: set[tuple[str, ...]]) -> None:
        super().__init__({k: _wrap(v, (*path, k), reads) for k, v in data.items()})
        self._path = path
        self._reads = reads

    def get(self, key: Any, default: Any = None) -> Any:
        self._reads.add((*self._path, str(key)))
        return super().get(key, default)

    def __getitem__(self, key: Any) -> Any:
        self._reads.add((*self._path, str(key)))
        return super().__getitem__(key)

    def __contains__(self, key: object) -> bool:
        self._reads.add((*self._path, str(key)))
        return super().__contains__(key)


def _wrap(value: Any, path: tuple[str, ...], reads: set[tuple[str, ...]]) -> Any:
    if isinstance(value, dict):
        return Traced(value, path, reads)
    if isinstance(value, list):
        return [_wrap(item, (*path, "[]"), reads) for item in value]
    return value


def kept(path: tuple[str, ...], spec: Spec) -> bool:
    """Whether the projection ``spec`` keeps the field at ``path`` ("[]" = any list item)."""
    for part in path:
        if spec is True:
            return True
        if isinstance(spec, Without):
            return part not in spec.keys
        if isinstance(spec, list):
            if part != "[]":
                return False
            spec = spec[0]
            continue
        if isinstance(spec, dict):
            if part == "[]":
                return False
            if part not in spec:
                return False
            spec = spec[part]
            continue
        return False
    return spec is not False


def load(path: Path) -> dict[str, Any]:
    data: dict[str, Any] = json.loads(path.read_text())
    return data


def reads_of_pod_consumers(pod: dict[str, Any]) -> set[tuple[str, ...]]:
    reads: set[tuple[str, ...]] = set()
    traced = _wrap(pod, (), reads)
    for deleted in (False, True):
        classify_pod(traced, deleted=deleted)
        pod_summary(traced, deleted=deleted)
    _owner_uid(traced)
    return reads


def reads_of_job_consumers(job: dict[str, Any], job_pods: list[dict[str, Any]]) -> tuple[set, set]:
    job_reads: set[tuple[str, ...]] = set()
    pod_reads: set[tuple[str, ...]] = set()
    traced_job = _wrap(job, (), job_reads)
    traced_pods = [_wrap(p, (), pod_reads) for p in job_pods]
    for deleted in (False, True):
        classify_job(traced_job, traced_pods, deleted=deleted)
    return job_reads, pod_reads


def missing(reads: set[tuple[str, ...]], spec: Spec) -> list[str]:
    return sorted(".".join(path) for path in reads if not kept(path, spec))


@pytest.mark.parametrize("path", POD_FIXTURES, ids=lambda p: p.stem)
def test_every_field_the_pod_consumers_read_is_kept(path: Path) -> None:
    reads = reads_of_pod_consumers(load(path))
    assert reads, "the tracer recorded nothing: it no longer sees the reads"
    assert missing(reads, POD_FIELDS) == [], "add these fields to POD_FIELDS in kube/engine/projection.py"


@pytest.mark.parametrize("path", JOB_FIXTURES, ids=lambda p: p.stem)
def test_every_field_the_job_consumers_read_is_kept(path: Path) -> None:
    all_pods = [load(p) for p in POD_FIXTURES]
    job_reads, pod_reads = reads_of_job_consumers(load(path), all_pods)
    assert missing(job_reads, JOB_FIELDS) == [], "add these fields to JOB_FIELDS in kube/engine/projection.py"
    assert missing(pod_reads, POD_FIELDS) == [], "add these fields to POD_FIELDS in kube/engine/projection.py"


def test_the_tracer_catches_a_dropped_field() -> None:
    """The check above can fail: drop status.reason from the pod projection and it is reported."""
    narrower = copy.deepcopy(POD_FIELDS)
    assert isinstance(narrower["status"], dict)
    del narrower["status"]["reason"]
    evicted = load(FIXTURES / "pods" / "evicted.json")
    assert "status.reason" in missing(reads_of_pod_consumers(evicted), narrower)
    # ... and the classification of a projected object really changes without it.
    narrow = project(evicted, narrower)
    assert classify_pod(narrow) != classify_pod(evicted)


@pytest.mark.parametrize("path", POD_FIXTURES, ids=lambda p: p.stem)
def test_projection_of_pod_fixtures_is_smaller(path: Path) -> None:
    obj = load(path)
    small = projection.projector("pods")(obj)
    assert small["metadata"]["uid"] == obj["metadata"]["uid"]
    assert small["metadata"]["resourceVersion"] == obj["metadata"]["resourceVersion"]
    assert "managedFields" not in small["metadata"]
    assert len(json.dumps(small)) < len(json.dumps(obj))


@pytest.mark.parametrize("path", JOB_FIXTURES, ids=lambda p: p.stem)
def test_jobs_drop_their_pod_template_and_still_make_an_event_job(path: Path) -> None:
    """The cache keeps no pod template; a Job deleted before the trigger's final GET is reported from
    the cached form, which still builds a V1Job.to_dict() (with ``spec.template`` None)."""
    from airflow_jobwatch.triggers.job import client_job_dict

    obj = load(path)
    small = projection.projector("jobs")(obj)
    assert "template" not in (small.get("spec") or {})
    assert small.get("status") == obj.get("status")
    assert (small.get("metadata") or {}).get("uid") == (obj.get("metadata") or {}).get("uid")
    event_job = client_job_dict(small)
    assert event_job is not None
    assert event_job["spec"]["template"] is None
    assert event_job["status"] == client_job_dict(obj)["status"]


# ----------------------------------------------------------------------------------- property tests

extra_fields = st.dictionaries(
    st.sampled_from(["zz", "nodeName", "hostIP", "volumes", "extra"]), garbage, max_size=2
)


@st.composite
def with_extras(draw: st.DrawFn, base: st.SearchStrategy[dict[str, Any]]) -> dict[str, Any]:
    """``base`` plus unknown fields at the top level and inside metadata, spec and status."""
    obj = draw(base)
    obj.update(draw(extra_fields))
    for section in ("metadata", "spec", "status"):
        if isinstance(obj.get(section), dict):
            obj[section].update(draw(extra_fields))
    return obj


@SETTINGS
@given(with_extras(pods), st.booleans())
def test_projected_pod_classifies_like_the_full_pod(pod: dict[str, Any], deleted: bool) -> None:
    small = project_pod(copy.deepcopy(pod))
    assert classify_pod(small, deleted=deleted) == classify_pod(pod, deleted=deleted)
    assert pod_summary(small, deleted=deleted) == pod_summary(pod, deleted=deleted)


@SETTINGS
@given(with_extras(jobs), pod_lists, st.booleans())
def test_projected_job_classifies_like_the_full_job(
    job: dict[str, Any], job_pods: list[dict[str, Any]] | None, deleted: bool
) -> None:
    small_job = project_job(copy.deepcopy(job))
    small_pods = None if job_pods is None else [project_pod(copy.deepcopy(p)) for p in job_pods]
    assert classify_job(small_job, small_pods, deleted=deleted) == classify_job(
        job, job_pods, deleted=deleted
    )


@pytest.mark.parametrize("path", JOB_FIXTURES, ids=lambda p: p.stem)
def test_a_cached_job_keeps_no_stored_result_nor_applied_manifest(path: Path) -> None:
    """The stored result (up to 128 KiB) and ``kubectl apply``'s copy of the manifest are not cached; the
    user's own annotations are. The cached copy is then exactly that of the Job without them."""
    from airflow_jobwatch.kube.meaning.result import RESULT_ANNOTATION

    plain = load(path)
    plain.setdefault("metadata", {})["annotations"] = {"team": "data"}
    annotated = copy.deepcopy(plain)
    annotated["metadata"]["annotations"].update(
        {
            RESULT_ANNOTATION: json.dumps({"format": 2, "xcom_result": ["x" * 4000] * 3}),
            "kubectl.kubernetes.io/last-applied-configuration": json.dumps(plain),
        }
    )
    assert project_job(annotated) == project_job(plain)
    assert project_job(annotated)["metadata"]["annotations"] == {"team": "data"}
    assert len(annotated["metadata"]["annotations"]) == 3  # the watch's object itself is not changed
