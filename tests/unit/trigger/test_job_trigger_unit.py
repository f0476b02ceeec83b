"""JobTrigger's pure parts: arguments, deadline handling and serialization."""

from __future__ import annotations

import datetime
import importlib

import pytest

from airflow_jobwatch.triggers.job import JobTrigger, informer_config_from_airflow


def _rebuild(trigger: JobTrigger) -> JobTrigger:
    classpath, kwargs = trigger.serialize()
    module, _, name = classpath.rpartition(".")
    cls = getattr(importlib.import_module(module), name)
    return cls(**kwargs)


def test_serialize_round_trips_every_argument():
    trigger = JobTrigger(
        "job-a",
        "team-ns",
        kubernetes_conn_id="k8s",
        config_file="/tmp/kubeconfig",
        cluster_context="ctx",
        in_cluster=False,
        timeout="2030-01-01T00:00:00+00:00",
        poll_interval=7.5,
        fatal_waiting_reasons=["ErrImagePull", "CreateContainerConfigError"],
        api_failure_tolerance=12,
        job_uid="1234",
        delete_on_kill=True,
    )
    again = _rebuild(trigger)
    assert again.serialize() == trigger.serialize()
    assert trigger.serialize()[0] == "airflow_jobwatch.triggers.job.JobTrigger"
    assert again.deadline == datetime.datetime(2030, 1, 1, tzinfo=datetime.UTC)


def test_relative_timeout_is_serialized_as_absolute_deadline():
    """A trigger moved to another triggerer must keep its deadline, not restart the countdown."""
    before = datetime.datetime.now(datetime.UTC)
    trigger = JobTrigger("j", "ns", timeout=60)
    deadline = datetime.datetime.fromisoformat(trigger.serialize()[1]["timeout"])
    assert before + datetime.timedelta(seconds=59) < deadline < before + datetime.timedelta(seconds=62)
    assert _rebuild(trigger).deadline == trigger.deadline


def test_no_timeout_means_no_deadline():
    assert JobTrigger("j", "ns").serialize()[1]["timeout"] is None


@pytest.mark.parametrize(
    ("kwargs", "error", "text"),
    [
        ({"timeout": "tomorrow"}, ValueError, "ISO 8601"),
        ({"timeout": datetime.datetime(2030, 1, 1)}, ValueError, "time zone"),
        ({"timeout": -1}, ValueError, ">= 0"),
        ({"timeout": True}, TypeError, "seconds"),
        ({"poll_interval": 0}, ValueError, "poll_interval"),
        ({"api_failure_tolerance": -5}, ValueError, "api_failure_tolerance"),
    ],
)
def test_bad_arguments_name_the_input(kwargs, error, text):
    with pytest.raises(error, match=text):
        JobTrigger("j", "ns", **kwargs)


def test_job_name_and_namespace_are_required():
    with pytest.raises(ValueError, match="job_name"):
        JobTrigger("", "ns")
    with pytest.raises(ValueError, match="namespace"):
        JobTrigger("j", "")


def test_informer_config_reads_jobwatch_section(monkeypatch):
    monkeypatch.setenv("AIRFLOW__JOBWATCH__WATCH_STALL_TIMEOUT_SECONDS", "7")
    monkeypatch.setenv("AIRFLOW__JOBWATCH__RESYNC_INTERVAL_SECONDS", "0")
    cfg = informer_config_from_airflow()
    assert cfg.stall_timeout_seconds == 7
    assert cfg.resync_interval_seconds is None
    assert informer_config_from_airflow(resync_interval_seconds=15).resync_interval_seconds == 15


def test_package_level_imports():
    from airflow_jobwatch.operators import KubernetesJobOperator
    from airflow_jobwatch.operators.job import KubernetesJobOperator as direct_op
    from airflow_jobwatch.triggers import JobTrigger as from_package

    assert from_package is JobTrigger
    assert KubernetesJobOperator is direct_op
