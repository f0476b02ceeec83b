"""The task's secrets are masked in every line the triggerer writes into the task's log.

A connection password and a sensitive Variable, registered with the task's masker as the task runner
registers them while it renders ``env_vars``, are echoed by the pod into its log and its XCom result.
The operator defers; its trigger's kwargs go through Airflow's own encrypted store (``Trigger``) and come
back as the triggerer inflates them; the trigger ends the task: every line it writes shows ``***``, on
each supported Airflow minor. Without the secrets (an older operator's kwargs) it writes nothing and
resumes the task on a worker; the resume's event carries no ``env`` values.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import pytest
import structlog.testing
from airflow.providers.common.compat.sdk import TaskDeferred
from airflow.triggers.base import TaskSuccessEvent
from support.masking import registered

from airflow_jobwatch.ending import masking
from airflow_jobwatch.ending.end import end_from_triggerer
from airflow_jobwatch.triggers.job import JobTrigger

from .test_job_operator import FakeTI, make_context, make_operator

pytestmark = pytest.mark.timeout(120)

PASSWORD = "conn-pass-7Qx!z9"  # what `{{ conn.db.password }}` renders
TOKEN = "var-token-Kp4#w2"  # what `{{ var.value.api_token }}` renders (a sensitive Variable name)
SECRETS = (PASSWORD, TOKEN)
FERNET_KEY = "uOJ4sD4b8iJf3ZLlX7z9dOqdFvTTDvNa5ujqXl1J5Yk="


def _text(entries: list[dict[str, Any]]) -> str:
    """Everything the captured log entries hold, as text (message, arguments and keys)."""
    return "\n".join(json.dumps(e, default=str) for e in entries)


def _deferred_trigger(
    kubeconfig: Any, tmp_path: Any, *, xcom: str = "$DB_PASSWORD", **options: Any
) -> JobTrigger:
    return _deferred(kubeconfig, tmp_path, xcom=xcom, **options)[1]


def _deferred(
    kubeconfig: Any, tmp_path: Any, *, xcom: str = "$DB_PASSWORD", **options: Any
) -> tuple[Any, JobTrigger]:
    """The operator, and the trigger it deferred to."""
    path = tmp_path / "return.json"
    script = (
        'echo "connecting with $DB_PASSWORD"; echo "token=$API_TOKEN"; '
        f'printf \'{{"password": "%s"}}\' "{xcom}" > {path}'
    )
    op = make_operator(
        kubeconfig,
        cmds=["sh", "-c", script],
        env_vars={"DB_PASSWORD": PASSWORD, "API_TOKEN": TOKEN},
        deferrable=True,
        wait_until_job_complete=True,
        get_logs=True,
        do_xcom_push=True,
        xcom_path=str(path),
        on_finish_action="keep_pod",
        retries=0,
        **options,
    )
    with registered(PASSWORD), registered(TOKEN, name="api_token"), pytest.raises(TaskDeferred) as deferred:
        op.execute(make_context())
    return op, deferred.value.trigger


@pytest.fixture
def fernet_key(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """``[core] fernet_key`` set, and Airflow's Fernet built from it: 3.1 keeps the first one it built in
    a module global, 3.2 in a cache, 3.3 builds it each time."""
    from airflow.models import crypto

    def forget() -> None:
        if hasattr(crypto.get_fernet, "cache_clear"):
            crypto.get_fernet.cache_clear()
        if hasattr(crypto, "_fernet"):
            crypto._fernet = None

    monkeypatch.setenv("AIRFLOW__CORE__FERNET_KEY", FERNET_KEY)
    forget()
    yield
    forget()


def _through_airflows_store(trigger: JobTrigger) -> JobTrigger:
    """The trigger as the triggerer gets it: its kwargs stored by Airflow's ``Trigger`` model (what the
    execution API's defer route builds; encrypted with ``[core] fernet_key``) and read back."""
    from airflow.models.trigger import Trigger

    classpath, kwargs = trigger.serialize()
    row = Trigger(classpath=classpath, kwargs=kwargs)
    for secret in SECRETS:
        assert secret not in row.encrypted_kwargs  # stored encrypted, on every minor
    return JobTrigger(**row.kwargs)


async def test_every_line_the_trigger_writes_is_masked(
    sandbox: Any, kubeconfig: Any, tmp_path: Any, fernet_key: None
) -> None:
    deferred = _deferred_trigger(kubeconfig, tmp_path)
    assert sorted(set(SECRETS) & set(deferred.mask_secrets or [])) == sorted(SECRETS)
    trigger = _through_airflows_store(deferred)
    for shown in (repr(deferred), repr(trigger)):  # the triggerer logs a trigger by its repr
        assert not any(secret in shown for secret in SECRETS), shown
    payload = await trigger.wait()

    with structlog.testing.capture_logs() as entries:
        event = await end_from_triggerer(trigger, payload)

    assert isinstance(event, TaskSuccessEvent), event
    assert event.xcoms is not None and event.xcoms["return_value"] == {"password": PASSWORD}  # the value
    text = _text(entries)
    assert not [secret for secret in SECRETS if secret in text], text
    lines = [str(e.get("event")) for e in entries]
    assert any(line.endswith("] [base] connecting with ***") for line in lines), lines
    assert any(line.endswith("] [base] token=***") for line in lines), lines
    assert any(line.startswith("xcom result:") and '"password": "***"' in line for line in lines), lines


async def test_without_the_secrets_the_trigger_resumes_the_task_and_writes_nothing(
    sandbox: Any, kubeconfig: Any, tmp_path: Any
) -> None:
    deferred = _deferred_trigger(kubeconfig, tmp_path)
    classpath, kwargs = deferred.serialize()
    del kwargs[masking.KWARG]  # what an operator of an earlier release sent
    trigger = JobTrigger(**kwargs)
    payload = await trigger.wait()

    with structlog.testing.capture_logs() as entries:
        event = await end_from_triggerer(trigger, payload)

    assert event is None  # resumed on a worker, whose supervisor masks
    text = _text(entries)
    assert not [secret for secret in SECRETS if secret in text], text
    assert "] [base] " not in text and "xcom result" not in text, text


async def test_the_resume_event_carries_no_env_values(
    sandbox: Any, kubeconfig: Any, tmp_path: Any, fernet_key: None, monkeypatch: pytest.MonkeyPatch
) -> None:
    # A callback must run on a worker: the task resumes there, with the event Airflow logs whole. (The
    # event's ``xcom_result`` is the value as the pod wrote it: here it holds no secret.)
    deferred = _deferred_trigger(
        kubeconfig, tmp_path, xcom="no secret", on_success_callback=lambda context: None
    )
    assert deferred.end_task is None
    trigger = _through_airflows_store(deferred)
    trigger.task_instance = FakeTI()  # as in a triggerer, which sets the task instance
    monkeypatch.setattr("airflow_jobwatch.triggers.job.hold_resume", _no_hold)

    events = [event async for event in trigger.run()]

    assert len(events) == 1
    shown = repr(events[0])  # what "Trigger fired event" writes
    assert not [secret for secret in SECRETS if secret in shown], shown
    [container] = events[0].payload["job"]["spec"]["template"]["spec"]["containers"]
    assert {e["name"]: e["value"] for e in container["env"]} == {"DB_PASSWORD": "***", "API_TOKEN": "***"}
    assert events[0].payload["uid"] and events[0].payload["outcome"] == "success"  # what the resume reads


async def _no_hold(trigger: Any, hold_seconds: float | None = None) -> None:
    return None


async def test_a_result_holding_a_secret_is_masked_in_the_resume_event_and_read_from_the_pods(
    sandbox: Any, kubeconfig: Any, tmp_path: Any, fernet_key: None, monkeypatch: pytest.MonkeyPatch
) -> None:
    # A callback makes the task resume on a worker, with the event Airflow logs whole. On a cluster without
    # native sidecars the result travels in the event (the termination message): holding the connection's
    # password, it is masked there, and the worker reads the value from the pods.
    sandbox.set_native_sidecars(False)
    try:
        op, deferred = _deferred(kubeconfig, tmp_path, on_success_callback=lambda context: None)
        trigger = _through_airflows_store(deferred)
        trigger.task_instance = FakeTI()
        monkeypatch.setattr("airflow_jobwatch.triggers.job.hold_resume", _no_hold)

        [event] = [event async for event in trigger.run()]
    finally:
        sandbox.set_native_sidecars(True)

    assert PASSWORD not in repr(event), repr(event)  # what "Trigger fired event" writes
    assert event.payload[masking.XCOM_RESULT_MASKED] is True
    assert op.execute_complete(make_context(), event.payload) == {"password": PASSWORD}
