"""A throwaway PostgreSQL server for the HA end-to-end tests (Airflow in production runs on PostgreSQL).

Uses Debian's ``postgresql`` package (``/usr/lib/postgresql/<version>/bin/initdb`` and ``pg_ctl``;
``.ci/run`` installs it when missing): a fresh cluster in a temp dir, listening on 127.0.0.1 only
(and a Unix socket inside that dir, never the system's ``/var/run/postgresql``), trust authentication
for one user, fsync off (a test database need not survive a power cut). PostgreSQL refuses to run as
root, so when we are root the cluster belongs to the unprivileged ``postgres`` user (created by the
Debian package) or, failing that, ``nobody``.

    with PostgresServer() as pg:
        env["AIRFLOW__DATABASE__SQL_ALCHEMY_CONN"] = pg.url
"""

from __future__ import annotations

import glob
import os
import pwd
import shutil
import socket
import subprocess
import tempfile
import time
from pathlib import Path
from typing import Any

START_TIMEOUT_SECONDS = 60


class PostgresUnavailable(RuntimeError):
    """PostgreSQL's server binaries are not installed (``apt-get install -y postgresql``)."""


def find_bin_dir() -> Path:
    """The newest ``/usr/lib/postgresql/<version>/bin`` that has ``initdb`` and ``pg_ctl``."""
    candidates = sorted(
        (Path(p) for p in glob.glob("/usr/lib/postgresql/*/bin") if (Path(p) / "initdb").exists()),
        key=lambda p: int(p.parent.name) if p.parent.name.isdigit() else 0,
    )
    if not candidates:
        raise PostgresUnavailable(
            "PostgreSQL server binaries not found under /usr/lib/postgresql/*/bin; "
            "install them with `apt-get install -y postgresql`"
        )
    return candidates[-1]


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class PostgresServer:
    """One PostgreSQL cluster in a temp dir, started by :meth:`start` and removed by :meth:`stop`.

    :param user: the database superuser (trust auth on 127.0.0.1) and owner of ``database``.
    :param database: a database created at start.
    :param base_dir: where to create the temp dir (default: the system temp dir).
    """

    def __init__(
        self, *, user: str = "airflow", database: str = "airflow", base_dir: str | None = None
    ) -> None:
        self.user = user
        self.database = database
        self.base_dir = base_dir
        self.bin_dir = find_bin_dir()
        self.port = 0
        self.dir = Path()
        self._run_as: pwd.struct_passwd | None = None

    @property
    def url(self) -> str:
        """SQLAlchemy URL for Airflow's ``[database] sql_alchemy_conn``."""
        return f"postgresql+psycopg2://{self.user}@127.0.0.1:{self.port}/{self.database}"

    @property
    def dsn(self) -> str:
        """libpq connection string (psycopg2.connect)."""
        return f"host=127.0.0.1 port={self.port} user={self.user} dbname={self.database}"

    def __enter__(self) -> PostgresServer:
        self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def _run(self, args: list[str], *, timeout: float = START_TIMEOUT_SECONDS) -> None:
        def demote() -> None:
            if self._run_as is not None:
                os.setgid(self._run_as.pw_gid)
                os.setuid(self._run_as.pw_uid)

        proc = subprocess.run(
            args,
            capture_output=True,
            timeout=timeout,
            preexec_fn=demote if self._run_as is not None else None,
            cwd=self.dir,
            env={**os.environ, "LC_ALL": "C", "LANG": "C"},
        )
        if proc.returncode != 0:
            out = (proc.stdout + proc.stderr).decode(errors="replace")[-2000:]
            log = self.dir / "postgres.log"
            tail = log.read_text(errors="replace")[-2000:] if log.exists() else ""
            raise RuntimeError(f"{Path(args[0]).name} failed with {proc.returncode}:\n{out}\n{tail}")

    def start(self) -> None:
        self.dir = Path(tempfile.mkdtemp(prefix="jobwatch-pg-", dir=self.base_dir))
        if os.geteuid() == 0:
            for candidate in ("postgres", "nobody"):
                try:
                    self._run_as = pwd.getpwnam(candidate)
                    break
                except KeyError:
                    continue
            if self._run_as is None:
                raise RuntimeError(
                    "running as root and no unprivileged user (postgres, nobody) to run PostgreSQL"
                )
            os.chown(self.dir, self._run_as.pw_uid, self._run_as.pw_gid)
        data = self.dir / "data"
        self._run(
            [
                str(self.bin_dir / "initdb"),
                "-D",
                str(data),
                "-U",
                self.user,
                "--auth=trust",
                "-E",
                "UTF8",
                "--no-sync",
            ]
        )
        self.port = _free_port()
        options = (
            f"-h 127.0.0.1 -p {self.port} -k {self.dir} -c fsync=off -c synchronous_commit=off "
            "-c full_page_writes=off -c max_connections=200"
        )
        self._run(
            [
                str(self.bin_dir / "pg_ctl"),
                "-D",
                str(data),
                "-o",
                options,
                "-l",
                str(self.dir / "postgres.log"),
                "-w",
                "-t",
                str(START_TIMEOUT_SECONDS),
                "start",
            ]
        )
        self._run(
            [
                str(self.bin_dir / "createdb"),
                "-h",
                "127.0.0.1",
                "-p",
                str(self.port),
                "-U",
                self.user,
                self.database,
            ]
        )

    def stop(self) -> None:
        if self.dir == Path():
            return
        data = self.dir / "data"
        if (data / "postmaster.pid").exists():
            try:
                self._run(
                    [str(self.bin_dir / "pg_ctl"), "-D", str(data), "-m", "immediate", "-w", "stop"],
                    timeout=30,
                )
            except Exception:
                pass
        shutil.rmtree(self.dir, ignore_errors=True)
        self.dir = Path()

    def query(self, sql: str, params: tuple[Any, ...] = ()) -> list[tuple[Any, ...]]:
        """Run one query (``%s`` placeholders) and return its rows (psycopg2, autocommit)."""
        import psycopg2

        deadline = time.monotonic() + 10
        while True:
            try:
                con = psycopg2.connect(self.dsn, connect_timeout=5)
                break
            except psycopg2.OperationalError:
                if time.monotonic() > deadline:
                    raise
                time.sleep(0.2)
        try:
            con.autocommit = True
            with con.cursor() as cur:
                cur.execute(sql, params)
                return list(cur.fetchall()) if cur.description else []
        finally:
            con.close()


__all__ = ["PostgresServer", "PostgresUnavailable", "find_bin_dir"]
