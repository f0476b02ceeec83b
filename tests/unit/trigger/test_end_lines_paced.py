"""The lines of a task's end whose number grows with the Job's pods (a line per pod, the XCom lines, a line
per pod cleaned up) are written paced, as the pod logs are: a Job of thousands of pods never fills the
triggerer's log socket, and a supervisor that stopped reading gets one warning instead of a blocked loop."""

from __future__ import annotations

import structlog
from support.log_socket import Supervisor, logging_to

from airflow_jobwatch.ending import pod_logs
from airflow_jobwatch.ending.end import log_ending

PODS = [
    {"name": f"job-pod-{i:05d}", "phase": "Succeeded", "exit_code": 0, "reason": "Completed"}
    for i in range(3000)
]
EVENT = {"namespace": "ns", "name": "job", "outcome": "success", "reason": "Completed", "message": "done"}


async def test_a_line_per_pod_of_a_large_job_never_fills_the_socket() -> None:
    # A slow supervisor (4 KiB a pass, 2 ms between passes): 3,000 pod lines are far more than the socket
    # holds. Written in one burst, a write would find the socket full (WouldBlock: the loop would block).
    with Supervisor(pause=0.002) as supervisor, logging_to(supervisor):
        channel = pod_logs.Channel(supervisor.fileno(), stall_seconds=30)
        lines = pod_logs.Lines()
        log_ending(lines, EVENT, PODS)
        await lines.write(structlog.get_logger(), channel_=channel)
        supervisor.read_rest()
    assert supervisor.risky_writes == 0
    events = supervisor.events()
    assert events[0].startswith("Job ns/job ended: success")
    assert [e.split()[1] for e in events[1:]] == [f"job-pod-{i:05d}:" for i in range(3000)]


async def test_a_supervisor_that_stops_reading_gets_one_warning_not_a_blocked_loop() -> None:
    with Supervisor(stop_after=16 * 1024) as supervisor, logging_to(supervisor):
        channel = pod_logs.Channel(supervisor.fileno(), stall_seconds=0.5)
        lines = pod_logs.Lines()
        log_ending(lines, EVENT, PODS)
        await lines.write(structlog.get_logger(), channel_=channel)
        supervisor.read_rest()
    assert supervisor.risky_writes == 0
    [warning] = [w for w in supervisor.warnings if "not written" in w]
    written = sum(1 for e in supervisor.events() if e.startswith("  pod "))
    assert warning.startswith(f"{3000 - written} lines of this task's end not written"), warning
