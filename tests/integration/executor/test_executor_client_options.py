"""JobWatchExecutor honours upstream's [kubernetes_executor] client options, and deployments' auth.

Each test runs a real task to its end through the executor (scheduler side + spawned watcher child)
against a sandbox serving HTTPS with a self-signed certificate:

* ``verify_ssl = False`` with a kubeconfig that carries no CA: upstream lists pods; ours once
  failed with CERTIFICATE_VERIFY_FAILED in both the scheduler's client and the watcher.
* ``ssl_ca_cert``: the CA comes from the option, not from the kubeconfig.
* ``in_cluster = True`` in a pod's environment (token + CA files, no kubeconfig).
* an unusable configuration fails ``start()`` with the reason (as upstream), no crash-looping watcher.
"""

from __future__ import annotations

import textwrap
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from types import SimpleNamespace
from typing import Any
from unittest import mock

import pytest
import structlog.testing
import yaml
from support.incluster import enter_pod
from support.workloads import make_workload

from airflow_jobwatch_testing.pod_template import pod_template_yaml
from airflow_jobwatch_testing.sandbox import SandboxThread

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
        if on_running is not None and ex.status()["running"] and ex.status()["tracked_pods"]:
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


# ---- upstream options: running_pod_log_lines, client_factory / async_client_factory are honoured (upstream's
# meaning, provider 10.25); those that are not are named in one warning at start(), with the reason.


def _warnings(entries: list[dict]) -> list[str]:
    out = []
    for e in entries:
        if e.get("log_level") == "warning":
            args = e.get("positional_args")
            out.append(str(e["event"]) % tuple(args) if args else str(e["event"]))
    return out


def test_unhonoured_options_are_named_in_one_warning_at_start(tls_kube, tmp_path, executor_env):
    kubeconfig = str(tmp_path / "kc")
    tls_kube.write_kubeconfig(kubeconfig)
    ex = executor_env(
        {
            "in_cluster": "False",
            "config_file": kubeconfig,
            "task_publish_max_retries": "3",
            "async_pod_creation": "True",
            "pod_launch_failure_retries": "1",  # upstream's default: not "set"
        }
    )
    with structlog.testing.capture_logs() as entries:
        ex.start()
    named = [w for w in _warnings(entries) if "not honoured" in w]
    assert len(named) == 1, _warnings(entries)
    assert "task_publish_max_retries = 3 (pod creation errors" in named[0]
    assert "async_pod_creation = True" in named[0]
    assert "pod_launch_failure_retries" not in named[0]


def test_nothing_unhonoured_set_no_warning(tls_kube, tmp_path, executor_env):
    kubeconfig = str(tmp_path / "kc")
    tls_kube.write_kubeconfig(kubeconfig)
    ex = executor_env({"in_cluster": "False", "config_file": kubeconfig})
    with structlog.testing.capture_logs() as entries:
        ex.start()
    assert not [w for w in _warnings(entries) if "not honoured" in w]


def _factories(tmp_path: Path, kubeconfig: str, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A module of client factories that build clients from ``kubeconfig`` and record each call in a
    file (the async one is called in the spawned watcher process)."""
    calls = tmp_path / "factory-calls"
    (tmp_path / "my_factories.py").write_text(
        textwrap.dedent(
            f"""
            import kubernetes
            import kubernetes_asyncio

            def build_client():
                with open({str(calls)!r}, "a") as fh:
                    fh.write("sync\\n")
                return kubernetes.client.CoreV1Api(kubernetes.config.new_client_from_config({kubeconfig!r}))

            async def build_async_client():
                with open({str(calls)!r}, "a") as fh:
                    fh.write("async\\n")
                client = await kubernetes_asyncio.config.new_client_from_config({kubeconfig!r})
                return kubernetes_asyncio.client.CoreV1Api(client)
            """
        )
    )
    monkeypatch.syspath_prepend(str(tmp_path))  # the spawned watcher inherits sys.path
    return calls


def test_client_factories_build_the_executor_and_watcher_clients(
    tls_kube, tmp_path, executor_env, monkeypatch
):
    kubeconfig = str(tmp_path / "kc")
    tls_kube.write_kubeconfig(kubeconfig)
    calls = _factories(tmp_path, kubeconfig, monkeypatch)
    ex = executor_env(
        {
            # what [kubernetes_executor] says cannot reach the sandbox: only the factories can
            "in_cluster": "False",
            "config_file": str(tmp_path / "no-such-kubeconfig"),
            "client_factory": "my_factories.build_client",
            "async_client_factory": "my_factories.build_async_client",
        }
    )
    assert _run_one_task(ex)[0] == "success"
    assert ex.status()["watcher_healthy"] is True
    assert sorted(set(calls.read_text().split())) == ["async", "sync"]


def test_client_factory_without_async_factory_fails_start(tls_kube, tmp_path, executor_env, monkeypatch):
    from airflow.exceptions import AirflowConfigException

    kubeconfig = str(tmp_path / "kc")
    tls_kube.write_kubeconfig(kubeconfig)
    _factories(tmp_path, kubeconfig, monkeypatch)
    ex = executor_env({"in_cluster": "False", "client_factory": "my_factories.build_client"})
    with pytest.raises(AirflowConfigException, match="async_client_factory must be set too"):
        ex.start()
    ex = executor_env({"in_cluster": "False", "client_factory": "my_factories.nope"})
    with pytest.raises(
        AirflowConfigException, match=r"client_factory = 'my_factories.nope' cannot be imported"
    ):
        ex.start()
    assert ex.supervisor is None


def test_running_pod_log_lines_is_the_tail_shown_for_a_running_task(tls_kube, tmp_path, executor_env):
    kubeconfig = str(tmp_path / "kc")
    tls_kube.write_kubeconfig(kubeconfig)
    ex = executor_env({"in_cluster": "False", "config_file": kubeconfig, "running_pod_log_lines": "3"})
    ex.start()
    w = make_workload(task_id="chatty", command="for i in 1 2 3 4 5 6 7 8; do echo line-$i; done; sleep 60")
    ex.queue_workload(w, session=mock.sentinel.unused_session)
    ti = SimpleNamespace(
        key=w.ti.key,
        dag_id=w.ti.dag_id,
        task_id="chatty",
        run_id=w.ti.run_id,
        map_index=-1,
        try_number=1,
        queued_by_job_id=7,
        executor_config=None,
    )
    deadline = time.monotonic() + 60
    while True:
        ex.heartbeat()
        messages, logs = ex.get_task_log(ti, 1)
        if logs and "line-8" in logs[0]:
            break
        assert time.monotonic() < deadline, (messages, logs)
        time.sleep(0.2)
    assert logs[0].split() == ["line-6", "line-7", "line-8"]
    assert any("(last 3 lines)" in m for m in messages)


def test_running_pod_log_lines_must_be_positive(tls_kube, tmp_path, executor_env):
    ex = executor_env({"running_pod_log_lines": "0"})
    with pytest.raises(
        ValueError, match=r"running_pod_log_lines must be a whole number greater than 0, got '0'"
    ):
        _ = ex.running_pod_log_lines
