"""`airflow jobwatch status` verdicts from the executor's and triggerer's status files."""

from __future__ import annotations

import json
import os

from airflow_jobwatch.cli.status import executor_verdict, render, triggerer_verdict

NOW = 1_800_000_000.0


def write(tmp_path, name, data):
    path = tmp_path / name
    path.write_text(json.dumps(data))
    return str(path)


def executor_status(**overrides):
    data = {
        "scheduler_job_id": "7",
        "updated_at": NOW - 2,
        "watcher_healthy": True,
        "watcher_last_error": None,
        "tracked_pods": 3,
        "running": 3,
        "pending_creation": 0,
        "seconds_since_last_event": 4.2,
        "relists": 1,
        "watcher_restarts": 0,
        "watchers": {"default": {"synced": True}},
    }
    data.update(overrides)
    return data


def test_executor_healthy(tmp_path):
    v = executor_verdict(write(tmp_path, "e.json", executor_status()), max_age=60, now=NOW)
    assert v.healthy, v.problems
    assert v.summary["tracked_pods"] == 3 and v.summary["relists"] == 1
    assert "executor: healthy" in render([v])


def test_executor_stale_file_is_unhealthy(tmp_path):
    v = executor_verdict(
        write(tmp_path, "e.json", executor_status(updated_at=NOW - 300)), max_age=60, now=NOW
    )
    assert not v.healthy
    assert "not updated for 300.0 s" in v.problems[0]


def test_executor_watcher_unhealthy(tmp_path):
    data = executor_status(watcher_healthy=False, watcher_last_error="503 Service Unavailable")
    v = executor_verdict(write(tmp_path, "e.json", data), max_age=60, now=NOW)
    assert v.problems == ["the watcher cannot reach the Kubernetes API: 503 Service Unavailable"]
    assert "UNHEALTHY" in render([v])


def test_missing_or_broken_file(tmp_path):
    v = executor_verdict(str(tmp_path / "nope.json"), max_age=60, now=NOW)
    assert not v.healthy and "does not exist" in v.problems[0]
    (tmp_path / "bad.json").write_text("{not json")
    assert "cannot read" in executor_verdict(str(tmp_path / "bad.json"), max_age=60, now=NOW).problems[0]


def triggerer_status(**overrides):
    data = {
        "pid": os.getpid(),
        "updated_at": NOW - 5,
        "write_interval_seconds": 10.0,
        "shared_watches": 1,
        "triggers_per_watch": {"batch": 4},
        "healthy": True,
        "informers": [
            {
                "kind": "jobs",
                "namespace": "batch",
                "healthy": True,
                "seconds_since_last_event": 1.0,
                "lists": 1,
            },
            {
                "kind": "pods",
                "namespace": "batch",
                "healthy": True,
                "seconds_since_last_event": 2.0,
                "lists": 1,
            },
        ],
    }
    data.update(overrides)
    return data


def test_triggerer_healthy_and_rendered(tmp_path):
    v = triggerer_verdict(write(tmp_path, "t.json", triggerer_status()), max_age=60, now=NOW)
    assert v.healthy, v.problems
    assert "watch jobs/batch: healthy=True" in render([v])


def test_triggerer_unhealthy_watch(tmp_path):
    data = triggerer_status()
    data["informers"][1]["healthy"] = False
    v = triggerer_verdict(write(tmp_path, "t.json", data), max_age=60, now=NOW)
    assert v.problems == ["the pods watch of namespace batch is unhealthy"]


def test_triggerer_stale_while_watching_or_writer_gone(tmp_path):
    v = triggerer_verdict(
        write(tmp_path, "t.json", triggerer_status(updated_at=NOW - 120)), max_age=60, now=NOW
    )
    assert any("not updated for 120.0 s" in p for p in v.problems)
    gone = triggerer_status(pid=2**22 + 12345)
    v = triggerer_verdict(write(tmp_path, "t2.json", gone), max_age=60, now=NOW)
    assert any("is gone" in p for p in v.problems)


def test_triggerer_without_watches_is_not_judged_by_age(tmp_path):
    data = triggerer_status(updated_at=NOW - 3600, shared_watches=0, informers=[], triggers_per_watch={})
    assert triggerer_verdict(write(tmp_path, "t.json", data), max_age=60, now=NOW).healthy
