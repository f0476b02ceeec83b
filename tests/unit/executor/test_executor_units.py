"""Pure parts of JobWatchExecutor: pod identity, pod building, configuration, API error parsing."""

from __future__ import annotations

from pathlib import Path

import pytest
from kubernetes.client.exceptions import ApiException
from support.workloads import executor_kube_config, make_workload

from airflow_jobwatch.compat import AIRFLOW_V_3_2_PLUS
from airflow_jobwatch.executors.base import api_message, informer_config_from_conf
from airflow_jobwatch.executors.launching import _retry_after
from airflow_jobwatch.executors.pods import build_worker_pod, key_from_annotations, worker_label_selector

TEMPLATE = """\
apiVersion: v1
kind: Pod
metadata:
  name: from-template
  labels: {team: data}
spec:
  restartPolicy: Never
  serviceAccountName: airflow-worker
  containers:
    - name: base
      image: template/image:1
"""


@pytest.mark.parametrize(
    ("annotations", "expected"),
    [
        (
            {"dag_id": "d", "task_id": "t", "run_id": "r", "try_number": "2"},
            ("d", "t", "r", 2, -1),
        ),
        (
            {"dag_id": "d", "task_id": "t", "run_id": "r", "try_number": "1", "map_index": "4"},
            ("d", "t", "r", 1, 4),
        ),
        ({"dag_id": "d", "task_id": "t", "try_number": "1"}, None),  # no run_id: not an Airflow 3 pod
        ({"dag_id": "d", "task_id": "t", "run_id": "r", "try_number": "x"}, None),
        ({}, None),
    ],
)
def test_key_from_annotations(annotations, expected):
    key = key_from_annotations(annotations)
    assert (tuple(key) if key is not None else None) == expected


def test_worker_label_selector_is_upstreams():
    assert (
        worker_label_selector("12")
        == "kubernetes_executor=True,airflow-worker=12,airflow_executor_done!=True"
    )


@pytest.fixture
def kube_config(tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    template = tmp_path / "template.yaml"
    template.write_text(TEMPLATE)
    return executor_kube_config(template, monkeypatch)


def test_pod_is_template_then_dynamic_pod_then_override(kube_config):
    w = make_workload(task_id="t", run_id="manual__1", try_number=3, map_index=2)
    pod = build_worker_pod(w, kube_config=kube_config, scheduler_job_id="9", pod_name="d-t-abc")
    assert pod.metadata.name == "d-t-abc"
    assert pod.metadata.namespace == "airflow-workers"
    assert pod.metadata.labels["team"] == "data"  # from the template
    assert pod.metadata.labels["airflow-worker"] == "9"
    assert pod.metadata.labels["kubernetes_executor"] == "True"
    assert pod.metadata.labels["map_index"] == "2"
    assert pod.metadata.annotations == {
        "dag_id": w.ti.dag_id,
        "task_id": "t",
        "try_number": "3",
        "map_index": "2",
        "run_id": "manual__1",
    }
    assert pod.spec.service_account_name == "airflow-worker"  # from the template
    container = pod.spec.containers[0]
    assert container.image == "repo/airflow:3.3.2"  # worker_container_repository:tag beats the template
    assert container.args[:4] == [
        "python",
        "-m",
        "airflow.sdk.execution_time.execute_workload",
        "--json-string",
    ]


def test_launch_id_is_one_more_annotation_beside_upstreams(kube_config):
    """The launch id rides on its own annotation; upstream's labels and annotations
    (what its executor reads when it adopts a pod) are exactly those of a pod built without one."""
    from airflow_jobwatch.executors.pods import LAUNCH_ANNOTATION, launch_id_of

    w = make_workload(task_id="t", run_id="manual__1")
    plain = build_worker_pod(w, kube_config=kube_config, scheduler_job_id="9", pod_name="p")
    pod = build_worker_pod(w, kube_config=kube_config, scheduler_job_id="9", pod_name="p", launch_id="abc")
    assert pod.metadata.labels == plain.metadata.labels
    assert pod.metadata.annotations == {**plain.metadata.annotations, LAUNCH_ANNOTATION: "abc"}
    assert key_from_annotations(pod.metadata.annotations) == w.ti.key
    assert launch_id_of(pod.metadata.annotations, "ns", "p") == "abc"
    # A pod without one (upstream's, or launched before launch ids) is its own launch.
    assert launch_id_of(plain.metadata.annotations, "ns", "p") == "pod:ns/p"


def test_pod_override_image_and_namespace_win(kube_config):
    w = make_workload(task_id="t", image="custom/image:7", namespace="special")
    pod = build_worker_pod(w, kube_config=kube_config, scheduler_job_id="9", pod_name="p")
    assert pod.spec.containers[0].image == "custom/image:7"
    assert pod.metadata.namespace == "special"


def test_missing_template_is_a_clear_error(monkeypatch: pytest.MonkeyPatch):
    monkeypatch.setenv("AIRFLOW__KUBERNETES_EXECUTOR__POD_TEMPLATE_FILE", "")
    from airflow.providers.cncf.kubernetes.kube_config import KubeConfig

    with pytest.raises(ValueError, match="pod_template_file"):
        build_worker_pod(
            make_workload(task_id="t"), kube_config=KubeConfig(), scheduler_job_id="1", pod_name="p"
        )


def test_informer_config_from_jobwatch_section(monkeypatch: pytest.MonkeyPatch):
    monkeypatch.setenv("AIRFLOW__JOBWATCH__WATCH_TIMEOUT_SECONDS", "42")
    monkeypatch.setenv("AIRFLOW__JOBWATCH__WATCH_STALL_TIMEOUT_SECONDS", "7")
    monkeypatch.setenv("AIRFLOW__JOBWATCH__BACKOFF_MAX_SECONDS", "9")
    monkeypatch.setenv("AIRFLOW__JOBWATCH__RESYNC_INTERVAL_SECONDS", "0")
    cfg = informer_config_from_conf()
    assert cfg.watch_timeout_seconds == 42
    assert cfg.stall_timeout_seconds == 7
    assert cfg.backoff_max_seconds == 9
    assert cfg.resync_interval_seconds is None  # 0 disables the safety-net relist
    monkeypatch.setenv("AIRFLOW__JOBWATCH__RESYNC_INTERVAL_SECONDS", "120")
    assert informer_config_from_conf().resync_interval_seconds == 120


def test_api_error_parsing():
    err = ApiException(status=429, reason="Too Many Requests")
    err.body = '{"kind":"Status","message":"too many requests, please try again later","code":429}'
    err.headers = {"Retry-After": "3"}
    assert api_message(err) == "too many requests, please try again later"
    assert _retry_after(err) == 3.0
    plain = ApiException(status=503, reason="Service Unavailable")
    plain.body = "upstream connect error"
    plain.headers = {"Retry-After": "soon"}
    assert api_message(plain) == "upstream connect error"
    assert _retry_after(plain) is None


@pytest.mark.skipif(
    not AIRFLOW_V_3_2_PLUS, reason="a team's executor options: Airflow 3.2+ (compat.executor_conf)"
)
def test_team_aware_kubernetes_executor_config(monkeypatch: pytest.MonkeyPatch):
    """Airflow 3.2+ multi-team: a team's [kubernetes_executor] and [jobwatch] options win for its executor."""
    from airflow_jobwatch.executors.jobwatch_executor import JobWatchExecutor, cluster_config_from_conf

    monkeypatch.setenv("AIRFLOW__KUBERNETES_EXECUTOR__NAMESPACE", "shared")
    monkeypatch.setenv("AIRFLOW__KUBERNETES_EXECUTOR__IN_CLUSTER", "False")
    monkeypatch.setenv("AIRFLOW__TEAM_A___KUBERNETES_EXECUTOR__NAMESPACE", "team-a-workers")
    monkeypatch.setenv("AIRFLOW__TEAM_A___KUBERNETES_EXECUTOR__CONFIG_FILE", "/etc/team-a/kubeconfig")
    monkeypatch.setenv("AIRFLOW__TEAM_A___KUBERNETES_EXECUTOR__DELETE_WORKER_PODS", "False")
    monkeypatch.setenv("AIRFLOW__TEAM_A___CORE__PARALLELISM", "7")
    monkeypatch.setenv("AIRFLOW__TEAM_A___JOBWATCH__WATCH_TIMEOUT_SECONDS", "123")

    assert JobWatchExecutor.supports_multi_team
    team = JobWatchExecutor(team_name="team_a")
    assert team._namespaces() == ["team-a-workers"]
    assert team.kube_config.delete_worker_pods is False
    assert team.parallelism == 7
    assert cluster_config_from_conf(team.conf).config_file == "/etc/team-a/kubeconfig"
    assert informer_config_from_conf(team.conf).watch_timeout_seconds == 123

    other = JobWatchExecutor()
    assert other._namespaces() == ["shared"]
    assert other.kube_config.delete_worker_pods is True
    assert cluster_config_from_conf(other.conf).config_file is None
    assert informer_config_from_conf(other.conf).watch_timeout_seconds != 123


def test_non_numeric_jobwatch_option_is_a_clear_error(monkeypatch: pytest.MonkeyPatch):
    monkeypatch.setenv("AIRFLOW__JOBWATCH__WATCH_TIMEOUT_SECONDS", "five minutes")
    with pytest.raises(ValueError, match=r"\[jobwatch\] watch_timeout_seconds must be a number"):
        informer_config_from_conf()


@pytest.mark.parametrize("value", ["0", "2.5", "eight"])
def test_pod_creation_concurrency_is_checked_when_the_executor_starts(monkeypatch: pytest.MonkeyPatch, value):
    """A value the executor cannot use is refused when the scheduler builds it, naming the option, the
    value and what it accepts (it was silently raised to 1, or failed with a message of another form)."""
    from airflow.exceptions import AirflowConfigException

    from airflow_jobwatch.executors.jobwatch_executor import JobWatchExecutor

    monkeypatch.setenv("AIRFLOW__JOBWATCH__POD_CREATION_CONCURRENCY", value)
    with pytest.raises(
        AirflowConfigException, match=r"\[jobwatch\] pod_creation_concurrency .*(>= 1|whole number)"
    ):
        JobWatchExecutor()


def test_jobwatch_label_scheme_hides_pods_from_upstreams_selectors(kube_config):
    """worker_pod_labels = jobwatch: none of upstream's selectors (watcher, completed-pod cleanup) match."""
    from airflow_jobwatch.executors.pods import JOBWATCH_LABELS, label_scheme
    from airflow_jobwatch_testing.sandbox.selectors import parse_label_selector

    pod = build_worker_pod(
        make_workload(task_id="t"),
        kube_config=kube_config,
        scheduler_job_id="12",
        pod_name="p",
        labels=JOBWATCH_LABELS,
    )
    labels = pod.metadata.labels
    assert labels["airflow-jobwatch-worker"] == "12" and labels["jobwatch_executor"] == "True"
    assert "airflow-worker" not in labels and "kubernetes_executor" not in labels
    assert labels["dag_id"] == "jobwatch_synthetic" and labels["task_id"] == "t"
    upstream_watcher = parse_label_selector("airflow-worker=12,airflow_executor_done!=True")
    upstream_completed = parse_label_selector("kubernetes_executor=True,airflow-worker!=99")
    ours = parse_label_selector(JOBWATCH_LABELS.selector("12"))
    assert not upstream_watcher(labels) and not upstream_completed(labels)
    assert ours(labels)
    with pytest.raises(ValueError, match=r"worker_pod_labels must be one of \['jobwatch', 'upstream'\]"):
        label_scheme("kubernetes")


@pytest.mark.parametrize(
    ("statuses", "started"),
    [
        pytest.param([], False, id="no statuses yet"),
        pytest.param([{"state": {"waiting": {"reason": "ContainerCreating"}}}], False, id="creating"),
        pytest.param(
            # What the kubelet writes for a pod disrupted while its containers were being created.
            [
                {
                    "state": {
                        "terminated": {
                            "exitCode": 137,
                            "reason": "ContainerStatusUnknown",
                            "startedAt": None,
                            "finishedAt": "2026-12-04T03:34:25Z",
                        }
                    },
                    "lastState": {},
                }
            ],
            False,
            id="disrupted while creating",
        ),
        pytest.param([{"state": {"running": {"startedAt": "2026-12-04T03:34:25Z"}}}], True, id="running"),
        pytest.param(
            [{"state": {"terminated": {"exitCode": 137, "startedAt": "2026-12-04T03:34:25Z"}}}],
            True,
            id="ran then killed",
        ),
        pytest.param(
            [
                {
                    "state": {"waiting": {"reason": "CrashLoopBackOff"}},
                    "lastState": {"terminated": {"exitCode": 1}},
                }
            ],
            True,
            id="restarting",
        ),
        pytest.param([{"started": True, "state": {"waiting": {}}}], True, id="started true"),
        pytest.param(
            [{"restartCount": 2, "state": {"waiting": {"reason": "CrashLoopBackOff"}}}], True, id="restarted"
        ),
    ],
)
def test_containers_started(statuses, started):
    """Only a pod none of whose containers ever started is relaunched after a disruption; the watcher uses
    the one predicate of kube/meaning/states.py."""
    from airflow_jobwatch.executors.watcher.child import containers_started
    from airflow_jobwatch.kube.meaning import states

    assert containers_started is states.containers_started

    assert containers_started({"status": {"phase": "Failed", "containerStatuses": statuses}}) is started
    # Init containers count too (conservative: whatever of the pod ran, it is not relaunched).
    assert containers_started({"status": {"initContainerStatuses": statuses}}) is started
