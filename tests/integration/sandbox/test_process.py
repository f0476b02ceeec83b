"""SandboxProcess: starts the CLI, waits for its ready line, exposes admin/token, stops its whole group."""

from __future__ import annotations

import os
import stat
from pathlib import Path

import pytest
from kubernetes import client, config

from airflow_jobwatch_testing.sandbox import AdminClient, SandboxProcess, SandboxStartError

from .helpers import pod_body, wait_for


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    # A zombie is dead for our purposes (its parent has not reaped it yet).
    try:
        return Path(f"/proc/{pid}/stat").read_text().split(")")[-1].split()[0] != "Z"
    except OSError:
        return False


# A sleep duration no other process on the machine uses, to find the pod's process by its command line.
MARKER = f"{300 + os.getpid() % 1000 / 1000:.3f}"


def _pod_processes() -> list[int]:
    pids = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            argv = (entry / "cmdline").read_bytes().split(b"\0")
        except OSError:
            continue
        if b"sleep " + MARKER.encode() in b" ".join(argv) and _alive(int(entry.name)):
            pids.append(int(entry.name))
    return pids


def test_sandbox_process_serves_and_stops_its_whole_group(tmp_path: Path) -> None:
    kubeconfig = tmp_path / "kubeconfig"
    sb = SandboxProcess(kubeconfig, args=["--history-window", "50"], log=tmp_path / "sb.log")
    with sb:
        assert sb.url.startswith("http://127.0.0.1:")
        assert sb.kubeconfig == kubeconfig
        assert stat.S_IMODE(kubeconfig.stat().st_mode) == 0o600
        assert sb.token
        pid = sb.pid
        api_client = config.new_client_from_config(config_file=str(kubeconfig))
        try:
            client.CoreV1Api(api_client).create_namespaced_pod("default", pod_body("p", f"sleep {MARKER}"))
        finally:
            api_client.close()
        admin = sb.admin
        wait_for(lambda: admin.objects("pods")[0]["status"].get("phase") == "Running", what="the pod to run")
        assert admin.counters()["create pods"] == 1
        wait_for(_pod_processes, what="the pod's process")
    assert sb.proc is not None and sb.proc.returncode == 0  # SIGTERM is a clean stop
    assert not _alive(pid)
    wait_for(lambda: not _pod_processes(), timeout=10, what="the pod's process to be gone")
    assert sb.stop() == 0  # idempotent


def test_sandbox_process_that_does_not_start_names_the_failure_and_log_tail(tmp_path: Path) -> None:
    sb = SandboxProcess(tmp_path / "kubeconfig", args=["--no-such-option"], start_timeout=30)
    with pytest.raises(SandboxStartError) as info:
        sb.start()
    message = str(info.value)
    assert "exited with 2 before printing `ready <url>`" in message
    assert "--no-such-option" in message
    assert "unrecognized arguments" in message  # argparse's error, from the log tail
    assert sb.proc is not None and sb.proc.poll() is not None


def test_admin_client_works_against_a_tls_sandbox(tmp_path: Path) -> None:
    """The admin client verifies the self-signed certificate (from the kubeconfig) instead of failing
    with CERTIFICATE_VERIFY_FAILED, and the official client works over the same HTTPS."""
    with SandboxProcess(tmp_path / "kubeconfig", args=["--tls", "--no-kubelet"]) as sb:
        assert sb.url.startswith("https://127.0.0.1:")
        assert sb.admin.fault("current_resource_version") >= 1
        api_client = config.new_client_from_config(config_file=str(sb.kubeconfig))
        try:
            client.CoreV1Api(api_client).create_namespaced_pod("default", pod_body("p", "true"))
        finally:
            api_client.close()
        assert [p["metadata"]["name"] for p in sb.admin.objects("pods")] == ["p"]
        assert sb.admin.counters()["create pods"] == 1


def test_admin_client_refuses_https_without_a_certificate_to_trust() -> None:
    with pytest.raises(ValueError, match="needs ca_pem"):
        AdminClient("https://127.0.0.1:1", "t")


def test_tls_certificate_names_the_host_and_is_a_short_lived_ca() -> None:
    from cryptography import x509

    from airflow_jobwatch_testing.sandbox.tls import self_signed_cert

    cert = x509.load_pem_x509_certificate(self_signed_cert("127.0.0.1")[0])
    san = cert.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
    assert [str(ip) for ip in san.get_values_for_type(x509.IPAddress)] == ["127.0.0.1"]
    assert cert.extensions.get_extension_for_class(x509.BasicConstraints).value.ca
    assert (cert.not_valid_after_utc - cert.not_valid_before_utc).days <= 2
