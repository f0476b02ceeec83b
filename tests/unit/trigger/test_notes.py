"""WaitNotes (triggers/notes.py) on recorded pod and Job shapes: what is logged, once, and counted."""

from __future__ import annotations

import asyncio
import copy
import json
from pathlib import Path
from typing import Any

import pytest

from airflow_jobwatch.triggers.job import JobTrigger
from airflow_jobwatch.triggers.notes import WaitNotes

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures"


def load(kind: str, name: str) -> dict[str, Any]:
    obj: dict[str, Any] = json.loads((FIXTURES / kind / f"{name}.json").read_text())
    if kind == "pods":  # several pod fixtures derive from one recorded pod and share its uid
        obj["metadata"]["uid"] = f"uid-{name}"
    return obj


class Lines:
    """A logger that keeps the rendered lines (the notes call it like the trigger's logger)."""

    def __init__(self) -> None:
        self.lines: list[tuple[str, str]] = []

    def __getattr__(self, level: str) -> Any:
        def emit(message: str, *args: Any) -> None:
            self.lines.append((level, message % args if args else message))

        return emit

    def text(self) -> str:
        return "\n".join(line for _level, line in self.lines)


def notes(retries: int | None = None) -> tuple[WaitNotes, Lines]:
    log = Lines()
    return WaitNotes(log=log, namespace="default", job_name="bad-fac2", disruption_retries=retries), log


def test_each_disruption_is_logged_once_and_counted_against_the_bound() -> None:
    wait, log = notes(retries=1)
    running = load("jobs", "started-active")
    preempted = load("pods", "preempted")
    wait.observe(running, [preempted])
    wait.observe(running, [preempted, load("pods", "running")])  # the same pod again: not again
    assert log.text().count("was disrupted") == 1
    assert "Pod etl-preempted-v9x4t of Job default/bad-fac2 was disrupted (1 of 1 allowed)" in log.text()
    assert not wait.exceeded()
    wait.observe(running, [load("pods", "evicted")])
    assert wait.exceeded()
    message = wait.exceeded_message()
    assert "disrupted 2 times, more than disruption_retries=1" in message
    assert "pod etl-preempted-v9x4t: preempted by the scheduler on node spot-pool-b7" in message
    assert "pod etl-evicted-q8w4z: evicted on node spot-pool-b7: the node was low on memory" in message
    assert [d["reason"] for d in wait.disruption_list()] == ["PreemptionByScheduler", "Evicted"]
    json.dumps(wait.disruption_list())


def test_no_bound_lists_but_never_exceeds() -> None:
    wait, _log = notes(retries=None)
    wait.observe(load("jobs", "started-active"), [load("pods", "preempted"), load("pods", "node-shutdown")])
    assert len(wait.disruption_list()) == 2 and not wait.exceeded()


def test_a_node_still_unreachable_is_not_yet_a_disruption() -> None:
    wait, log = notes(retries=0)
    wait.observe(load("jobs", "started-active"), [load("pods", "unknown-node-lost")])
    assert not wait.disruption_list() and not log.lines


def test_suspension_admission_and_preemption_are_each_logged_once() -> None:
    wait, log = notes()
    suspended = load("jobs", "suspended")
    suspended["metadata"].setdefault("labels", {})["kueue.x-k8s.io/queue-name"] = "team-q"
    resumed = copy.deepcopy(suspended)
    resumed["spec"]["suspend"] = False
    resumed["status"]["conditions"] = [dict(c, status="False") for c in resumed["status"]["conditions"]]
    resumed["status"]["active"] = 1
    for job in (suspended, suspended, resumed, resumed, suspended, suspended, resumed):
        wait.observe(job, [])
    text = log.text()
    assert text.count("waiting to be admitted by Kueue (queue 'team-q')") == 1, text
    assert text.count("was admitted (resumed)") == 2, text
    assert text.count("was suspended again (preempted by Kueue (queue 'team-q'), 1 time(s))") == 1, text
    assert (wait.admissions, wait.preemptions) == (2, 1)


@pytest.mark.parametrize("value", [-1, 1.5, True, "2"])
def test_disruption_retries_must_be_a_count(value: Any) -> None:
    with pytest.raises(ValueError, match="disruption_retries must be an int >= 0"):
        JobTrigger("j", "ns", disruption_retries=value)


def test_disruption_retries_round_trips() -> None:
    classpath, kwargs = JobTrigger("j", "ns", disruption_retries=2).serialize()
    assert kwargs["disruption_retries"] == 2
    assert JobTrigger(**kwargs).disruption_retries == 2


class FakeRefusals:
    """The shared refusal watch's interface (triggers/refusals.py), fed by the test instead of a watch."""

    def __init__(self, latest: str | None = None) -> None:
        self.latest = latest
        self.listeners: dict[str, list[Any]] = {}
        self.opened = 0
        self.listening = asyncio.Event()  # set once a wait listens

    def source(self) -> FakeRefusals:
        self.opened += 1
        return self

    def reason(self, job_uid: str) -> str | None:
        return self.latest

    def listen(self, job_uid: str, callback: Any) -> Any:
        self.listeners.setdefault(job_uid, []).append(callback)
        self.listening.set()
        return lambda: self.listeners[job_uid].remove(callback)

    def refuse(self, job_uid: str, message: str) -> None:
        for callback in list(self.listeners.get(job_uid, [])):
            callback(message)


QUOTA = 'Error creating: pods "{}" is forbidden: exceeded quota: q, requested: pods=1, used: pods=1, limited: pods=1'


async def test_a_job_without_pods_reads_its_refusals_from_the_shared_watch_after_the_grace(
    monkeypatch,
) -> None:
    import asyncio

    from airflow_jobwatch.triggers import notes as notes_module

    monkeypatch.setattr(notes_module, "MISSING_PODS_FIRST_CHECK_SECONDS", 0.05)
    wait, log = notes()
    job = load("jobs", "new-empty-status")
    uid = job["metadata"]["uid"]
    refusals = FakeRefusals(latest=QUOTA.format("bad-fac2-aaaaa"))
    wait.observe(job, [], refusals.source)
    assert refusals.opened == 0  # within the grace: not even the shared watch is asked
    await asyncio.sleep(0.2)
    for _ in range(5):  # every later decision of the trigger: no new listener, no request
        wait.observe(job, [], refusals.source)
    assert refusals.opened == 1 and len(refusals.listeners[uid]) == 1
    refusals.refuse(uid, QUOTA.format("bad-fac2-bbbbb"))  # the same reason for another generated pod
    assert log.text().count("cannot create its pods yet") == 1
    refusals.refuse(uid, "Error creating: admission webhook denied the request")
    assert log.text().count("cannot create its pods yet") == 2
    wait.observe(load("jobs", "started-active"), [load("pods", "running")], refusals.source)
    assert refusals.listeners[uid] == []  # it stopped listening once the Job had its pods
    assert "Job default/bad-fac2 has its pods now" in log.text()
    wait.close()


async def test_a_job_that_gets_its_pods_within_the_grace_never_asks(monkeypatch) -> None:
    import asyncio

    from airflow_jobwatch.triggers import notes as notes_module

    monkeypatch.setattr(notes_module, "MISSING_PODS_FIRST_CHECK_SECONDS", 0.05)
    wait, log = notes()
    refusals = FakeRefusals(latest=QUOTA.format("x"))
    wait.observe(load("jobs", "new-empty-status"), [], refusals.source)
    wait.observe(load("jobs", "started-active"), [load("pods", "running")], refusals.source)
    await asyncio.sleep(0.2)
    assert refusals.opened == 0 and not log.lines
    wait.close()


async def test_a_quota_refusal_is_said_once_while_the_usage_changes_and_its_numbers_every_few_minutes(
    monkeypatch,
) -> None:
    """A quota's 403 names the namespace's usage, which changes at every pod start and end. The reason
    is said once; its numbers again only after ``REFUSAL_REFRESH_SECONDS``, and only if they changed."""
    import asyncio

    from airflow_jobwatch.triggers import notes as notes_module

    clock = [1000.0]
    monkeypatch.setattr(notes_module, "_clock", lambda: clock[0])
    monkeypatch.setattr(notes_module, "MISSING_PODS_FIRST_CHECK_SECONDS", 0.0)
    wait, log = notes()
    job = load("jobs", "new-empty-status")
    uid = job["metadata"]["uid"]
    refusals = FakeRefusals()
    wait.observe(job, [], refusals.source)
    await asyncio.wait_for(refusals.listening.wait(), 30)  # the wait listens to the refusals
    cpu = (
        'Error creating: pods "bad-fac2-{}" is forbidden: exceeded quota: compute, requested: '
        "requests.cpu=500m, used: requests.cpu={}, limited: requests.cpu=8"
    )
    for i, used in enumerate(["7600m", "7700m", "7800m", "7700m"]):  # pods start and end meanwhile
        clock[0] += 60
        refusals.refuse(uid, cpu.format(i, used))
    assert log.text().count("cannot create its pods") == 1, log.text()
    clock[0] += notes_module.REFUSAL_REFRESH_SECONDS
    refusals.refuse(uid, cpu.format("a", "7600m"))  # the same numbers as last said: nothing new
    refusals.refuse(uid, cpu.format("b", "7900m"))
    refusals.refuse(uid, cpu.format("c", "7700m"))  # within the refresh interval again
    assert [line for _, line in log.lines if "cannot create its pods" in line] == [
        "Job default/bad-fac2 cannot create its pods yet, so it keeps waiting (the Job controller retries): "
        + cpu.format(0, "7600m"),
        "Job default/bad-fac2 still cannot create its pods (the numbers now): " + cpu.format("b", "7900m"),
    ]
    wait.close()
