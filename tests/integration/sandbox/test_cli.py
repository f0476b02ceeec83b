"""``python -m airflow_jobwatch_testing.sandbox``: ready line, kubeconfig, admin API, clean stop."""

from __future__ import annotations

import json
import os
import signal
import stat
import subprocess
import sys
from pathlib import Path

from kubernetes import client, config

from airflow_jobwatch_testing.sandbox import AdminClient

from .helpers import pod_body, wait_for

# A sleep duration no other process on the machine uses, to find the pod's process by its command line.
MARKER = f"{60 + os.getpid() % 1000 / 1000:.3f}"


def test_cli_serves_and_stops_cleanly(tmp_path: Path) -> None:
    kubeconfig = tmp_path / "kubeconfig"
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "airflow_jobwatch_testing.sandbox",
            "--port",
            "0",
            "--kubeconfig",
            str(kubeconfig),
            "--history-window",
            "50",
            "--bookmark-interval",
            "1",
            "--fail-images",
            r"^registry\.invalid/",
        ],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        assert proc.stdout is not None
        line = proc.stdout.readline()
        assert line.startswith("ready http://127.0.0.1:")
        url = line.split()[1]
        assert stat.S_IMODE(kubeconfig.stat().st_mode) == 0o600
        token = json.loads(kubeconfig.read_text())["users"][0]["user"]["token"]
        api_client = config.new_client_from_config(config_file=str(kubeconfig))
        core = client.CoreV1Api(api_client)
        core.create_namespaced_pod("default", pod_body("cli", f"sleep {MARKER}"))
        admin = AdminClient(url, token)
        wait_for(lambda: admin.objects("pods")[0]["status"].get("phase") == "Running", what="the pod to run")
        assert admin.counters()["create pods"] == 1
        containers = [{"name": "main", "image": "registry.invalid/app:1", "command": ["true"]}]
        core.create_namespaced_pod("default", pod_body("nopull", containers=containers))
        wait_for(
            lambda: any(
                cs["state"].get("waiting", {}).get("reason") in ("ErrImagePull", "ImagePullBackOff")
                for p in admin.objects("pods")
                if p["metadata"]["name"] == "nopull"
                for cs in p["status"].get("containerStatuses") or []
            ),
            what="--fail-images to stop the pod's image pull",
        )
        child = int(
            json.loads(json.dumps(admin.objects("pods")))[0]["status"]["containerStatuses"][0]["ready"]
        )
        assert child == 1
        api_client.close()
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(timeout=20) == 0
        assert proc.stdout.read() == ""  # exactly one line on stdout
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    # The pod's `sleep 60` died with the sandbox (no stray processes left behind).
    out = subprocess.run(
        ["pgrep", "-f", "^sleep 60$", "-P", str(os.getpid())], capture_output=True, text=True
    )
    assert out.stdout.strip() == ""
