"""A throwaway Airflow installation running on the embedded Kubernetes sandbox.

    from support.stack import AirflowStack

    with AirflowStack(dag_ids=["executor_scenarios"]) as stack:
        run_id = stack.trigger_dag("executor_scenarios")
        stack.wait_for_run("executor_scenarios", run_id, timeout=120)
        print(stack.task_states("executor_scenarios", run_id))
        stack.admin.fault("drop_watches")          # sandbox faults, at run time
        stack.kill("scheduler"); stack.start("scheduler")

What it does, in order (each step has a deadline and fails with the log tail of the process at fault):

1. a temp ``AIRFLOW_HOME`` with SQLite, ``airflow db migrate`` (once per test process: later stacks start
   from a copy of the migrated database file);
2. the sandbox as a subprocess (:class:`~airflow_jobwatch_testing.sandbox.process.SandboxProcess`, which runs
   ``python -m airflow_jobwatch_testing.sandbox``; options passed through), its kubeconfig and an
   :class:`~airflow_jobwatch_testing.sandbox.admin.AdminClient` (``stack.admin``) for faults;
3. Airflow configuration as ``AIRFLOW__*`` environment variables shared by every process: the
   executor, ``[kubernetes_executor]`` pointing at the sandbox (``config_file``, ``in_cluster =
   False``, namespace ``default``, a pod template whose container runs this venv's python), the
   DAGs folder, small scheduler intervals, a shared JWT secret so workers can call the execution API;
4. the chosen processes (api-server, scheduler, dag-processor, optionally triggerer), each in its own
   process group with the venv's ``bin`` first on PATH, logs under ``AIRFLOW_HOME/proc-logs``;
5. on exit, every process group is killed (SIGTERM, then SIGKILL), and the temp dir removed unless
   ``keep=True``.

Worker pods are local processes of the sandbox, so they inherit the sandbox's environment, which is
this same configuration: ``python -m airflow.sdk.execution_time.execute_workload`` in a pod really
runs the task in this venv and reports to this stack's api-server.
"""

from __future__ import annotations

import atexit
import functools
import json
import os
import re
import secrets
import shutil
import signal
import socket
import sqlite3
import subprocess
import sys
import tempfile
import time
import urllib.request
from collections.abc import Callable, Iterable, Mapping
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

from airflow_jobwatch_testing.pod_template import pod_template_yaml
from airflow_jobwatch_testing.sandbox.process import SandboxProcess, SandboxStartError, stop_process_group

REPO_ROOT = Path(__file__).resolve().parents[2]
DEFAULT_DAGS_FOLDER = REPO_ROOT / "dags_example"
VENV_BIN = Path(sys.executable).parent

PROCESS_COMMANDS: dict[str, list[str]] = {
    "scheduler": ["scheduler"],
    "dag-processor": ["dag-processor"],
    "triggerer": ["triggerer"],
    # api-server gets its port appended at start.
    "api-server": ["api-server", "--workers", "1", "--host", "127.0.0.1"],
}

TERMINAL_RUN_STATES = frozenset({"success", "failed"})

# A freshly migrated SQLite metadata database, made by this test process's first SQLite stack: a later
# stack copies it instead of migrating again (the schema does not depend on the stack's configuration).
_migrated_sqlite: Path | None = None


def _kind(name: str) -> str:
    """``scheduler#2`` -> ``scheduler``: the Airflow command of a (possibly numbered) process name."""
    return name.split("#", 1)[0]


class StackError(RuntimeError):
    """A step of the stack did not complete; the message includes the relevant log tail."""


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def wait_until(condition: Callable[[], Any], *, timeout: float, what: str, interval: float = 0.2) -> Any:
    """Poll ``condition`` until it returns something truthy (and return that); :class:`StackError`
    naming ``what`` after ``timeout`` seconds. For the stack's own waits and for the e2e tests."""
    deadline = time.monotonic() + timeout
    while True:
        value = condition()
        if value:
            return value
        if time.monotonic() > deadline:
            raise StackError(f"timed out after {timeout:.0f} s waiting for {what}")
        time.sleep(interval)


class AirflowStack:
    """Context manager that runs Airflow processes with JobWatchExecutor on the sandbox.

    :param processes: Airflow processes to start (``scheduler``, ``api-server``, ``dag-processor``,
        ``triggerer``). The api-server is needed whenever tasks run (execution API).
    :param triggerer: shortcut to add ``triggerer`` to ``processes``.
    :param executor: ``[core] executor``; JobWatchExecutor by default (the benchmark and comparisons
        may pass the upstream ``KubernetesExecutor``).
    :param dags_folder: the DAGs folder; ``dags_example/`` of this repo by default.
    :param dag_ids: DAGs to wait for (parsed and serialized) before ``__enter__`` returns.
    :param sandbox_args: extra CLI options of ``python -m airflow_jobwatch_testing.sandbox``
        (e.g. ``["--history-window", "1", "--bookmark-interval", "1"]``).
    :param config: extra Airflow options, ``{("section", "key"): "value"}``; they override the defaults.
    :param env: extra environment variables for every process (and so every pod).
    :param process_env: extra environment variables of one process only, by process name
        (``{"scheduler#2": {...}}``), on top of ``env``; pods do not get them.
    :param parallelism: ``[core] parallelism``.
    :param base_dir: where to create the temp ``AIRFLOW_HOME`` (default: the system temp dir).
    :param database_url: ``[database] sql_alchemy_conn`` (e.g. :attr:`PostgresServer.url
        <support.postgres.PostgresServer.url>`); SQLite in ``AIRFLOW_HOME`` by default.
        Process names may carry a ``#N`` suffix to run several of one kind (HA):
        ``processes=("api-server", "scheduler", "scheduler#2", ...)``.
    :param keep: keep the temp directory on exit (for debugging).
    :param start_timeout: seconds allowed for each start-up step.
    """

    def __init__(
        self,
        *,
        processes: Iterable[str] = ("api-server", "scheduler", "dag-processor"),
        triggerer: bool = False,
        executor: str = "airflow_jobwatch.executors.JobWatchExecutor",
        dags_folder: str | os.PathLike[str] | None = None,
        dag_ids: Iterable[str] = (),
        sandbox_args: Iterable[str] = (),
        config: Mapping[tuple[str, str], str] | None = None,
        env: Mapping[str, str] | None = None,
        process_env: Mapping[str, Mapping[str, str]] | None = None,
        parallelism: int = 16,
        base_dir: str | os.PathLike[str] | None = None,
        keep: bool = False,
        start_timeout: float = 90.0,
        database_url: str | None = None,
    ) -> None:
        self.processes = list(dict.fromkeys([*processes, *(["triggerer"] if triggerer else [])]))
        unknown = [p for p in self.processes if _kind(p) not in PROCESS_COMMANDS]
        if unknown:
            raise ValueError(
                f"unknown Airflow process(es) {unknown}; expected some of {sorted(PROCESS_COMMANDS)}"
            )
        self.executor = executor
        self.dags_folder = Path(dags_folder or DEFAULT_DAGS_FOLDER).resolve()
        self.dag_ids = list(dag_ids)
        self.sandbox_args = list(sandbox_args)
        self.extra_config = dict(config or {})
        self.extra_env = dict(env or {})
        self.process_env = {name: dict(values) for name, values in (process_env or {}).items()}
        self.parallelism = parallelism
        self.base_dir = base_dir
        self.keep = keep
        self.start_timeout = start_timeout
        self.database_url = database_url
        self.home: Path = Path()
        self.env: dict[str, str] = {}
        self.procs: dict[str, subprocess.Popen[bytes]] = {}
        self.sandbox: SandboxProcess | None = None
        self.sandbox_url = ""
        self.kubeconfig = Path()
        self.api_port = 0
        self.admin: Any = None
        self.status_file = Path()

    # --- context manager -----------------------------------------------------------------

    def __enter__(self) -> AirflowStack:
        try:
            self._setup()
        except BaseException:
            self.close()
            raise
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def _setup(self) -> None:
        self.home = Path(tempfile.mkdtemp(prefix="jobwatch-airflow-", dir=self.base_dir))
        (self.home / "proc-logs").mkdir()
        (self.home / "logs").mkdir()
        self.kubeconfig = self.home / "kubeconfig"
        self.status_file = self.home / "executor-status.json"
        self.api_port = _free_port()
        pod_template = self.home / "pod_template.yaml"
        pod_template.write_text(pod_template_yaml())
        # Pods inherit the sandbox's environment: it gets the full Airflow configuration too.
        self.env = self._build_env(pod_template)
        self._start_sandbox()
        self._migrate()
        for name in self.processes:
            self.start(name)
        self.wait_ready()

    def _migrate(self) -> None:
        global _migrated_sqlite
        if self.database_url is not None:
            self._run_cli(["db", "migrate"], timeout=self.start_timeout)
            return
        database = self.home / "airflow.db"
        if _migrated_sqlite is not None and _migrated_sqlite.exists():
            shutil.copyfile(_migrated_sqlite, database)
            return
        self._run_cli(["db", "migrate"], timeout=self.start_timeout)
        # The migrate process has exited: the file is complete and no connection holds it.
        cache_dir = Path(tempfile.mkdtemp(prefix="jobwatch-airflow-db-", dir=self.base_dir))
        atexit.register(shutil.rmtree, cache_dir, True)
        shutil.copyfile(database, cache_dir / "airflow.db")
        _migrated_sqlite = cache_dir / "airflow.db"

    def _build_env(self, pod_template: Path) -> dict[str, str]:
        env = {k: v for k, v in os.environ.items() if not k.startswith("AIRFLOW__")}
        env["PATH"] = f"{VENV_BIN}{os.pathsep}{env.get('PATH', '')}"
        env["AIRFLOW_HOME"] = str(self.home)
        env["PYTHONUNBUFFERED"] = "1"
        base_url = f"http://127.0.0.1:{self.api_port}"
        cfg: dict[tuple[str, str], str] = {
            ("core", "executor"): self.executor,
            ("core", "dags_folder"): str(self.dags_folder),
            ("core", "load_examples"): "False",
            ("core", "dags_are_paused_at_creation"): "False",
            ("core", "parallelism"): str(self.parallelism),
            ("core", "execution_api_server_url"): f"{base_url}/execution/",
            ("core", "simple_auth_manager_all_admins"): "True",
            ("database", "sql_alchemy_conn"): self.database_url or f"sqlite:///{self.home / 'airflow.db'}",
            ("api", "base_url"): base_url,
            ("api", "port"): str(self.api_port),
            ("api_auth", "jwt_secret"): secrets.token_urlsafe(32),
            ("logging", "base_log_folder"): str(self.home / "logs"),
            ("scheduler", "scheduler_heartbeat_sec"): "1",
            ("scheduler", "scheduler_health_check_threshold"): "6",
            ("scheduler", "orphaned_tasks_check_interval"): "5",
            ("scheduler", "scheduler_idle_sleep_time"): "0.2",
            ("scheduler", "task_queued_timeout"): "180",
            ("dag_processor", "refresh_interval"): "3",
            ("dag_processor", "min_file_process_interval"): "30",
            ("kubernetes_executor", "config_file"): str(self.kubeconfig),
            ("kubernetes_executor", "in_cluster"): "False",
            ("kubernetes_executor", "namespace"): "default",
            ("kubernetes_executor", "pod_template_file"): str(pod_template),
            ("kubernetes_executor", "delete_worker_pods"): "True",
            ("kubernetes_executor", "delete_worker_pods_on_failure"): "True",
            ("kubernetes_executor", "worker_pods_creation_batch_size"): "16",
            ("jobwatch", "executor_status_file"): str(self.status_file),
            ("jobwatch", "watcher_unresponsive_after_seconds"): "15",
            ("jobwatch", "watch_stall_timeout_seconds"): "10",
            ("jobwatch", "backoff_max_seconds"): "5",
        }
        cfg.update(self.extra_config)
        for (section, key), value in cfg.items():
            env[f"AIRFLOW__{section.upper()}__{key.upper()}"] = value
        env.update(self.extra_env)
        return env

    def _start_sandbox(self) -> None:
        self.sandbox = SandboxProcess(
            self.kubeconfig,
            args=self.sandbox_args,
            env=self.env,
            cwd=self.home,
            log=self.home / "proc-logs" / "sandbox.log",
            start_timeout=self.start_timeout,
        )
        try:
            self.sandbox.start()
        except SandboxStartError as err:
            raise StackError(str(err)) from None
        self.sandbox_url = self.sandbox.url
        self.admin = self.sandbox.admin

    # --- processes -----------------------------------------------------------------------

    def _run_cli(self, args: list[str], *, timeout: float) -> str:
        proc = subprocess.run(
            [str(VENV_BIN / "airflow"), *args],
            env=self.env,
            capture_output=True,
            timeout=timeout,
            cwd=self.home,
        )
        if proc.returncode != 0:
            raise StackError(
                f"`airflow {' '.join(args)}` exited with {proc.returncode}:\n"
                f"{proc.stdout.decode(errors='replace')[-3000:]}\n{proc.stderr.decode(errors='replace')[-3000:]}"
            )
        return proc.stdout.decode(errors="replace")

    def start(self, name: str) -> None:
        """Start (or restart) one Airflow process."""
        if _kind(name) not in PROCESS_COMMANDS:
            raise ValueError(f"unknown Airflow process {name!r}; expected one of {sorted(PROCESS_COMMANDS)}")
        existing = self.procs.get(name)
        if existing is not None and existing.poll() is None:
            raise StackError(f"{name} is already running (pid {existing.pid})")
        args = list(PROCESS_COMMANDS[_kind(name)])
        if name == "api-server":
            args += ["--port", str(self.api_port)]
        log = (self.home / "proc-logs" / f"{name}.log").open("ab")
        log.write(f"\n===== start {name} at {time.strftime('%H:%M:%S')} =====\n".encode())
        log.flush()
        self.procs[name] = subprocess.Popen(
            [str(VENV_BIN / "airflow"), *args],
            stdout=log,
            stderr=subprocess.STDOUT,
            env={**self.env, **self.process_env.get(name, {})},
            start_new_session=True,  # own process group: kill() takes its children (watchers) too
            cwd=self.home,
        )

    def kill(self, name: str, sig: int = signal.SIGKILL, *, wait: float = 15.0) -> None:
        """Send ``sig`` to a process's whole group (SIGKILL by default) and wait for it to exit."""
        if name == "sandbox":
            if self.sandbox is not None:
                self.sandbox.stop(sig=sig, timeout=wait)
            return
        proc = self.procs.get(name)
        if proc is not None:
            stop_process_group(proc, sig=sig, timeout=wait)

    def restart(self, name: str, sig: int = signal.SIGKILL) -> None:
        self.kill(name, sig)
        self.start(name)

    def wait_ready(self, timeout: float | None = None) -> None:
        timeout = timeout or self.start_timeout
        if "api-server" in self.processes:
            self._wait_alive(
                "api-server", self._api_healthy, timeout, "the api-server to answer /api/v2/monitor/health"
            )
        schedulers = [p for p in self.processes if _kind(p) == "scheduler"]
        if schedulers:
            self._wait_alive(
                schedulers[0],
                lambda: self._scheduler_running(len(schedulers)),
                timeout,
                f"{len(schedulers)} running SchedulerJob(s)",
            )
        for dag_id in self.dag_ids:
            self._wait_alive(
                "dag-processor",
                functools.partial(self._dag_serialized, dag_id),
                timeout,
                f"DAG {dag_id!r} to be parsed",
            )

    def _wait_alive(self, name: str, condition: Callable[[], Any], timeout: float, what: str) -> None:
        def check() -> Any:
            proc = self.procs.get(name)
            if proc is not None and proc.poll() is not None:
                raise StackError(
                    f"{name} exited with {proc.returncode} while waiting for {what}\n{self.log_tail(name)}"
                )
            return condition()

        try:
            wait_until(check, timeout=timeout, what=what)
        except StackError as err:
            raise StackError(f"{err}\n{self.log_tail(name)}") from None

    def _api_healthy(self) -> bool:
        try:
            with urllib.request.urlopen(
                f"http://127.0.0.1:{self.api_port}/api/v2/monitor/health", timeout=2
            ) as r:
                return bool(r.status == 200)
        except OSError:
            return False

    def _scheduler_running(self, count: int = 1) -> bool:
        rows = self.query("SELECT id FROM job WHERE job_type = 'SchedulerJob' AND state = 'running'")
        return len(rows) >= count

    def _dag_serialized(self, dag_id: str) -> bool:
        return bool(self.query("SELECT 1 FROM serialized_dag WHERE dag_id = ?", (dag_id,)))

    def scheduler_job_id(self, name: str) -> int | None:
        """The SchedulerJob id of a scheduler process's latest start, from its log (our executor logs
        it when it starts); None before the executor started."""
        path = self.home / "proc-logs" / f"{name}.log"
        try:
            text = path.read_text(errors="replace")
        except OSError:
            return None
        latest = text.rsplit(f"===== start {name} at ", 1)[-1]
        found = re.findall(r"Starting JobWatchExecutor \(scheduler job (\d+),", latest)
        return int(found[-1]) if found else None

    def log_tail(self, name: str, lines: int = 60) -> str:
        path = self.home / "proc-logs" / f"{name}.log"
        try:
            text = path.read_text(errors="replace").splitlines()
        except OSError:
            return f"(no log for {name})"
        return f"--- last {lines} lines of {path} ---\n" + "\n".join(text[-lines:])

    def close(self) -> None:
        # Every Airflow process is asked to stop at once (each gets its own 10 s before SIGKILL), then the
        # sandbox, whose pods may still be reporting to them.
        def stop(name: str) -> None:
            try:
                self.kill(name, signal.SIGTERM, wait=10)
            except Exception:
                pass

        if self.procs:
            with ThreadPoolExecutor(len(self.procs)) as pool:
                list(pool.map(stop, list(self.procs)))
        if self.sandbox is not None:
            try:
                self.kill("sandbox", signal.SIGTERM, wait=10)
            except Exception:
                pass
        if self.home != Path() and not self.keep:
            shutil.rmtree(self.home, ignore_errors=True)

    # --- metadata database ---------------------------------------------------------------

    def query(self, sql: str, params: tuple[Any, ...] = ()) -> list[tuple[Any, ...]]:
        """Run a read-only query (``?`` placeholders) on the metadata database, SQLite or PostgreSQL."""
        if self.database_url and self.database_url.startswith("postgresql"):
            return self._query_postgres(sql.replace("?", "%s"), params)
        db = self.home / "airflow.db"
        if not db.exists():
            return []
        for attempt in range(20):
            try:
                con = sqlite3.connect(f"file:{db}?mode=ro", uri=True, timeout=5)
                try:
                    return list(con.execute(sql, params).fetchall())
                finally:
                    con.close()
            except sqlite3.OperationalError as err:
                if "locked" not in str(err) and "no such table" not in str(err):
                    raise
                time.sleep(0.05 * (attempt + 1))
        return []

    def _query_postgres(self, sql: str, params: tuple[Any, ...]) -> list[tuple[Any, ...]]:
        import psycopg2
        from sqlalchemy.engine import make_url

        url = make_url(self.database_url or "")
        try:
            con = psycopg2.connect(
                host=url.host,
                port=url.port,
                user=url.username,
                password=url.password,
                dbname=url.database,
                connect_timeout=5,
            )
        except psycopg2.OperationalError:
            return []
        try:
            con.autocommit = True
            with con.cursor() as cur:
                try:
                    cur.execute(sql, params)
                except psycopg2.errors.UndefinedTable:
                    return []  # before `airflow db migrate` finished
                return list(cur.fetchall()) if cur.description else []
        finally:
            con.close()

    def scheduler_job_ids(self) -> list[int]:
        return [r[0] for r in self.query("SELECT id FROM job WHERE job_type = 'SchedulerJob' ORDER BY id")]

    def trigger_dag(
        self, dag_id: str, *, conf: Mapping[str, Any] | None = None, run_id: str | None = None
    ) -> str:
        """Trigger a DAG run with the CLI; returns its run_id."""
        run_id = run_id or f"e2e__{dag_id}__{int(time.time() * 1000)}"
        args = ["dags", "trigger", dag_id, "--run-id", run_id]
        if conf:
            args += ["--conf", json.dumps(dict(conf))]
        self._run_cli(args, timeout=60)
        return run_id

    def run_state(self, dag_id: str, run_id: str) -> str | None:
        rows = self.query("SELECT state FROM dag_run WHERE dag_id = ? AND run_id = ?", (dag_id, run_id))
        return rows[0][0] if rows else None

    def wait_for_run(self, dag_id: str, run_id: str, *, timeout: float = 180.0) -> str:
        """Wait until the DAG run is success/failed; returns that state."""

        def done() -> str | None:
            state = self.run_state(dag_id, run_id)
            return state if state in TERMINAL_RUN_STATES else None

        try:
            return str(
                wait_until(done, timeout=timeout, what=f"DAG run {dag_id}/{run_id} to finish", interval=0.5)
            )
        except StackError as err:
            raise StackError(
                f"{err}\ntask states: {self.task_states(dag_id, run_id)}\n{self.log_tail('scheduler')}"
            ) from None

    def task_states(self, dag_id: str, run_id: str) -> dict[str, dict[str, Any]]:
        """``{task_id (or task_id[map_index]): {"state", "try_number", "max_tries"}}`` from the DB."""
        rows = self.query(
            "SELECT task_id, map_index, state, try_number, max_tries FROM task_instance "
            "WHERE dag_id = ? AND run_id = ?",
            (dag_id, run_id),
        )
        out: dict[str, dict[str, Any]] = {}
        for task_id, map_index, state, try_number, max_tries in rows:
            name = task_id if map_index < 0 else f"{task_id}[{map_index}]"
            out[name] = {"state": state, "try_number": try_number, "max_tries": max_tries}
        return out

    def task_log(self, dag_id: str, run_id: str, task_id: str, try_number: int, map_index: int = -1) -> str:
        """The task's log (JSON lines) as a user reads it: the file the worker and the executor write, then
        the triggerer's files beside it (``attempt=N.log.trigger.<id>.log``), which Airflow's log reader
        shows with it; '' if none."""
        base = self.home / "logs" / f"dag_id={dag_id}" / f"run_id={run_id}" / f"task_id={task_id}"
        if map_index >= 0:
            base = base / f"map_index={map_index}"
        texts = []
        for path in sorted(base.glob(f"attempt={try_number}.log*")):
            try:
                texts.append(path.read_text(errors="replace"))
            except OSError:
                continue
        return "\n".join(texts)

    def audit_events(self, dag_id: str, run_id: str, event: str = "state mismatch") -> list[str]:
        rows = self.query(
            "SELECT task_id, extra FROM log WHERE dag_id = ? AND run_id = ? AND event = ?",
            (dag_id, run_id, event),
        )
        return [f"{t}: {e}" for t, e in rows]

    def executor_status(self) -> dict[str, Any]:
        """The counters JobWatchExecutor writes to ``[jobwatch] executor_status_file``."""
        try:
            return dict(json.loads(self.status_file.read_text()))
        except (OSError, ValueError):
            return {}
