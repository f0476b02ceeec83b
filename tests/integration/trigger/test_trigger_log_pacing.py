"""The triggerer's loop is shared by every deferred task: the pods' logs a trigger writes into its task
log never block it, never make another task wait, and take memory within a bound however the pod
writes. Deferred get_logs operators on the sandbox end from the triggerer, their log records going into
a real socket that a fake supervisor reads at the triggerer's pace (4 KiB a pass)."""

from __future__ import annotations

import asyncio
import tracemalloc
from typing import Any

import pytest
from airflow.providers.common.compat.sdk import TaskDeferred
from airflow.triggers.base import TaskSuccessEvent
from support.log_socket import LoopLag, Supervisor, logging_to
from support.stack import wait_until

from airflow_jobwatch.ending.end import end_from_triggerer
from airflow_jobwatch_testing.sandbox import SandboxProcess

from .test_job_operator import FakeTI, make_context, make_operator

pytestmark = pytest.mark.timeout(180)


async def _ended_jobs(
    kubeconfig: Any, scripts: dict[str, str], options: dict[str, dict[str, Any]] | None = None
) -> dict[str, tuple[Any, Any]]:
    """Each ``sh -c`` script run as a deferred get_logs operator's Job (task id: its key, ``options`` its
    own arguments), waited for: the trigger and its payload."""

    async def one(task_id: str, script: str) -> tuple[Any, Any]:
        op = make_operator(
            kubeconfig,
            task_id=task_id,
            cmds=["sh", "-c", script],
            deferrable=True,
            wait_until_job_complete=True,
            **{"get_logs": True, **(options or {}).get(task_id, {})},
        )
        with pytest.raises(TaskDeferred) as deferred:
            op.execute(make_context(FakeTI(task_id=task_id)))  # one try each: no adoption
        trigger = deferred.value.trigger
        return trigger, await trigger.wait()

    done = await asyncio.gather(*(one(t, s) for t, s in scripts.items()))
    return dict(zip(scripts, done, strict=True))


async def test_a_task_without_logs_ends_without_waiting_for_other_tasks_logs(
    sandbox, kubeconfig, monkeypatch
) -> None:
    monkeypatch.setenv("AIRFLOW__JOBWATCH__TRIGGER_LOG_MAX_BYTES", str(4 * 1024 * 1024))
    chatty = 'for i in $(seq 1 6000); do echo "line $i of a pod that writes a lot of log"; done'
    jobs = await _ended_jobs(
        kubeconfig,
        {"chatty-1": chatty, "chatty-2": chatty, "chatty-3": chatty, "quiet": "echo done"},
        options={"quiet": {"get_logs": False}},
    )
    with Supervisor(pause=0.004) as supervisor, logging_to(supervisor):
        chatty_ends = [
            asyncio.create_task(end_from_triggerer(trigger, payload))
            for name, (trigger, payload) in jobs.items()
            if name != "quiet"
        ]
        await asyncio.to_thread(
            wait_until, lambda: supervisor.received("of a pod that writes") > 100, timeout=60, what="lines"
        )
        quiet, payload = jobs["quiet"]
        event = await end_from_triggerer(quiet, payload)
        # what the supervisor had read when the quiet task ended: its own lines, not all the others'
        read_when_quiet_ended = supervisor.events()
        ends = await asyncio.gather(*chatty_ends)
        supervisor.read_rest()
    assert isinstance(event, TaskSuccessEvent), event
    pod = payload["pods"][0]["name"]
    assert f"Deleting pod: {pod}" in read_when_quiet_ended
    others = sum("of a pod that writes" in e for e in read_when_quiet_ended)
    assert others < 3 * 6000, "the task without logs waited for every line of the other tasks"
    assert all(isinstance(e, TaskSuccessEvent) for e in ends), ends
    for name, (_, chatty_payload) in jobs.items():  # every line of each, in order, interleaved
        if name != "quiet":
            prefix = f"[{chatty_payload['pods'][0]['name']}] [base] "
            lines = [e.removeprefix(prefix) for e in supervisor.events() if e.startswith(prefix)]
            assert lines == [f"line {i} of a pod that writes a lot of log" for i in range(1, 6001)]
    assert supervisor.risky_writes == 0


async def test_a_long_line_goes_out_in_pieces_that_never_fill_the_socket(sandbox, kubeconfig) -> None:
    jobs = await _ended_jobs(
        kubeconfig, {"long-line": "head -c 600000 /dev/zero | tr '\\0' x; echo; echo after"}
    )
    trigger, payload = jobs["long-line"]
    with Supervisor(pause=0.002) as supervisor, logging_to(supervisor):
        async with LoopLag() as lag:
            event = await end_from_triggerer(trigger, payload)
        supervisor.read_rest()
    assert isinstance(event, TaskSuccessEvent), event
    assert supervisor.risky_writes == 0
    prefix = f"[{payload['pods'][0]['name']}] [base] "
    pieces = [e.removeprefix(prefix) for e in supervisor.events() if e.startswith(prefix)]
    assert pieces[-1] == "after" and "".join(pieces[:-1]) == "x" * 600_000
    assert max(len(p) for p in pieces) <= 4096
    assert lag.longest < 1.0, lag.longest  # Airflow's deadlock watchdog: nothing near it


async def test_a_log_of_empty_lines_takes_memory_within_the_bound(tmp_path) -> None:
    # the sandbox in its own process: what is traced is the triggerer's side alone
    with SandboxProcess(tmp_path / "kubeconfig", log=tmp_path / "sandbox.log"):
        jobs = await _ended_jobs(tmp_path / "kubeconfig", {"empty-lines": "yes '' | head -n 200000"})
        await _traced_end(*jobs["empty-lines"])


async def _traced_end(trigger: Any, payload: dict[str, Any]) -> None:
    with Supervisor(keep_bytes=64 * 1024) as supervisor, logging_to(supervisor):
        tracemalloc.start()
        try:
            event = await end_from_triggerer(trigger, payload)
            _, peak = tracemalloc.get_traced_memory()
        finally:
            tracemalloc.stop()
        supervisor.read_rest()
    assert isinstance(event, TaskSuccessEvent), event
    assert any("lines) of this log left out" in w for w in supervisor.warnings), supervisor.warnings
    # [jobwatch] trigger_log_max_bytes is 1 MiB: the whole end, reading and writing, within 3 MiB
    assert peak < 3 * 1024 * 1024, peak
