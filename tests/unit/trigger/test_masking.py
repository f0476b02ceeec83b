"""The task's secrets in the trigger: what the worker's masker held comes back whole, every line a trigger
logs is masked with Airflow's own masker, the trigger's repr never shows them, and a resume's ``job``
carries no env value."""

from __future__ import annotations

import copy
import re
from typing import Any

import pytest
import structlog.testing
from hypothesis import given, settings
from hypothesis import strategies as st
from support.masking import registered

from airflow_jobwatch.ending import masking
from airflow_jobwatch.triggers.job import JobTrigger


@settings(max_examples=300, deadline=None)
@given(st.text(min_size=1, max_size=40))
def test_a_value_comes_back_whole_from_its_masker_pattern(value: str) -> None:
    # what Airflow's add_mask stores (re.escape of the value), read back by capture()
    assert masking._ESCAPED.sub(r"\1", re.escape(value)) == value


@pytest.mark.parametrize(
    ("values", "known"),
    [
        (None, False),  # kwargs of an operator that did not capture them
        ("s3cret-value", False),
        (["ok-value", 3], False),
        ([], True),  # known: the task has none
        (["s3cret-value"], True),
    ],
)
def test_secrets_are_known_only_from_a_list_of_strings(values: Any, known: bool) -> None:
    assert (masking.TaskSecrets.from_kwargs(values) is not None) is known


def test_capture_reads_what_the_task_runner_registered_on_this_airflow() -> None:
    """``capture`` reads the masker through Airflow's private module and function (no public API lists
    what a masker holds): this pins it on each supported minor (CI runs the unit tests on 3.1, 3.2, 3.3)."""
    with registered("conn-pass-7Qx!z9"), registered("var-token-Kp4#w2", name="api_token"):
        captured = masking.capture()
    assert captured is not None, "no secrets masker found: see masking._MASKER_MODULES"
    assert {"conn-pass-7Qx!z9", "var-token-Kp4#w2"} <= set(captured)
    assert "conn-pass-7Qx!z9" not in (masking.capture() or [])  # taken out again: nothing else leaks


def test_every_level_masks_the_formatted_line() -> None:
    secrets = masking.TaskSecrets(["hunter2-secret", "a.b*c(d)"])
    log = secrets.log(structlog.get_logger())
    with structlog.testing.capture_logs() as entries:
        log.info("[%s] [%s] %s", "pod", "base", "password=hunter2-secret")
        log.warning(
            "split %s",
            "across hunter2-",
        )  # the value is not whole in either part alone
        log.error("regex characters a.b*c(d) are literal; a-b-c-d is not masked")
        log.info("bad format %d", "a.b*c(d)")  # the arguments are still written, masked
    events = [e["event"] for e in entries]
    assert events == [
        "[pod] [base] password=***",
        "split across hunter2-",
        "regex characters *** are literal; a-b-c-d is not masked",
        "bad format %d ***",
    ]
    assert [e["log_level"] for e in entries] == ["info", "warning", "error", "info"]


def test_without_values_the_logger_is_the_triggers_own() -> None:
    log = structlog.get_logger()
    assert masking.TaskSecrets([]).log(log) is log


def test_the_trigger_logs_masked_and_its_repr_hides_the_values() -> None:
    trigger = JobTrigger("job", "default", mask_secrets=["hunter2-secret"])
    with structlog.testing.capture_logs() as entries:
        trigger.log.info("echo %s", "hunter2-secret")
    assert [e["event"] for e in entries] == ["echo ***"]
    assert "hunter2-secret" not in repr(trigger) and "<1 masked values>" in repr(trigger)
    _, kwargs = trigger.serialize()
    assert JobTrigger(**kwargs).mask_secrets == ["hunter2-secret"]  # the round trip keeps them


JOB: dict[str, Any] = {
    "metadata": {"name": "job", "uid": "u1"},
    "spec": {
        "template": {
            "spec": {
                "init_containers": [{"name": "init", "env": [{"name": "A", "value": "init-secret"}]}],
                "containers": [
                    {
                        "name": "base",
                        "env": [
                            {"name": "PASSWORD", "value": "p4ssw0rd", "value_from": None},
                            {
                                "name": "FROM_SECRET",
                                "value": None,
                                "value_from": {"secret_key_ref": {"name": "db", "key": "password"}},
                            },
                        ],
                    },
                    {"name": "sidecar"},
                ],
            }
        }
    },
    "status": {"succeeded": 1},
}


def test_the_jobs_env_values_are_redacted_and_references_kept() -> None:
    before = copy.deepcopy(JOB)
    job = masking.redact_job_env(JOB)
    assert JOB == before  # the cached Job is not changed
    assert job is not None
    spec = job["spec"]["template"]["spec"]
    assert spec["init_containers"][0]["env"] == [{"name": "A", "value": "***"}]
    assert spec["containers"][0]["env"] == [
        {"name": "PASSWORD", "value": "***", "value_from": None},
        {
            "name": "FROM_SECRET",
            "value": None,
            "value_from": {"secret_key_ref": {"name": "db", "key": "password"}},
        },
    ]
    assert spec["containers"][1] == {"name": "sidecar"}
    assert {k: v for k, v in job.items() if k != "spec"} == {k: v for k, v in JOB.items() if k != "spec"}


@pytest.mark.parametrize("job", [None, {}, {"spec": {}}, {"metadata": {"name": "projected"}}])
def test_a_job_without_a_pod_template_is_unchanged(job: Any) -> None:
    assert masking.redact_job_env(job) is job


def test_the_logged_event_masks_its_words_and_keeps_what_the_resume_reads() -> None:
    secret = "p4ssw0rd-in-the-termination-message"
    payload = dict(
        status="error",
        name="job",
        uid="u1",
        message=f"container 'base' exited with code 3: '{secret}'",
        disruptions=[{"pod": "p", "message": f"evicted while {secret}"}],
        xcom_result=[f'"{secret}"'],
        job=JOB,
    )
    secrets = masking.TaskSecrets([secret])
    event = masking.logged_event(payload, secrets)
    assert event["message"] == "container 'base' exited with code 3: '***'"
    assert event["disruptions"] == [{"pod": "p", "message": "evicted while ***"}]
    # a result that holds a secret is masked too, and the event says it is no longer the value: the resume
    # reads it from the pods again
    assert event["xcom_result"] == ['"***"'] and event[masking.XCOM_RESULT_MASKED] is True
    clean = masking.logged_event({**payload, "xcom_result": ['"no secret"']}, secrets)
    assert clean["xcom_result"] == ['"no secret"'] and masking.XCOM_RESULT_MASKED not in clean
    assert (event["name"], event["uid"], event["status"]) == ("job", "u1", "error")
    assert event["job"] == masking.redact_job_env(JOB)
    assert payload["message"].endswith("message'")  # the trigger's own payload is not changed
    unknown = masking.logged_event(payload, None)  # without the secrets: only the Job's env values
    assert unknown["message"] == payload["message"] and unknown["job"] == event["job"]
