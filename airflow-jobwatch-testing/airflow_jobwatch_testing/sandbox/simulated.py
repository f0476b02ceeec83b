"""Simulated containers: a pod that runs with no host process, after kwok's "stages".

The kubelet runs every container as a host process, so the number of pods that can run at once is
bounded by the machine's process budget. A simulated container replaces only that process: the
kubelet still binds the pod, publishes ``ContainerCreating``, ``Running`` with ``startedAt`` and the
``Ready`` conditions, then ``Succeeded``/``Failed`` with ``exitCode``, ``reason`` and ``finishedAt``,
through the same code paths as for a process. Deletion (SIGTERM, then SIGKILL after the grace
period), eviction, ``activeDeadlineSeconds`` and the Job controller therefore behave as with a
process, because they act on the kubelet's runtime and not on the process.

A pod is simulated when its annotation :data:`SIMULATE_ANNOTATION` is ``"true"``, when its namespace
is one of the sandbox's ``simulated_namespaces``, or when the sandbox runs with ``simulate_pods``.
Annotation ``"false"`` keeps a pod a process in a simulated namespace or sandbox.

What the container "does" is read from :data:`DURATION_ANNOTATION` / :data:`EXIT_CODE_ANNOTATION`,
else from its command (:func:`read_command`); a command that cannot be read runs for the sandbox's
``simulated_default_seconds`` and exits 0. Its log is one fixed line (:data:`LOG_LINE`); it writes no
file (no XCom sidecar file, no termination-message file).
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import re
import shlex
import signal
from dataclasses import dataclass
from typing import Any

SIMULATE_ANNOTATION = "sandbox.jobwatch.io/simulate"
DURATION_ANNOTATION = "sandbox.jobwatch.io/duration-seconds"
EXIT_CODE_ANNOTATION = "sandbox.jobwatch.io/exit-code"
LOG_LINE = b"sandbox: simulated container (no process ran)\n"

# Fake process ids, far above any real pid (Linux's pid_max is at most 2**22), so that a simulated
# container can never be mistaken for, or signal, a host process.
_PIDS = itertools.count(1 << 30)

_SHELLS = {"sh", "bash", "dash", "ash", "/bin/sh", "/bin/bash", "/usr/bin/sh", "/usr/bin/bash"}
_NUMBER = r"(\d+(?:\.\d+)?)"
_PY_SLEEP = re.compile(r"time\.sleep\(\s*" + _NUMBER + r"\s*\)")
_PY_EXIT = re.compile(r"(?:sys\.exit|SystemExit|os\._exit|exit)\(\s*(\d+)\s*\)")
_STATEMENT_SPLIT = re.compile(r"\s*(?:;|&&|\n)\s*")


@dataclass(frozen=True)
class Script:
    """What a simulated container does: run for ``seconds``, then exit with ``exit_code``."""

    seconds: float
    exit_code: int


def is_simulated(sandbox: Any, pod: dict[str, Any]) -> bool:
    """Whether ``pod`` runs simulated: its annotation wins, then its namespace, then the sandbox option."""
    meta = pod.get("metadata", {})
    value = str((meta.get("annotations") or {}).get(SIMULATE_ANNOTATION, "")).strip().lower()
    if value in ("true", "1", "yes"):
        return True
    if value in ("false", "0", "no"):
        return False
    if meta.get("namespace", "") in getattr(sandbox, "simulated_namespaces", ()):
        return True
    return bool(getattr(sandbox, "simulate_pods", False))


def _number(text: str) -> float | None:
    try:
        value = float(text)
    except ValueError:
        return None
    return value if value >= 0 else None


def _read_shell(script: str) -> Script | None:
    """Read the common shapes of a shell script: ``sleep N``, ``exit N``, ``true``, ``false``, ``echo``
    and ``:``, joined by ``;``, ``&&`` or new lines. Anything else is unreadable (None)."""
    seconds = 0.0
    code = 0
    for statement in _STATEMENT_SPLIT.split(script.strip()):
        if not statement:
            continue
        try:
            words = shlex.split(statement)
        except ValueError:
            return None
        if not words:
            continue
        head = words[0]
        if head == "sleep" and len(words) == 2 and _number(words[1]) is not None:
            seconds += _number(words[1]) or 0.0
            code = 0
        elif head == "exit" and len(words) <= 2:
            if len(words) == 2 and not words[1].isdigit():
                return None
            return Script(seconds, int(words[1]) % 256 if len(words) == 2 else code)
        elif head in ("true", ":") and len(words) == 1:
            code = 0
        elif head == "false" and len(words) == 1:
            code = 1
            if "&&" in script:  # `false && ...` stops there; the common shapes put && after it
                return Script(seconds, 1)
        elif head == "echo":
            code = 0
        else:
            return None
    return Script(seconds, code)


def read_command(argv: list[str]) -> Script | None:
    """Read a container's command + args as a :class:`Script`, or None when it has no common shape.

    Recognised: ``sleep N``; ``true``; ``false``; ``sh -c '<script>'`` (see :func:`_read_shell`, e.g.
    ``sleep 30; exit 3`` is 30 s and exit 3); ``python -c`` with ``time.sleep(N)`` and optionally
    ``sys.exit(N)``.
    """
    if not argv:
        return None
    head = argv[0].rsplit("/", 1)[-1]
    if head == "sleep" and len(argv) == 2 and _number(argv[1]) is not None:
        return Script(_number(argv[1]) or 0.0, 0)
    if head == "true" and len(argv) == 1:
        return Script(0.0, 0)
    if head == "false" and len(argv) == 1:
        return Script(0.0, 1)
    if (argv[0] in _SHELLS or head in _SHELLS) and len(argv) >= 3 and argv[1] in ("-c", "-ec", "-ce"):
        return _read_shell(argv[2])
    if head.startswith("python") and len(argv) >= 3 and argv[1] == "-c":
        code = argv[2]
        sleeps = [float(m) for m in _PY_SLEEP.findall(code)]
        exits = _PY_EXIT.findall(code)
        if not sleeps and not exits:
            return None
        return Script(sum(sleeps), int(exits[-1]) % 256 if exits else 0)
    return None


def script_for(sandbox: Any, pod: dict[str, Any], argv: list[str]) -> Script:
    """The script of one container of ``pod``: annotations first, then the command, then the default.

    :raises ValueError: an annotation that is not a number (named in the message).
    """
    annotations = pod.get("metadata", {}).get("annotations") or {}
    default = float(getattr(sandbox, "simulated_default_seconds", 60.0))
    read = read_command(argv)
    seconds = read.seconds if read is not None else default
    exit_code = read.exit_code if read is not None else 0
    if DURATION_ANNOTATION in annotations:
        value = _number(str(annotations[DURATION_ANNOTATION]))
        if value is None:
            raise ValueError(
                f"annotation {DURATION_ANNOTATION}={annotations[DURATION_ANNOTATION]!r}: expected seconds >= 0"
            )
        seconds = value
    if EXIT_CODE_ANNOTATION in annotations:
        text = str(annotations[EXIT_CODE_ANNOTATION]).strip()
        if not text.isdigit() or int(text) > 255:
            raise ValueError(
                f"annotation {EXIT_CODE_ANNOTATION}={annotations[EXIT_CODE_ANNOTATION]!r}: expected 0..255"
            )
        exit_code = int(text)
    return Script(seconds, exit_code)


class SimulatedProcess:
    """Stands in for :class:`asyncio.subprocess.Process` in the kubelet: ``pid``, ``returncode``,
    ``stdout`` (one fixed line, then end of file when the script ends) and ``wait()``.

    A signal ends it the way it ends a shell that does not trap it: ``returncode`` is minus the
    signal number, which the kubelet reports as 128 + signal (143 for SIGTERM, 137 for SIGKILL).
    """

    def __init__(self, script: Script) -> None:
        self.pid = next(_PIDS)
        self.returncode: int | None = None
        self.stdout = asyncio.StreamReader()
        self.stdout.feed_data(LOG_LINE)
        self._done = asyncio.Event()
        self._timer = asyncio.get_running_loop().call_later(script.seconds, self._exit, script.exit_code)

    def _exit(self, code: int) -> None:
        if self.returncode is not None:
            return
        self._timer.cancel()
        self.returncode = code
        self.stdout.feed_eof()
        self._done.set()

    def send_signal(self, sig: int) -> None:
        self._exit(-int(sig))

    def kill(self) -> None:
        self.send_signal(signal.SIGKILL)

    async def wait(self) -> int:
        await self._done.wait()
        assert self.returncode is not None
        return self.returncode

    async def exited(self) -> int:
        """As :meth:`wait` (a simulated container has no pipe that could outlive it)."""
        return await self.wait()


def signal_group(proc: Any, sig: int) -> None:
    """Send ``sig`` to a container: to a simulated one directly, to a process's whole group otherwise."""
    import os

    if isinstance(proc, SimulatedProcess):
        proc.send_signal(sig)
        return
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(proc.pid, sig)


def start(sandbox: Any, pod: dict[str, Any] | None, argv: list[str]) -> Any:
    """A :class:`SimulatedProcess` for a container of ``pod`` when the pod is simulated, else None
    (the kubelet then starts a host process).

    :raises ValueError: a simulation annotation that is not a number; the kubelet reports it as the
        container's StartError.
    """
    if pod is None or not is_simulated(sandbox, pod):
        return None
    return SimulatedProcess(script_for(sandbox, pod, argv))
