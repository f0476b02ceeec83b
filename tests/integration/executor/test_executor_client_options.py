"""JobWatchExecutor honours upstream's [kubernetes_executor] client options, and deployments' auth.

Each test runs a real task to its end through the executor (scheduler side + spawned watcher child)
against a sandbox serving HTTPS with a self-signed certificate:

* ``verify_ssl = False`` with a kubeconfig that carries no CA: upstream lists pods; before issue 12 ours
  failed with CERTIFICATE_VERIFY_FAILED in both the scheduler's client and the watcher.
* ``ssl_ca_cert``: the CA comes from the option, not from the kubeconfig.
* ``in_cluster = True`` in a pod's environment (token + CA files, no kubeconfig).
* an unusable configuration fails ``start()`` with the reason (as upstream), no crash-looping watcher.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any
from unittest import mock

import pytest
import yaml
from support.incluster import enter_pod
from support.workloads import make_workload

from airflow_jobwatch.devtools.pod_template import pod_template_yaml
from airflow_jobwatch.sandbox import SandboxThread

pytestmark = pytest.mark.timeout(180)


@pytest.fixture
def tls_kube(tmp_path: Path) -> Iterator[SandboxThread]:
    with SandboxThread(bookmark_interval=1.0, tls=True) as sb:
        yield sb


def _kubeconfig_without_ca(sb: SandboxThread, path: Path) -> str:
    sb.write_kubeconfig(path)
    config = yaml.safe_load(path.read_text())
    for cluster in config["clusters"]:
        cluster["cluster"].pop("certificate-authority-data", None)
        cluster["cluster"].pop("certificate-authority", None)
    path.write_text(yaml.safe_dump(config))
    return str(path)


@pytest.fixture
def executor_env(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Callable[[dict[str, str]], Any]:
    template = tmp_path / "pod_template.yaml"
    template.write_text(pod_template_yaml())
    created: list[Any] = []

    def make(options: dict[str, str]) -> Any:
        env = {
            "AIRFLOW__KUBERNETES_EXECUTOR__NAMESPACE": "default",
            "AIRFLOW__KUBERNETES_EXECUTOR__POD_TEMPLATE_FILE": str(template),
            "AIRFLOW__KUBERNETES_EXECUTOR__DELETE_WORKER_PODS": "True",
            "AIRFLOW__LOGGING__BASE_LOG_FOLDER": str(tmp_path / "logs"),
            "AIRFLOW__JOBWATCH__BACKOFF_INITIAL_SECONDS": "0.1",
            "AIRFLOW__JOBWATCH__BACKOFF_MAX_SECONDS": "1",
            "AIRFLOW__JOBWATCH__UNHEALTHY_AFTER_SECONDS": "2",
            "AIRFLOW__JOBWATCH__WATCHER_UNRESPONSIVE_AFTER_SECONDS": "5",
            "AIRFLOW__JOBWATCH__EXECUTOR_STATUS_FILE": str(tmp_path / "status.json"),
            **{f"AIRFLOW__KUBERNETES_EXECUTOR__{k.upper()}": v for k, v in options.items()},
        }
        for k, v in env.items():
            monkeypatch.setenv(k, v)
        from airflow_jobwatch.executors.jobwatch_executor import JobWatchExecutor

        ex = JobWatchExecutor(parallelism=4)
        ex.job_id = "7"
        created.append(ex)
        return ex

    yield make
    for ex in created:
        if ex.supervisor is not None:
            ex.end()


def _run_one_task(
    ex: Any, *, timeout: float = 90, command: str = "exit 0", on_running: Callable[[], None] | None = None
) -> tuple[str, Any]:
    ex.start()
    w = make_workload(task_id="t", command=command)
    ex.queue_workload(w, session=mock.sentinel.unused_session)
    deadline = time.monotonic() + timeout
    while True:
        ex.heartbeat()
        if on_running is not None and ex.status()["running"] and ex._pods:
            on_running()
            on_running = None
        for key, (state, info) in ex.get_event_buffer().items():
            if key.task_id == "t" and str(state) in ("success", "failed"):
                return str(state), info
        assert time.monotonic() < deadline, f"no terminal state; status: {ex.status()}"
        time.sleep(0.1)


def test_verify_ssl_false_against_a_self_signed_server(tls_kube, tmp_path, executor_env):
    kubeconfig = _kubeconfig_without_ca(tls_kube, tmp_path / "kc-no-ca")
    ex = executor_env({"in_cluster": "False", "config_file": kubeconfig, "verify_ssl": "False"})
    assert _run_one_task(ex)[0] == "success"
    assert ex.status()["watcher_healthy"] is True


def test_ssl_ca_cert_option_supplies_the_ca(tls_kube, tmp_path, executor_env):
    kubeconfig = _kubeconfig_without_ca(tls_kube, tmp_path / "kc-no-ca")
    ca = tmp_path / "ca.pem"
    ca.write_bytes(tls_kube.sandbox.ca_pem)
    ex = executor_env({"in_cluster": "False", "config_file": kubeconfig, "ssl_ca_cert": str(ca)})
    assert _run_one_task(ex)[0] == "success"


def test_in_cluster_executor_and_watcher(tls_kube, tmp_path, executor_env, monkeypatch):
    enter_pod(tls_kube, tmp_path / "sa", monkeypatch)
    ex = executor_env({"in_cluster": "True"})
    assert _run_one_task(ex)[0] == "success"


def test_in_cluster_token_rotation_during_a_task(tls_kube, tmp_path, executor_env, monkeypatch):
    """The kubelet rotates the scheduler's token while a task runs: the task's end is still reported
    (the watcher reconnects with the new token), and the scheduler's own client follows too."""
    from support.incluster import rotate_cluster_token, rotate_token

    token_file = enter_pod(tls_kube, tmp_path / "sa", monkeypatch)
    ex = executor_env({"in_cluster": "True"})

    def rotate() -> None:
        rotate_token(token_file, rotate_cluster_token(tls_kube, token_file.read_text()))
        tls_kube.drop_watches()

    state, _ = _run_one_task(ex, command="sleep 2; exit 0", on_running=rotate)
    assert state == "success"
    assert ex.status()["watcher_access_denied"] is None


def test_unusable_configuration_fails_start_with_the_reason(tmp_path, executor_env, monkeypatch):
    from airflow.exceptions import AirflowConfigException

    ex = executor_env({"in_cluster": "False", "config_file": str(tmp_path / "missing-kubeconfig")})
    with pytest.raises(AirflowConfigException, match="cannot start.*missing-kubeconfig.*does not exist"):
        ex.start()
    assert ex.supervisor is None  # no watcher process was started

    monkeypatch.delenv("KUBERNETES_SERVICE_HOST", raising=False)
    ex = executor_env({"in_cluster": "True"})
    with pytest.raises(
        AirflowConfigException, match="cannot start.*in_cluster=True.*KUBERNETES_SERVICE_HOST"
    ):
        ex.start()


def test_request_args_and_retries_reach_the_clients(tmp_path, tls_kube, executor_env):
    kubeconfig = str(tmp_path / "kc")
    tls_kube.write_kubeconfig(kubeconfig)
    ex = executor_env(
        {
            "in_cluster": "False",
            "config_file": kubeconfig,
            "kube_client_request_args": '{"_request_timeout": [3, 7]}',
            "api_client_retry_configuration": '{"total": 2, "backoff_factor": 0.1}',
            "tcp_keep_idle": "33",
        }
    )
    ex.start()
    assert ex._create_args["_request_timeout"] == (3, 7)
    configuration = ex.core_v1.api_client.configuration
    assert configuration.retries.total == 2
    assert any(opt[2] == 33 for opt in configuration.socket_options)  # TCP_KEEPIDLE
    assert ex.supervisor is not None
    cluster = next(iter(ex.supervisor._slots.values())).spec.cluster
    assert cluster.request_timeout == (3.0, 7.0)
    assert cluster.tcp_keepalive is not None and cluster.tcp_keepalive.idle == 33
