"""``run_dag``: one DAG run with ``dag.test()`` semantics, in a fresh Airflow, for a test.

Why a child process. On Airflow 3.3 ``dag.test()`` needs a migrated metadata database and the DAG's
file in a DAG bundle (``[core] dags_folder``): it parses the bundle and writes the serialized DAG before
it creates the run, and fails with "the dag is not serialized" otherwise. Airflow reads its
configuration (``AIRFLOW_HOME``, the database URL, ``dags_folder``) once, when it is first imported, so a
test process that has already imported Airflow cannot point it at a fresh home. A child Python process
gets its own ``AIRFLOW_HOME`` (a temporary directory), a SQLite database migrated there, and a
``dags_folder`` that holds the DAG's file; nothing of it leaks into the test process or into other tests.

The child inherits the environment, so the Airflow connection the ``jobwatch_sandbox`` fixture defines
(``AIRFLOW_CONN_KUBERNETES_DEFAULT``) reaches the sandbox, which keeps running in the test process; the
fault helpers work while the DAG runs (``during=``).
"""

from __future__ import annotations

import json
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

#: How long one run may take before the child is killed (seconds).
DEFAULT_TIMEOUT_SECONDS = 600.0

# dag.test() logs these around each task it runs (airflow/sdk/definitions/dag.py, _run_task); what is
# between them is that task's log (a deferred task's trigger runs in line, so its log is there too).
_START = re.compile(r"\[DAG TEST\] starting task_id=(?P<task>\S+) map_index=(?P<index>-?\d+)")
_END = re.compile(r"\[DAG TEST\] end task task_id=(?P<task>\S+) map_index=(?P<index>-?\d+)")


#: The bounds of ``airflow-jobwatch[testing-airflow<major><minor>]`` (pyproject.toml; :func:`testing_extra`)
#: for each Airflow minor whose ``dag.test()`` fails with the newest libraries pip picks; named when
#: :func:`run_dag` meets the failure.
TESTING_PINS: dict[str, tuple[str, ...]] = {
    "3.1": (),
    "3.2": ("fastapi<0.137", "cadwyn<8", "svcs<26"),
    "3.3": (),
}


def testing_extra(minor: str) -> str:
    """The extra of the installation page's command for Airflow ``minor`` ("3.2" -> "testing-airflow32").

    Lowercase letters, digits and single hyphens, so that every pip finds it as typed: pip before 23.3
    does not normalise a requested extra's name (PEP 685), and the wheel declares the normalised one.
    """
    return "testing-airflow" + minor.replace(".", "")


# What Airflow's in-process execution API (through which dag.test() runs every task) writes when it does
# not work with the installed libraries, and which libraries those are: Airflow 3.2.2 with fastapi >= 0.137
# and its cadwyn 8/9 (a pydantic schema error, raised on every request), and with svcs 26 (its lifespan
# no longer sets app.state.svcs_registry).
_LIBRARY_FAILURES = (
    (
        re.compile(r"PydanticUserError: Model '\w+' needs a discriminator field"),
        ("fastapi", "cadwyn", "pydantic"),
    ),
    (re.compile(r"'State' object has no attribute 'svcs_registry'"), ("svcs", "fastapi")),
)


class DagRunError(RuntimeError):
    """The DAG could not be run at all (not found, import error, Airflow failed, timeout); a run whose
    tasks fail is not an error: it returns a :class:`DagRunResult` with ``state == "failed"``."""


@dataclass
class TaskResult:
    """One task instance of the run.

    :ivar state: its final state (``"success"``, ``"failed"``, ``"skipped"``, ``"upstream_failed"``, ...).
    :ivar xcoms: its XComs by key (``"return_value"``, ``"job_name"``, ...), deserialized.
    :ivar log: the log lines written while it ran (its trigger's too, when it deferred).
    """

    task_id: str
    map_index: int
    state: str | None
    try_number: int
    xcoms: dict[str, Any] = field(default_factory=dict)
    log: str = ""


@dataclass
class DagRunResult:
    """What ``run_dag`` saw: the run's state, each task's :class:`TaskResult`, the whole output.

    ``tasks`` is keyed by task id; a mapped task's instances are ``"task_id[0]"``, ``"task_id[1]"``, ...
    """

    dag_id: str
    run_id: str
    state: str
    tasks: dict[str, TaskResult]
    log: str
    airflow_home: Path | None = None

    def task(self, task_id: str, map_index: int = -1) -> TaskResult:
        """The task instance ``task_id`` (``map_index`` for a mapped one)."""
        key = task_id if map_index < 0 else f"{task_id}[{map_index}]"
        try:
            return self.tasks[key]
        except KeyError:
            raise KeyError(
                f"no task instance {key!r} in DAG {self.dag_id!r}; there are {sorted(self.tasks)}"
            ) from None

    @property
    def states(self) -> dict[str, str | None]:
        """``{task key: state}``, for one-line assertions."""
        return {key: t.state for key, t in self.tasks.items()}


def run_dag(
    dag_or_file: Any,
    dag_id: str | None = None,
    *,
    dags_folder: str | os.PathLike[str] | None = None,
    run_conf: dict[str, Any] | None = None,
    logical_date: str | None = None,
    env: Mapping[str, str] | None = None,
    during: Callable[[], Any] | None = None,
    timeout: float = DEFAULT_TIMEOUT_SECONDS,
    keep_home: bool = False,
) -> DagRunResult:
    """Run one DAG with ``dag.test()`` in a fresh Airflow and return what each task did.

    :param dag_or_file: the DAG's file (a path, relative to the current directory or absolute), or a
        DAG object defined at module level of a file (its ``fileloc`` is used). A DAG built inside a
        test function cannot be found by Airflow's parser: write it to a file (``tmp_path / "my_dag.py"``).
    :param dag_id: which DAG of the file to run; needed only when the file defines several.
    :param dags_folder: the ``[core] dags_folder`` to use (it must hold the file), for DAGs that import
        modules beside them. By default a new folder holding a link to the file alone, so that the rest
        of the file's directory (your tests) is not parsed.
    :param run_conf: the run's ``conf`` (``dag.test(run_conf=...)``).
    :param logical_date: the run's logical date, ISO 8601 (default: now).
    :param env: extra environment for the run, e.g. ``{"AIRFLOW__OPERATORS__DEFAULT_DEFERRABLE": "True"}``.
    :param during: called in a thread of the test process while the DAG runs (to inject faults: wait for
        a pod, then evict it); an exception it raises stops the run and is raised here.
    :param timeout: seconds the run may take; then it is killed and :class:`DagRunError` is raised.
    :param keep_home: keep the temporary ``AIRFLOW_HOME`` (``result.airflow_home``) to look at afterwards.
    :raises DagRunError: the DAG could not be run (not found, import error, timeout).
    """
    path, dag_id = _dag_file(dag_or_file, dag_id)
    home = Path(tempfile.mkdtemp(prefix="jobwatch-run-dag-"))
    try:
        folder = _dags_folder(path, dags_folder, home)
        result_path = home / "result.json"
        spec = {
            "dag_file": str(folder / path.name) if dags_folder is None else str(path),
            "dag_id": dag_id,
            "run_conf": run_conf,
            "logical_date": logical_date,
            "result_path": str(result_path),
        }
        (home / "spec.json").write_text(json.dumps(spec))
        output, returncode = _run_child(home, folder, path.parent, env, during, timeout)
        if not result_path.exists():
            raise DagRunError(
                f"running DAG {dag_id or path.name} from {path} failed: "
                f"{_why_the_run_ended(output, returncode)}\n{_tail(output)}"
            )
        raw = json.loads(result_path.read_text())
        if raw.get("error"):
            raise DagRunError(f"{raw['error']}\n{_tail(output)}")
        if raw["state"] != "success":
            library_failure = _library_failure(output)
            if library_failure:
                raise DagRunError(f"{library_failure}\n{_tail(output)}")
        logs = _task_logs(output)
        tasks: dict[str, TaskResult] = {}
        for ti in raw["tasks"]:
            key = ti["task_id"] if ti["map_index"] < 0 else f"{ti['task_id']}[{ti['map_index']}]"
            tasks[key] = TaskResult(
                task_id=ti["task_id"],
                map_index=ti["map_index"],
                state=ti["state"],
                try_number=ti["try_number"],
                xcoms=ti["xcoms"],
                log=logs.get((ti["task_id"], ti["map_index"]), ""),
            )
        return DagRunResult(
            dag_id=raw["dag_id"],
            run_id=raw["run_id"],
            state=raw["state"],
            tasks=tasks,
            log=output,
            airflow_home=home if keep_home else None,
        )
    finally:
        if not keep_home:
            shutil.rmtree(home, ignore_errors=True)


def _dag_file(dag_or_file: Any, dag_id: str | None) -> tuple[Path, str | None]:
    if isinstance(dag_or_file, str | os.PathLike):
        path = Path(dag_or_file).resolve()
        if not path.is_file():
            raise DagRunError(f"run_dag: no DAG file at {path} (dag_or_file={dag_or_file!r})")
        return path, dag_id
    fileloc = getattr(dag_or_file, "fileloc", None)
    own_id = getattr(dag_or_file, "dag_id", None)
    if not fileloc or not own_id:
        raise DagRunError(
            f"run_dag expects a DAG file's path or a DAG object, got {type(dag_or_file).__name__}"
        )
    if dag_id is not None and dag_id != own_id:
        raise DagRunError(f"run_dag: dag_id={dag_id!r} but the DAG given is {own_id!r}")
    return Path(fileloc).resolve(), own_id


def _dags_folder(path: Path, dags_folder: str | os.PathLike[str] | None, home: Path) -> Path:
    if dags_folder is not None:
        folder = Path(dags_folder).resolve()
        if not path.is_relative_to(folder):
            raise DagRunError(f"run_dag: the DAG file {path} is not inside dags_folder={str(folder)!r}")
        return folder
    folder = home / "dags"
    folder.mkdir()
    (folder / path.name).symlink_to(path)
    return folder


def _run_child(
    home: Path,
    folder: Path,
    file_dir: Path,
    extra_env: Mapping[str, str] | None,
    during: Callable[[], Any] | None,
    timeout: float,
) -> tuple[str, int]:
    env = {k: v for k, v in os.environ.items() if k != "AIRFLOW_CONFIG"}
    env.update(
        AIRFLOW_HOME=str(home),
        AIRFLOW__CORE__DAGS_FOLDER=str(folder),
        AIRFLOW__CORE__LOAD_EXAMPLES="False",
        AIRFLOW__DATABASE__SQL_ALCHEMY_CONN=f"sqlite:///{home / 'airflow.db'}",
        PYTHONUNBUFFERED="1",
    )
    # Modules beside the DAG file import as they do from a dags_folder.
    env["PYTHONPATH"] = os.pathsep.join(p for p in (str(file_dir), env.get("PYTHONPATH", "")) if p)
    env.update(extra_env or {})
    log_path = home / "output.log"
    with open(log_path, "wb") as out:
        proc = subprocess.Popen(
            [sys.executable, "-m", "airflow_jobwatch_testing._child", str(home / "spec.json")],
            stdout=out,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            env=env,
            start_new_session=True,
        )
        failure: list[BaseException] = []
        helper = None
        if during is not None:

            def call() -> None:
                try:
                    during()
                except BaseException as exc:  # raised in the test once the run is stopped
                    failure.append(exc)
                    _kill(proc)

            helper = threading.Thread(target=call, name="run_dag-during", daemon=True)
            helper.start()
        try:
            proc.wait(timeout)
        except subprocess.TimeoutExpired:
            _kill(proc)
            raise DagRunError(
                f"the DAG run did not end within {timeout:.0f} s (timeout=); its output:\n"
                f"{_tail(log_path.read_text(errors='replace'))}"
            ) from None
        finally:
            if helper is not None:
                helper.join(timeout)
    if failure:
        raise failure[0]
    return log_path.read_text(errors="replace"), proc.returncode


def _library_failure(output: str) -> str | None:
    """What to install, when the run's tasks failed in Airflow's own execution API because of the
    libraries installed beside it (before any task's code ran); None otherwise."""
    from importlib.metadata import PackageNotFoundError, version

    for pattern, libraries in _LIBRARY_FAILURES:
        match = pattern.search(output)
        if match is None:
            continue
        installed = []
        for name in libraries:
            try:
                installed.append(f"{name} {version(name)}")
            except PackageNotFoundError:
                pass
        try:
            airflow = version("apache-airflow-core")
        except PackageNotFoundError:
            airflow = "?"
        minor = ".".join(airflow.split(".")[:2])
        pins = TESTING_PINS.get(minor, ())
        fix = f'pip install "airflow-jobwatch[{testing_extra(minor)}]"'
        if pins:
            fix += f" (it holds {' '.join(repr(p) for p in pins)})"
        return (
            f"the DAG's tasks failed inside Airflow's in-process execution API, which dag.test() runs "
            f"every task through, before their code ran: {match.group(0)}. Airflow {airflow} does not work "
            f"with the libraries installed here ({', '.join(installed)}). Install with: {fix}, or with "
            f"Airflow {airflow}'s constraints file. Its output:"
        )
    return None


def _why_the_run_ended(output: str, returncode: int) -> str:
    """The cause, in words, of a run whose process ended before it wrote its result."""
    if returncode < 0:
        try:
            how = f"was killed by {signal.Signals(-returncode).name}"
        except ValueError:
            how = f"was killed by signal {-returncode}"
    else:
        how = f"exited with code {returncode}"
    started = [(m["task"], int(m["index"])) for m in _START.finditer(output)]
    ended = {(m["task"], int(m["index"])) for m in _END.finditer(output)}
    running = [key for key in started if key not in ended]
    if not running:
        return f"the run's process {how} before it could report the run."
    task_id, map_index = running[-1]
    task = task_id if map_index < 0 else f"{task_id}[{map_index}]"
    return (
        f"the run's process {how} while task {task!r} ran. dag.test() runs every task in that one "
        f"process, so a task that ends its process (os._exit(), a signal, the kernel's OOM killer) ends "
        f"the whole run; under an executor, only that task would fail. Its output:"
    )


def _kill(proc: subprocess.Popen[bytes]) -> None:
    try:
        os.killpg(proc.pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass
    proc.wait()


def _task_logs(output: str) -> dict[tuple[str, int], str]:
    logs: dict[tuple[str, int], list[str]] = {}
    current: tuple[str, int] | None = None
    for line in output.splitlines():
        start = _START.search(line)
        if start:
            current = (start["task"], int(start["index"]))
            logs.setdefault(current, [])
        if current is not None:
            logs[current].append(line)
        end = _END.search(line)
        if end:
            current = None
    return {key: "\n".join(lines) + "\n" for key, lines in logs.items()}


def _tail(text: str, lines: int = 60) -> str:
    return "\n".join(text.splitlines()[-lines:])
