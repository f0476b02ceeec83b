"""kubectl against the sandbox: the flow a user types (create, wait, logs, get -l, delete).

kubectl sends its bearer token only over TLS, so these tests use ``Sandbox(tls=True)``.
"""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

import pytest

from airflow_jobwatch_testing.sandbox import SandboxThread

from .helpers import wait_for

KUBECTL = shutil.which("kubectl")
pytestmark = [
    pytest.mark.skipif(KUBECTL is None, reason="kubectl is not installed (shutil.which('kubectl') is None)"),
    pytest.mark.sandbox(tls=True),
]

JOB_YAML = """\
apiVersion: batch/v1
kind: Job
metadata:
  name: hello
  labels: {team: data}
spec:
  backoffLimit: 0
  template:
    metadata:
      labels: {app: hello}
    spec:
      restartPolicy: Never
      containers:
      - name: main
        image: busybox:1.36
        command: ["sh", "-c", "echo hello from the sandbox"]
"""


def kubectl(kubeconfig: Path, *args: str, timeout: float = 60) -> str:
    assert KUBECTL is not None
    env = {**os.environ, "KUBECONFIG": str(kubeconfig)}
    result = subprocess.run(
        [KUBECTL, *args], capture_output=True, text=True, timeout=timeout, env=env, check=False
    )
    assert result.returncode == 0, f"kubectl {' '.join(args)} failed: {result.stderr}"
    return result.stdout


def test_kubectl_job_flow(sandbox: SandboxThread, kubeconfig: Path, tmp_path: Path) -> None:
    manifest = tmp_path / "job.yaml"
    manifest.write_text(JOB_YAML)
    assert "job.batch/hello created" in kubectl(kubeconfig, "create", "-f", str(manifest))
    assert "condition met" in kubectl(
        kubeconfig, "wait", "--for=condition=complete", "job/hello", "--timeout=30s"
    )
    assert kubectl(kubeconfig, "logs", "job/hello") == "hello from the sandbox\n"
    pods = kubectl(kubeconfig, "get", "pods", "-l", "app=hello", "-o", "name").split()
    assert len(pods) == 1 and pods[0].startswith("pod/hello-")
    table = kubectl(kubeconfig, "get", "pods", "-l", "app=hello")
    assert "Completed" in table and "READY" in table
    assert "Complete" in kubectl(kubeconfig, "get", "job", "hello")
    assert 'job.batch "hello" deleted' in kubectl(kubeconfig, "delete", "job", "hello")
    # kubectl deletes Jobs with propagationPolicy=Background: the pod goes too.
    wait_for(lambda: sandbox.objects("pods") == [] and sandbox.objects("jobs") == [], what="job and pod gone")


def test_kubectl_sees_failed_job(sandbox: SandboxThread, kubeconfig: Path, tmp_path: Path) -> None:
    manifest = tmp_path / "job.yaml"
    manifest.write_text(
        JOB_YAML.replace("echo hello from the sandbox", "exit 2").replace("name: hello", "name: broken")
    )
    kubectl(kubeconfig, "create", "-f", str(manifest))
    assert "condition met" in kubectl(
        kubeconfig, "wait", "--for=condition=failed", "job/broken", "--timeout=30s"
    )
    assert "BackoffLimitExceeded" in kubectl(
        kubeconfig, "get", "job", "broken", "-o", "jsonpath={.status.conditions[?(@.type=='Failed')].reason}"
    )
