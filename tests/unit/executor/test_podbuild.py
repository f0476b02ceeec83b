"""Worker pod bodies built once per shape are the provider's full build, value for value.

Each body the builder returns is compared with ``build_worker_pod`` + serialization of the same task (the
executor's full build, the provider's ``construct_pod``), across templates, overrides that replace or
extend what the dynamic pod writes, label values the provider must hash, mapped and unmapped tasks.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from kubernetes.client import ApiClient
from kubernetes.client import models as k8s
from support.workloads import executor_kube_config, make_workload

from airflow_jobwatch.executors.podbuild import WorkerPodBuilder, _differences
from airflow_jobwatch.executors.pods import JOBWATCH_LABELS, build_worker_pod, launch_pod_name

TEMPLATE = """\
apiVersion: v1
kind: Pod
metadata:
  name: from-template
  labels: {team: data}
  annotations: {owner: platform}
spec:
  restartPolicy: Never
  serviceAccountName: airflow-worker
  containers:
    - name: base
      image: template/image:1
      args: ["from", "template"]
      env: [{name: FROM_TEMPLATE, value: "1"}]
    - name: sidecar
      image: sidecar:1
"""
OTHER_TEMPLATE = """\
apiVersion: v1
kind: Pod
metadata: {name: other}
spec:
  containers:
    - name: base
      image: other/image:2
"""
SERIALIZE = ApiClient().sanitize_for_serialization


@pytest.fixture
def kube_config(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Any:
    template = tmp_path / "template.yaml"
    template.write_text(TEMPLATE)
    (tmp_path / "other.yaml").write_text(OTHER_TEMPLATE)
    return executor_kube_config(template, monkeypatch)


def _full(workload: Any, kube_config: Any, *, pod_name: str, launch_id: str, labels: Any = None) -> Any:
    pod = build_worker_pod(
        workload,
        kube_config=kube_config,
        scheduler_job_id="7",
        pod_name=pod_name,
        labels=labels,
        launch_id=launch_id,
    )
    return SERIALIZE(pod)


def _builder(kube_config: Any, labels: Any = None) -> WorkerPodBuilder:
    return WorkerPodBuilder(kube_config=kube_config, scheduler_job_id="7", labels=labels, serialize=SERIALIZE)


def _overrides(tmp: Path) -> list[dict[str, Any] | None]:
    """executor_configs whose pod_override replaces or extends what the dynamic pod writes."""
    return [
        None,
        {
            "pod_override": k8s.V1Pod(
                spec=k8s.V1PodSpec(containers=[k8s.V1Container(name="base", image="x:1")])
            )
        },
        # args given by the override replace the executor's command
        {
            "pod_override": k8s.V1Pod(
                spec=k8s.V1PodSpec(containers=[k8s.V1Container(name="base", args=["own"])])
            )
        },
        {
            "pod_override": k8s.V1Pod(
                metadata=k8s.V1ObjectMeta(
                    namespace="special", labels={"dag_id": "pinned", "extra": "1"}, annotations={"a": "b"}
                ),
                spec=k8s.V1PodSpec(
                    containers=[
                        k8s.V1Container(
                            name="base",
                            env=[k8s.V1EnvVar(name="AIRFLOW_IS_K8S_EXECUTOR_POD", value="no")],
                            resources=k8s.V1ResourceRequirements(requests={"cpu": "2"}),
                        )
                    ]
                ),
            )
        },
        {"pod_template_file": str(tmp / "other.yaml")},
    ]


texts = st.text(min_size=1, max_size=80)


# The fixture's template and config are read-only: sharing them between examples is what is wanted.
@settings(max_examples=15, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    data=st.data(),
    dag_id=texts,
    task_ids=st.lists(texts, min_size=3, max_size=5),
    run_id=texts,
    try_numbers=st.lists(st.integers(min_value=1, max_value=10**6), min_size=5, max_size=5),
    mapped=st.booleans(),
    jobwatch_labels=st.booleans(),
)
def test_every_body_equals_the_full_build_of_its_task(
    kube_config: Any,
    data: st.DataObject,
    dag_id: str,
    task_ids: list[str],
    run_id: str,
    try_numbers: list[int],
    mapped: bool,
    jobwatch_labels: bool,
) -> None:
    tmp = Path(kube_config.pod_template_file).parent
    labels = JOBWATCH_LABELS if jobwatch_labels else None
    builder = _builder(kube_config, labels)
    executor_config = data.draw(st.sampled_from(_overrides(tmp)))
    for i, task_id in enumerate(task_ids):
        workload = make_workload(
            dag_id=dag_id,
            task_id=task_id,
            run_id=run_id,
            try_number=try_numbers[i],
            map_index=i if mapped else -1,
            executor_config=executor_config,
        )
        name = launch_pod_name(workload.ti.key, f"launch{i}")
        got = builder.body(workload, pod_name=name, launch_id=f"launch{i}")
        assert got == _full(workload, kube_config, pod_name=name, launch_id=f"launch{i}", labels=labels)
    # one full build for the first task, two for the shape, the rest from the shape
    assert (builder.full_builds, builder.shaped_builds) == (3, len(task_ids) - 1)


def test_the_commands_args_are_the_tasks_and_an_override_that_sets_args_keeps_them(kube_config: Any) -> None:
    builder = _builder(kube_config)
    own = {
        "pod_override": k8s.V1Pod(spec=k8s.V1PodSpec(containers=[k8s.V1Container(name="base", args=["own"])]))
    }
    for task_id in ("a", "b", "c"):
        plain = builder.body(make_workload(task_id=task_id), pod_name=f"p-{task_id}", launch_id="l")
        assert plain["spec"]["containers"][0]["args"][:4] == [
            "python",
            "-m",
            "airflow.sdk.execution_time.execute_workload",
            "--json-string",
        ]
        assert f'"task_id":"{task_id}"' in plain["spec"]["containers"][0]["args"][4]
        overridden = builder.body(
            make_workload(task_id=task_id, executor_config=own), pod_name=f"q-{task_id}", launch_id="l"
        )
        assert overridden["spec"]["containers"][0]["args"] == ["own"]
    assert builder.shaped_builds == 4  # the second and third task of each shape


def test_a_long_label_value_is_hashed_as_the_provider_hashes_it(kube_config: Any) -> None:
    builder = _builder(kube_config)
    long_id = "d" * 70 + "!"
    workloads = [make_workload(dag_id=long_id, task_id=f"t{i}") for i in range(3)]
    bodies = [builder.body(w, pod_name=f"p{i}", launch_id="l") for i, w in enumerate(workloads)]
    assert builder.shaped_builds == 2
    label = bodies[2]["metadata"]["labels"]["dag_id"]
    assert len(label) <= 63 and label != long_id
    assert bodies[2]["metadata"]["annotations"]["dag_id"] == long_id
    assert bodies[2] == _full(workloads[2], kube_config, pod_name="p2", launch_id="l")


@pytest.fixture
def mutation_hook() -> Iterator[list[str]]:
    """A pod_mutation_hook installed as airflow_local_settings would install it; records the pods it saw."""
    from airflow.policies import hookimpl

    from airflow_jobwatch.compat import policy_plugin_manager

    seen: list[str] = []

    class Policy:
        @staticmethod
        @hookimpl
        def pod_mutation_hook(pod: k8s.V1Pod) -> None:
            seen.append(pod.metadata.name)
            pod.metadata.labels["mutated-for"] = pod.metadata.annotations["task_id"]

    manager = policy_plugin_manager()
    manager.register(Policy, name="test-pod-mutation-hook")
    try:
        yield seen
    finally:
        manager.unregister(name="test-pod-mutation-hook")


def test_with_a_pod_mutation_hook_every_pod_is_built_in_full(
    kube_config: Any, mutation_hook: list[str]
) -> None:
    builder = _builder(kube_config)
    bodies = [builder.body(make_workload(task_id=f"t{i}"), pod_name=f"p{i}", launch_id="l") for i in range(4)]
    assert mutation_hook == ["p0", "p1", "p2", "p3"]
    assert [b["metadata"]["labels"]["mutated-for"] for b in bodies] == ["t0", "t1", "t2", "t3"]
    assert (builder.full_builds, builder.shaped_builds) == (4, 0)


def test_a_replaced_settings_pod_mutation_hook_is_honoured(
    kube_config: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A deployment that assigns ``airflow.settings.pod_mutation_hook`` itself (as older Airflow documented)."""
    from airflow import settings

    def hook(pod: k8s.V1Pod) -> None:
        pod.metadata.labels["mutated-for"] = pod.metadata.annotations["task_id"]

    monkeypatch.setattr(settings, "pod_mutation_hook", hook)
    builder = _builder(kube_config)
    bodies = [builder.body(make_workload(task_id=f"t{i}"), pod_name=f"p{i}", launch_id="l") for i in range(3)]
    assert [b["metadata"]["labels"]["mutated-for"] for b in bodies] == ["t0", "t1", "t2"]
    assert builder.shaped_builds == 0


def test_a_pod_name_over_the_providers_limit_is_built_in_full(kube_config: Any) -> None:
    builder = _builder(kube_config)
    name = "n" * 70
    with pytest.warns(UserWarning, match="truncating"):
        bodies = [
            builder.body(make_workload(task_id=f"t{i}"), pod_name=name, launch_id="l") for i in range(3)
        ]
    assert all(len(b["metadata"]["name"]) <= 63 for b in bodies)
    assert builder.shaped_builds == 0


def test_a_shape_that_cannot_be_made_leaves_full_builds(
    kube_config: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    builder = _builder(kube_config)
    workloads = [make_workload(task_id=f"t{i}") for i in range(3)]
    builder.body(workloads[0], pod_name="p0", launch_id="l")

    def broken(*args: Any, **kwargs: Any) -> Any:
        raise RuntimeError("marker build failed")

    monkeypatch.setattr(builder, "_make_shape", broken)
    bodies = [builder.body(w, pod_name=f"p{i}", launch_id="l") for i, w in enumerate(workloads[1:], 1)]
    assert bodies == [
        _full(w, kube_config, pod_name=f"p{i}", launch_id="l") for i, w in enumerate(workloads[1:], 1)
    ]
    assert builder.shaped_builds == 0


def test_bad_input_raises_as_the_full_build_does(kube_config: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    builder = _builder(kube_config)
    with pytest.raises(TypeError, match="KubernetesExecutorConfig"):
        builder.body(
            make_workload(task_id="t", executor_config={"pod_override": {"not": "a pod"}}),
            pod_name="p",
            launch_id="l",
        )
    monkeypatch.setattr(kube_config, "pod_template_file", None)
    with pytest.raises(ValueError, match="pod_template_file"):
        builder.body(make_workload(task_id="t"), pod_name="p", launch_id="l")


def test_a_difference_that_is_not_a_marker_makes_the_shape_unusable() -> None:
    markers = {"m1": "dag_id"}
    places: list[Any] = []
    assert _differences({"a": ["m1", "x"]}, {"a": ["m2", "x"]}, (), markers, places)
    assert places == [(("a", 0), "dag_id", False)]
    # derived from a per-task value (e.g. a hash of it): not a plain copy
    assert not _differences({"a": "m1-suffix"}, {"a": "m2-suffix"}, (), markers, [])
    # a structure that changes with the values
    assert not _differences({"a": [1]}, {"a": [1, 2]}, (), markers, [])
    assert not _differences({"a": 1}, {"b": 1}, (), markers, [])


def test_ready_body_is_only_given_once_the_shape_is_made(kube_config: Any) -> None:
    """The launch path asks for a ready body first: None means "build it in a thread" (a full build)."""
    builder = _builder(kube_config)
    workloads = [make_workload(task_id=f"t{i}") for i in range(4)]
    assert builder.ready_body(workloads[0], pod_name="p0", launch_id="l") is None
    builder.body(workloads[0], pod_name="p0", launch_id="l")
    assert builder.ready_body(workloads[1], pod_name="p1", launch_id="l") is None  # shape not made yet
    builder.body(workloads[1], pod_name="p1", launch_id="l")
    for i in (2, 3):
        got = builder.ready_body(workloads[i], pod_name=f"p{i}", launch_id=f"l{i}")
        assert got == _full(workloads[i], kube_config, pod_name=f"p{i}", launch_id=f"l{i}")
    assert (builder.full_builds, builder.shaped_builds) == (3, 3)


def test_ready_body_never_raises_and_leaves_bad_input_to_the_full_build(kube_config: Any) -> None:
    builder = _builder(kube_config)
    bad = make_workload(task_id="t", executor_config={"pod_override": {"not": "a pod"}})
    assert builder.ready_body(bad, pod_name="p", launch_id="l") is None
    with pytest.raises(TypeError, match="KubernetesExecutorConfig"):
        builder.body(bad, pod_name="p", launch_id="l")


def test_ready_body_with_a_pod_mutation_hook_is_none(kube_config: Any, mutation_hook: list[str]) -> None:
    builder = _builder(kube_config)
    for i in range(3):
        builder.body(make_workload(task_id=f"t{i}"), pod_name=f"p{i}", launch_id="l")
    assert builder.ready_body(make_workload(task_id="t3"), pod_name="p3", launch_id="l") is None


def test_an_edited_template_is_used_once_its_recheck_is_due(
    kube_config: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    import os

    from airflow_jobwatch.executors import podbuild

    clock = [1000.0]
    monkeypatch.setattr(podbuild.time, "monotonic", lambda: clock[0])
    template = Path(kube_config.pod_template_file)
    builder = _builder(kube_config)
    for i in range(3):
        builder.body(make_workload(task_id=f"t{i}"), pod_name=f"p{i}", launch_id="l")
    template.write_text(TEMPLATE.replace("sidecar:1", "sidecar:2"))
    os.utime(template, ns=(1, 1))  # a new mtime whatever the file system's resolution
    stale = builder.ready_body(make_workload(task_id="t3"), pod_name="p3", launch_id="l")
    assert stale is not None and stale["spec"]["containers"][1]["image"] == "sidecar:1"
    clock[0] += podbuild._TEMPLATE_RECHECK_S
    assert builder.ready_body(make_workload(task_id="t4"), pod_name="p4", launch_id="l") is None
    fresh = builder.body(make_workload(task_id="t4"), pod_name="p4", launch_id="l")
    assert fresh["spec"]["containers"][1]["image"] == "sidecar:2"


def test_a_pod_name_is_upstreams_base_and_fixed_by_the_launch_and_its_pod_index() -> None:
    """The same launch gets the same name in every scheduler (so a second create is answered 409); another
    launch, another pod of the launch, or another try gets another name; always a DNS label of at most 63."""
    import re

    from airflow.models.taskinstancekey import TaskInstanceKey
    from airflow.providers.cncf.kubernetes.kubernetes_helper_functions import create_unique_id

    for dag_id, task_id in (("My_DAG", "a.task-" + "x" * 80), ("d", "t"), ("d" * 30, "-." + "t" * 22)):
        key = TaskInstanceKey(dag_id, task_id, "run-" + "r" * 300, 1, -1)
        upstream = create_unique_id(dag_id, task_id)  # <name>-<8 random chars>
        names = {
            launch_pod_name(k, launch, index)
            for k in (key, key._replace(try_number=2), key._replace(map_index=0))
            for launch in ("a" * 16, "b" * 16, "x" * 300)
            for index in range(3)
        }
        assert len(names) == 27
        assert launch_pod_name(key, "a" * 16, 1) == launch_pod_name(key, "a" * 16, 1)
        for name in names:
            assert len(name) <= 63 and re.fullmatch(r"[a-z0-9]([-a-z0-9]*[a-z0-9])?", name), name
            assert re.fullmatch(r"-[0-9a-f]{10}", name[-11:]), name
            assert upstream[:-9].startswith(name[:-11].rstrip("-.")), (name, upstream)
