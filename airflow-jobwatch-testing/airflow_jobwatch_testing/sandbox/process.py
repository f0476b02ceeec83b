"""Run ``python -m airflow_jobwatch_testing.sandbox`` as a subprocess and wait until it serves.

    with SandboxProcess(tmp / "kubeconfig", args=["--history-window", "50"]) as sb:
        sb.admin.fault("drop_watches")
        print(sb.url, sb.token, sb.pid)

The CLI prints exactly one line, ``ready <url>``, once it listens and has written the kubeconfig;
this class waits for that line with a deadline (a sandbox that hangs before listening must not hang
the caller), and on failure raises :class:`SandboxStartError` naming what went wrong with the tail of
the sandbox's stderr log. The sandbox runs in its own process group, so :meth:`SandboxProcess.stop`
also takes the processes of its pods, even if the sandbox itself has to be SIGKILLed.

Stdlib only, like the rest of this package's client side: the benchmarks, the repository's test harness
that runs whole Airflow installations, and the tests all start the sandbox through this one class.
"""

from __future__ import annotations

import base64
import json
import os
import select
import signal
import subprocess
import sys
import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from types import TracebackType

from .admin import AdminClient

# Seconds a fresh sandbox usually needs to import aiohttp and listen is well under 2 on this machine;
# 60 leaves room for a loaded 2-core CI box without letting a hung start block forever.
DEFAULT_START_TIMEOUT = 60.0
# Seconds between SIGTERM and SIGKILL in stop(): the sandbox stops its server and kills its pods'
# processes on SIGTERM, which takes well under a second unless something is wedged.
DEFAULT_STOP_TIMEOUT = 10.0
# Lines of the sandbox's stderr log quoted in a start-up error.
LOG_TAIL_LINES = 40


class SandboxStartError(RuntimeError):
    """The sandbox subprocess did not print its ``ready <url>`` line; the message has its log tail."""


class SandboxProcess:
    """The sandbox CLI in a subprocess: ``url``, ``kubeconfig``, ``token``, ``admin`` and ``pid`` once started.

    :param kubeconfig: where the sandbox writes its kubeconfig (``--kubeconfig``).
    :param args: extra CLI options (e.g. ``["--no-kubelet", "--history-window", "1"]``).
    :param env: the subprocess's environment (default: this process's). Pods inherit it.
    :param cwd: the subprocess's working directory (default: this process's).
    :param log: file that receives the sandbox's stderr, appended to (default: ``sandbox.log`` next
        to the kubeconfig).
    :param start_timeout: seconds allowed until the ``ready`` line.
    :param admin_timeout: HTTP timeout of :attr:`admin` requests.
    """

    def __init__(
        self,
        kubeconfig: str | os.PathLike[str],
        *,
        args: Sequence[str] = (),
        env: Mapping[str, str] | None = None,
        cwd: str | os.PathLike[str] | None = None,
        log: str | os.PathLike[str] | None = None,
        start_timeout: float = DEFAULT_START_TIMEOUT,
        admin_timeout: float = 10.0,
    ) -> None:
        self.kubeconfig = Path(kubeconfig)
        self.args = [str(a) for a in args]
        self.env = dict(env) if env is not None else None
        self.cwd = cwd
        self.log = Path(log) if log is not None else self.kubeconfig.parent / "sandbox.log"
        self.start_timeout = start_timeout
        self.admin_timeout = admin_timeout
        self.proc: subprocess.Popen[bytes] | None = None
        self.url = ""
        self.token = ""
        self._admin: AdminClient | None = None

    @property
    def pid(self) -> int:
        if self.proc is None:
            raise RuntimeError("the sandbox process is not started; call start() first")
        return self.proc.pid

    @property
    def admin(self) -> AdminClient:
        """Client of the sandbox's ``/_sandbox`` admin API (faults, counters, objects)."""
        if self._admin is None:
            raise RuntimeError("the sandbox process is not started; call start() first")
        return self._admin

    def __enter__(self) -> SandboxProcess:
        return self.start()

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.stop()

    def start(self) -> SandboxProcess:
        """Start the subprocess and return once it printed ``ready <url>``; stop it and raise if it did not."""
        if self.proc is not None:
            raise RuntimeError(f"the sandbox process is already started (pid {self.proc.pid})")
        cmd = [
            sys.executable,
            "-m",
            "airflow_jobwatch_testing.sandbox",
            "--port",
            "0",
            "--kubeconfig",
            str(self.kubeconfig),
            *self.args,
        ]
        self.log.parent.mkdir(parents=True, exist_ok=True)
        with self.log.open("ab") as log:
            self.proc = subprocess.Popen(
                cmd,
                stdout=subprocess.PIPE,
                stderr=log,
                env=self.env,
                cwd=self.cwd,
                start_new_session=True,  # own process group: stop() takes the pods' processes too
            )
        try:
            line = self._read_ready_line()
            self.url = line.split()[1]
            self.token = self._read_token()
            self._admin = AdminClient.from_kubeconfig(self.kubeconfig, timeout=self.admin_timeout)
        except BaseException:
            self.stop()
            raise
        return self

    def write_kubeconfig(self, path: str | os.PathLike[str], token: str) -> str:
        """A kubeconfig for this sandbox with another user's ``token`` (e.g. from
        ``admin.fault("issue_token", user=..., ttl=...)``), mode 0600."""
        from .kubeconfig import kubeconfig_text, write_private_file

        data = json.loads(self.kubeconfig.read_text())
        ca_b64 = data["clusters"][0]["cluster"].get("certificate-authority-data")
        ca_pem = base64.b64decode(ca_b64) if ca_b64 else None
        return write_private_file(path, kubeconfig_text(self.url, token, ca_pem=ca_pem))

    def in_cluster_env(self) -> dict[str, str]:
        """``KUBERNETES_SERVICE_HOST`` / ``_PORT`` for a sandbox started with ``--in-cluster-dir``."""
        if not self.url:
            raise RuntimeError("the sandbox process is not started; call start() first")
        host_port = self.url.split("://", 1)[1]
        host, _, port = host_port.rpartition(":")
        return {"KUBERNETES_SERVICE_HOST": host, "KUBERNETES_SERVICE_PORT": port}

    def _read_ready_line(self) -> str:
        """The first stdout line, read without blocking past the deadline (readline() could hang forever)."""
        assert self.proc is not None and self.proc.stdout is not None
        fd = self.proc.stdout.fileno()
        deadline = time.monotonic() + self.start_timeout
        buf = b""
        while b"\n" not in buf:
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                raise self._start_error(f"no `ready <url>` line within {self.start_timeout:.0f} s")
            readable, _, _ = select.select([fd], [], [], remaining)
            if not readable:
                continue
            chunk = os.read(fd, 4096)
            if not chunk:
                code = self.proc.wait(timeout=5)
                raise self._start_error(f"it exited with {code} before printing `ready <url>`")
            buf += chunk
        line = buf.split(b"\n", 1)[0].decode(errors="replace").strip()
        if not line.startswith("ready "):
            raise self._start_error(f"expected `ready <url>` as its first stdout line, got {line!r}")
        return line

    def _read_token(self) -> str:
        # The sandbox writes its kubeconfig as JSON (a YAML subset), so no YAML parser is needed.
        try:
            data = json.loads(self.kubeconfig.read_text())
            return str(data["users"][0]["user"]["token"])
        except (OSError, ValueError, KeyError, IndexError, TypeError) as exc:
            raise self._start_error(
                f"no bearer token in its kubeconfig {self.kubeconfig} ({type(exc).__name__})"
            ) from None

    def _start_error(self, what: str) -> SandboxStartError:
        return SandboxStartError(
            f"the sandbox (`python -m airflow_jobwatch_testing.sandbox --kubeconfig {self.kubeconfig} "
            f"{' '.join(self.args)}`) did not start: {what}\n{self.log_tail()}"
        )

    def log_tail(self, lines: int = LOG_TAIL_LINES) -> str:
        try:
            text = self.log.read_text(errors="replace").splitlines()
        except OSError:
            return f"(no sandbox log at {self.log})"
        return f"--- last {lines} lines of {self.log} ---\n" + "\n".join(text[-lines:])

    def stop(self, *, sig: int = signal.SIGTERM, timeout: float = DEFAULT_STOP_TIMEOUT) -> int | None:
        """Send ``sig`` to the sandbox's process group, SIGKILL it after ``timeout`` s; return the exit code.

        Safe to call more than once and on a sandbox that already exited.
        """
        proc = self.proc
        if proc is None:
            return None
        try:
            return stop_process_group(proc, sig=sig, timeout=timeout)
        finally:
            if proc.stdout is not None:
                proc.stdout.close()


def stop_process_group(
    proc: subprocess.Popen[bytes], *, sig: int = signal.SIGTERM, timeout: float = DEFAULT_STOP_TIMEOUT
) -> int | None:
    """Send ``sig`` to the process group led by ``proc`` (started with ``start_new_session=True``).

    Waits ``timeout`` s for ``proc`` to exit, then SIGKILLs the group and waits up to
    DEFAULT_STOP_TIMEOUT s more. A process that already exited is left alone. Returns the exit code.
    """
    if proc.poll() is not None:
        return proc.returncode
    try:
        os.killpg(proc.pid, sig)
    except ProcessLookupError:
        return proc.poll()
    try:
        proc.wait(timeout=timeout)
    except subprocess.TimeoutExpired:
        try:
            os.killpg(proc.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        proc.wait(timeout=DEFAULT_STOP_TIMEOUT)
    return proc.returncode
