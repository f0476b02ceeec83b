"""Upstream's KubernetesJobOperator (cncf.kubernetes 10.25.0) and ours, run on the same DAG-author
scenarios against the same sandbox in the same test, compared on what a user sees:

* the task's final state (success, or failed with an AirflowException) and its return value;
* the XCom keys and values (``job_name``, ``job_namespace``, ``job``);
* the Job object afterwards: whether it exists, its labels, its spec;
* the task-log lines of the containers (pod/container prefixes aside);
* which of the Job's pods remain afterwards.

Each scenario runs waiting in the worker and deferred; deferred, the trigger's ``run()`` is driven to
its event here (what the triggerer does) and the event goes to ``execute_complete``.

Two things are done for upstream so that what is compared is behaviour, not the sandbox's limits:

* Upstream lists the Job's pods right after creating it and fails if the Job controller has not made
  them yet (apache/airflow#70585). Its ``create_job`` is wrapped to return once the pods exist.
* Upstream reads XCom through ``pods/exec`` into an ``alpine`` sidecar, which the sandbox does not
  serve; the XCom scenarios check ours against the value upstream returns for the same file.

Every difference these tests accept is listed, with its reason, in docs/migration.md.
"""

from __future__ import annotations

import asyncio
import logging
import re
import threading
from collections import Counter
from dataclasses import dataclass, field
from typing import Any

import pytest
import structlog.testing
from airflow.providers.cncf.kubernetes.operators.job import (
    KubernetesJobOperator as UpstreamKubernetesJobOperator,
)
from airflow.providers.common.compat.sdk import AirflowException, TaskDeferred
from kubernetes.client import models as k8s

from airflow_jobwatch.compat import PARITY_PROVIDER_VERSION, cncf_kubernetes_version
from airflow_jobwatch.operators.job import KubernetesJobOperator as OurKubernetesJobOperator

from .conftest import NS
from .test_job_operator import FakeDag, FakeTI, _rendered, wait_until_sync

pytestmark = [
    pytest.mark.timeout(240),
    pytest.mark.skipif(
        cncf_kubernetes_version() < PARITY_PROVIDER_VERSION,
        reason="parity is shown against cncf.kubernetes 10.25 (Airflow 3.3's); older releases differ on their own",
    ),
]

UPSTREAM, OURS = "upstream", "ours"
WORKER, DEFERRED = "worker", "deferred"

#: Labels the API server adds to a Job and its template (not the operator's doing).
_SERVER_LABELS = re.compile(r"(^|/)(controller-uid|job-name)$")


@dataclass
class Outcome:
    state: str  # success / failed / error:<type>
    value: Any = None
    error: str = ""
    xcoms: dict[str, Any] = field(default_factory=dict)
    log_lines: Counter[tuple[str, str]] = field(default_factory=Counter)
    job_name: str | None = None
    job: dict[str, Any] | None = None  # the Job in the sandbox afterwards
    live_pods: int = 0

    def user_labels(self) -> dict[str, str]:
        labels = ((self.job or {}).get("metadata") or {}).get("labels") or {}
        # A Job created without labels gets its template's (SetDefaults_Job), run_id included
        return {
            k: ("<run_id>" if k == "run_id" else v) for k, v in labels.items() if not _SERVER_LABELS.search(k)
        }

    def spec(self) -> dict[str, Any]:
        spec = dict((self.job or {}).get("spec") or {})
        template = spec.pop("template", {})
        spec.pop("selector", None)
        labels = (template.get("metadata") or {}).get("labels") or {}
        containers = (template.get("spec") or {}).get("containers") or []
        return {
            **spec,
            # each variant runs as its own dag run (the same try would adopt the other's Job), so run_id differs
            "template_labels": {
                k: ("<run_id>" if k == "run_id" else v)
                for k, v in labels.items()
                if not _SERVER_LABELS.search(k)
            },
            "containers": [(c["name"], c.get("command")) for c in containers],
        }


def _upstream_waits_for_pods(monkeypatch: pytest.MonkeyPatch, sandbox: Any, kubeconfig: Any) -> None:
    # upstream's async hook (its trigger) ignores config_file without a connection and loads the
    # default kubeconfig, whose location kubernetes_asyncio read from KUBECONFIG at import
    import kubernetes_asyncio.config.kube_config as async_kube_config

    monkeypatch.setattr(async_kube_config, "KUBE_CONFIG_DEFAULT_LOCATION", str(kubeconfig))
    original = UpstreamKubernetesJobOperator.create_job

    def create_job(self: Any, job_request_obj: k8s.V1Job) -> k8s.V1Job:
        job = original(self, job_request_obj)
        if self.wait_until_job_complete:
            name = job.metadata.name
            want = min(self.parallelism or 1, job.spec.completions or self.parallelism or 1)
            wait_until_sync(
                lambda: len(_pods_of(sandbox, name)) >= want, f"the pods of {name} (for upstream's discovery)"
            )
        return job

    monkeypatch.setattr(UpstreamKubernetesJobOperator, "create_job", create_job)


def _pods_of(sandbox: Any, job_name: str) -> list[dict[str, Any]]:
    return [
        p
        for p in sandbox.objects("pods", NS)
        if (p["metadata"].get("labels") or {}).get("job-name") == job_name
    ]


def _container_lines(variant: str, text: str) -> Counter[tuple[str, str]]:
    """(container, text) of every container log line: ours ``[pod] [container] text``, upstream's
    ``[container] text`` (worker) or ``[container] logs: text`` (deferred)."""
    pattern = (
        re.compile(r"^\[[^\]]+\] \[(?P<c>[^\]]+)\] (?P<t>.*)$")
        if variant == OURS
        else re.compile(r"^\[(?P<c>[a-z0-9-]+)\] (?:logs: )?(?P<t>.*)$")
    )
    out: Counter[tuple[str, str]] = Counter()
    for line in text.splitlines():
        m = pattern.match(line)
        if m and m["t"]:
            out[(m["c"], m["t"])] += 1
    return out


class _Records(logging.Handler):
    """Upstream's PodManager writes container logs through stdlib logging, not structlog."""

    def __init__(self) -> None:
        super().__init__(logging.INFO)
        self.lines: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.lines.append(record.getMessage())


async def _first_event(trigger: Any) -> dict[str, Any]:
    async for event in trigger.run():
        return event.payload
    raise AssertionError("the trigger ended without an event")


def run(variant: str, mode: str, kubeconfig: Any, sandbox: Any, **kwargs: Any) -> Outcome:
    cls = UpstreamKubernetesJobOperator if variant == UPSTREAM else OurKubernetesJobOperator
    kwargs.setdefault("image", "busybox:1.36")
    kwargs.setdefault("backoff_limit", 0)
    kwargs.setdefault("wait_until_job_complete", True)
    op = cls(
        task_id="task",
        namespace=NS,
        kubernetes_conn_id=None,
        config_file=str(kubeconfig),
        job_poll_interval=0.5,
        deferrable=mode == DEFERRED,
        **kwargs,
    )
    ti = FakeTI()
    context = {"ti": ti, "run_id": f"run-{variant}-{mode}", "dag": FakeDag()}
    outcome = Outcome(state="success")
    records = _Records()
    root = logging.getLogger()
    root.addHandler(records)
    with structlog.testing.capture_logs() as logs:
        try:
            try:
                outcome.value = op.execute(context)
            except TaskDeferred as deferred:
                event = asyncio.run(asyncio.wait_for(_first_event(deferred.trigger), 120))
                outcome.value = op.execute_complete(context, event)
        except AirflowException as e:
            outcome.state, outcome.error = "failed", str(e)
    root.removeHandler(records)
    outcome.xcoms = dict(ti.xcoms)
    outcome.log_lines = _container_lines(variant, _rendered(logs) + "\n" + "\n".join(records.lines))
    outcome.job_name = ti.xcoms.get("job_name")
    if outcome.job_name:
        outcome.job = sandbox.get_object("jobs", NS, outcome.job_name)
        outcome.live_pods = sum(
            1 for p in _pods_of(sandbox, outcome.job_name) if not p["metadata"].get("deletionTimestamp")
        )
    return outcome


def both(mode: str, kubeconfig: Any, sandbox: Any, monkeypatch: pytest.MonkeyPatch, **kwargs: Any):
    _upstream_waits_for_pods(monkeypatch, sandbox, kubeconfig)
    return run(UPSTREAM, mode, kubeconfig, sandbox, **kwargs), run(OURS, mode, kubeconfig, sandbox, **kwargs)


def assert_same(up: Outcome, ours: Outcome, *, logs: bool = True, pods: bool = True) -> None:
    """What a user sees is the same."""
    assert (ours.state, ours.value) == (up.state, up.value), (ours.error, up.error)
    assert set(ours.xcoms) == set(up.xcoms)
    if up.job_name:
        assert ours.job_name.startswith("job-task-") and up.job_name.startswith("job-task-")
        assert ours.xcoms["job_namespace"] == up.xcoms["job_namespace"] == NS
        up_job, our_job = up.xcoms.get("job"), ours.xcoms.get("job")
        assert (up_job is None) == (our_job is None)
        if up_job is not None:
            assert our_job["metadata"]["name"] == ours.job_name
            assert our_job["spec"]["parallelism"] == up_job["spec"]["parallelism"]
            assert our_job["spec"]["completions"] == up_job["spec"]["completions"]
    assert (ours.job is None) == (up.job is None)
    assert ours.user_labels() == up.user_labels()
    if up.job is not None:
        assert ours.spec() == up.spec()
    if pods:
        assert ours.live_pods == up.live_pods
    if logs:
        assert ours.log_lines == up.log_lines


MODES = pytest.mark.parametrize("mode", [WORKER, DEFERRED])


@MODES
def test_success(sandbox, kubeconfig, monkeypatch, mode):
    up, ours = both(mode, kubeconfig, sandbox, monkeypatch, cmds=["sh", "-c", "echo hello"], get_logs=True)
    assert up.state == "success" and up.job is not None  # upstream keeps the Job
    assert up.live_pods == 0  # ... and deletes its pods (on_finish_action="delete_pod")
    assert_same(up, ours)
    assert ours.log_lines == Counter({("base", "hello"): 1})


@MODES
def test_failure_with_backoff(sandbox, kubeconfig, monkeypatch, mode):
    up, ours = both(
        mode,
        kubeconfig,
        sandbox,
        monkeypatch,
        cmds=["sh", "-c", "echo failing; exit 3"],
        backoff_limit=1,
        get_logs=True,
    )
    assert up.state == "failed"
    assert_same(up, ours, pods=False, logs=False)
    # Deliberate differences (docs/migration.md): upstream's on_finish_action and get_logs cover the
    # pods it found when it started waiting, so the retried pod stays and its log is not written;
    # deferred, upstream writes no log at all for a failed Job. Ours covers every pod of the Job.
    assert (up.live_pods, ours.live_pods) == (1, 0)
    assert ours.log_lines == Counter({("base", "failing"): 2})
    assert up.log_lines == (Counter({("base", "failing"): 1}) if mode == WORKER else Counter())


@MODES
@pytest.mark.parametrize("indexed", [False, True], ids=["non-indexed", "indexed"])
def test_parallelism_3_completions_3(sandbox, kubeconfig, monkeypatch, mode, indexed):
    up, ours = both(
        mode,
        kubeconfig,
        sandbox,
        monkeypatch,
        cmds=["sh", "-c", "sleep 0.5; echo one-of-three"],
        parallelism=3,
        completions=3,
        completion_mode="Indexed" if indexed else None,
    )
    assert up.state == "success"
    assert_same(up, ours, logs=False)  # get_logs off: nothing to compare


@MODES
def test_create_only(sandbox, kubeconfig, monkeypatch, mode):
    """Deferrable without wait_until_job_complete: both warn and return once the Job exists."""
    up, ours = both(
        mode, kubeconfig, sandbox, monkeypatch, cmds=["sleep", "2"], wait_until_job_complete=False
    )
    assert up.state == "success" and up.value is None and up.job is not None
    assert_same(up, ours)
    # upstream's `job` XCom is the request it sent; ours is the Job the server created (uid, status...)
    assert ours.xcoms["job"]["metadata"]["uid"] == ours.job["metadata"]["uid"]


@MODES
@pytest.mark.parametrize("action", ["delete_pod", "delete_succeeded_pod", "keep_pod"])
@pytest.mark.parametrize("exit_code", [0, 1], ids=["succeeds", "fails"])
def test_on_finish_action(sandbox, kubeconfig, monkeypatch, mode, action, exit_code):
    up, ours = both(
        mode,
        kubeconfig,
        sandbox,
        monkeypatch,
        cmds=["sh", "-c", f"exit {exit_code}"],
        on_finish_action=action,
    )
    assert_same(up, ours)


@MODES
def test_get_logs_300_lines_two_containers(sandbox, kubeconfig, monkeypatch, mode):
    side = k8s.V1Container(
        name="side",
        image="busybox:1.36",
        command=["sh", "-c", "for i in $(seq 1 300); do echo side-$i; done"],
    )
    up, ours = both(
        mode,
        kubeconfig,
        sandbox,
        monkeypatch,
        cmds=["sh", "-c", "for i in $(seq 1 300); do echo base-line-$i; done"],
        full_pod_spec=k8s.V1Pod(spec=k8s.V1PodSpec(containers=[k8s.V1Container(name="base"), side])),
        container_logs=True,
        get_logs=True,
    )
    assert_same(up, ours, logs=False)
    base = Counter({("base", f"base-line-{i}"): 1 for i in range(1, 301)})
    sides = Counter({("side", f"side-{i}"): 1 for i in range(1, 301)})
    if mode == WORKER:
        assert up.log_lines == ours.log_lines == base + sides
    else:
        # Deferred, upstream writes the base container's log only, whatever container_logs says;
        # ours honours container_logs in both modes (docs/migration.md).
        assert up.log_lines == base
        assert ours.log_lines == base + sides


@MODES
def test_user_label_colliding_with_a_try_label(sandbox, kubeconfig, monkeypatch, mode):
    up, ours = both(
        mode, kubeconfig, sandbox, monkeypatch, cmds=["true"], labels={"task_id": "mine", "team": "x"}
    )
    assert up.state == "success"
    assert up.user_labels() == {"task_id": "mine", "team": "x"}  # the Job's labels are the user's
    assert_same(up, ours)


@MODES
def test_user_try_number_label(sandbox, kubeconfig, monkeypatch, mode):
    """Upstream looks for the Job's pods with the user's ``try_number`` label, which the pods do not
    carry (the try's own value wins on the pod), finds none and fails; ours waits on the Job itself."""
    up, ours = both(mode, kubeconfig, sandbox, monkeypatch, cmds=["true"], labels={"try_number": "x"})
    assert up.state == "failed" and "No pods running with labels" in up.error
    assert ours.state == "success"
    assert ours.user_labels() == up.user_labels() == {"try_number": "x"}


@MODES
def test_parallelism_0(sandbox, kubeconfig, monkeypatch, mode):
    up, ours = both(mode, kubeconfig, sandbox, monkeypatch, cmds=["true"], parallelism=0)
    assert up.state == "failed" and "parallelism cannot be less than 1" in up.error
    assert ours.error == up.error
    assert_same(up, ours)
    assert not sandbox.objects("jobs", NS)


@MODES
@pytest.mark.parametrize("size", [20, 10 * 1024], ids=["small", "10KiB"])
def test_do_xcom_push(sandbox, kubeconfig, monkeypatch, mode, size, tmp_path):
    """Ours only (upstream needs pods/exec): the value upstream would return for the same file, read
    from the native sidecar's log whatever its size."""
    path = tmp_path / "return.json"
    value = {"data": "z" * size}
    op_kwargs: dict[str, Any] = dict(
        cmds=["sh", "-c", f'echo \'{{"data": "{"z" * size}"}}\' > {path}'],
        do_xcom_push=True,
        xcom_path=str(path),
    )
    ours = run(OURS, mode, kubeconfig, sandbox, **op_kwargs)
    assert (ours.state, ours.value) == ("success", value)
    assert ours.job is not None and ours.live_pods == 0


@pytest.mark.parametrize("policy", ["Foreground", "Background", "Orphan"])
def test_on_kill_with_each_propagation_policy(sandbox, kubeconfig, monkeypatch, policy):
    """The worker is told to stop while it waits: on_kill runs while execute() is blocked waiting."""
    _upstream_waits_for_pods(monkeypatch, sandbox, kubeconfig)
    results = {}
    for variant in (UPSTREAM, OURS):
        cls = UpstreamKubernetesJobOperator if variant == UPSTREAM else OurKubernetesJobOperator
        op = cls(
            task_id="task",
            namespace=NS,
            kubernetes_conn_id=None,
            config_file=str(kubeconfig),
            image="busybox:1.36",
            cmds=["sleep", "60"],
            backoff_limit=0,
            wait_until_job_complete=True,
            job_poll_interval=0.5,
            on_kill_propagation_policy=policy,
            termination_grace_period=0,
        )
        ti = FakeTI()
        context = {"ti": ti, "run_id": f"kill-{variant}", "dag": FakeDag()}
        errors: list[BaseException] = []

        def execute(op=op, context=context, errors=errors) -> None:
            try:
                op.execute(context)
            except BaseException as e:
                errors.append(e)

        worker = threading.Thread(target=execute, daemon=True)
        worker.start()
        wait_until_sync(lambda ti=ti: "job_name" in ti.xcoms, "the Job's creation", limit=60)
        name = ti.xcoms["job_name"]
        wait_until_sync(lambda name=name: bool(_pods_of(sandbox, name)), "its pod", limit=60)
        op.on_kill()
        wait_until_sync(
            lambda name=name: sandbox.get_object("jobs", NS, name) is None, "the Job's deletion", limit=60
        )
        worker.join(60)
        live = [p for p in _pods_of(sandbox, name) if not p["metadata"].get("deletionTimestamp")]
        results[variant] = (worker.is_alive(), bool(errors), len(live))
    assert results[OURS] == results[UPSTREAM], results
    assert results[UPSTREAM][0] is False  # the blocked execute() ended
