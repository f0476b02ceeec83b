"""The kubelet's termination message: the last 4 KiB of the file, the log tail with
FallbackToLogsOnError, and 12 KiB per pod split between its containers."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from kubernetes import client

from airflow_jobwatch_testing.sandbox import SandboxThread

from .helpers import pod_body, wait_for


def _finished(sandbox: SandboxThread, name: str) -> dict[str, Any]:
    def done() -> dict[str, Any] | None:
        pod = sandbox.get_object("pods", "default", name)
        if pod and pod["status"].get("phase") in ("Succeeded", "Failed"):
            return pod
        return None

    return wait_for(done, timeout=60, what=f"pod {name} to finish")


def _py(code: str) -> list[str]:
    return ["python", "-c", code]


def _message(pod: dict[str, Any], index: int = 0) -> str | None:
    return pod["status"]["containerStatuses"][index]["state"]["terminated"].get("message")


def test_message_file_keeps_its_last_4096_bytes(
    sandbox: SandboxThread, core: client.CoreV1Api, tmp_path: Path
) -> None:
    path = tmp_path / "termination-log"
    code = f"open({str(path)!r}, 'w').write('A' * 1000 + 'B' * 4000)"
    containers = [{"name": "main", "image": "x", "command": _py(code), "terminationMessagePath": str(path)}]
    core.create_namespaced_pod("default", pod_body("long-msg", containers=containers))
    assert _message(_finished(sandbox, "long-msg")) == "A" * 96 + "B" * 4000


@pytest.mark.parametrize(
    ("exit_code", "file_text", "expected"),
    [
        (1, "", "tail"),  # empty file, failed: the log's tail
        (0, "", None),  # succeeded: no fallback
        (1, "from the file", "from the file"),  # the file wins when it has something
    ],
)
def test_fallback_to_logs_on_error(
    sandbox: SandboxThread,
    core: client.CoreV1Api,
    tmp_path: Path,
    exit_code: int,
    file_text: str,
    expected: str | None,
) -> None:
    path = tmp_path / "termination-log"
    code = (
        "import sys\n"
        "for i in range(100): print(f'line {i:03d}')\n"
        f"open({str(path)!r}, 'w').write({file_text!r})\n"
        f"sys.exit({exit_code})"
    )
    containers = [
        {
            "name": "main",
            "image": "x",
            "command": _py(code),
            "terminationMessagePath": str(path),
            "terminationMessagePolicy": "FallbackToLogsOnError",
        }
    ]
    core.create_namespaced_pod("default", pod_body("fb", containers=containers))
    message = _message(_finished(sandbox, "fb"))
    if expected == "tail":
        assert message == "".join(f"line {i:03d}\n" for i in range(20, 100))  # the last 80 lines
    else:
        assert message == expected


def test_fallback_log_tail_is_capped_at_2048_bytes(sandbox: SandboxThread, core: client.CoreV1Api) -> None:
    code = "import sys\nfor i in range(10): print(str(i) * 499)\nsys.exit(3)"
    containers = [
        {
            "name": "main",
            "image": "x",
            "command": _py(code),
            "terminationMessagePolicy": "FallbackToLogsOnError",
        }
    ]
    core.create_namespaced_pod("default", pod_body("fb-cap", containers=containers))
    message = _message(_finished(sandbox, "fb-cap"))
    logs = "".join(str(i) * 499 + "\n" for i in range(10))
    assert message == logs[-2048:]


def test_12_kib_per_pod_split_between_containers(
    sandbox: SandboxThread, core: client.CoreV1Api, tmp_path: Path
) -> None:
    containers = []
    for n in range(4):
        path = tmp_path / f"msg-{n}"
        code = f"open({str(path)!r}, 'w').write({str(n)!r} * 4096)"
        containers.append(
            {"name": f"c{n}", "image": "x", "command": _py(code), "terminationMessagePath": str(path)}
        )
    core.create_namespaced_pod("default", pod_body("many", containers=containers))
    pod = _finished(sandbox, "many")
    # 12 KiB / 4 containers = 3072 bytes each, the first ones kept (the status manager's cut).
    assert [_message(pod, i) for i in range(4)] == [str(n) * 3072 for n in range(4)]
