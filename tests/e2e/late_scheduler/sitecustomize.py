"""Loaded (as ``sitecustomize``, from ``PYTHONPATH``) only by the process of the late scheduler in
``tests/e2e/test_late_scheduler.py``. Once ``$JOBWATCH_E2E_LATE_FILE`` exists:

* every write of this process's scheduler job heartbeat (``UPDATE job SET latest_heartbeat ...``) fails with
  SQLAlchemy's ``OperationalError``, as a statement or lock timeout on the job row makes it fail in a real
  deployment. Airflow's ``Job.heartbeat`` swallows that error and the scheduler loop goes on: the scheduler
  keeps queueing tasks and creating pods while its heartbeat stays stale, so its peer takes it for dead and
  adopts its task instances;
* its locked reads of task instances (``... FOR SHARE SKIP LOCKED``, the executor's check before a create)
  answer after a random delay of up to ``MAX_READ_DELAY_SECONDS``, as a scheduler whose database is slow
  or far away reads them. This spreads the moment of each check over the peer's adoption rounds (one a
  second): before a round, during its open transaction, after its commit.

Nothing else of the process is touched. Other processes of the same interpreter (the executor's watcher
child, ``python -m ...``) load this file too and do nothing.
"""

from __future__ import annotations

import os
import random
import sys
import time

MAX_READ_DELAY_SECONDS = 0.8


def _install() -> None:
    from sqlalchemy import event
    from sqlalchemy.engine import Engine
    from sqlalchemy.exc import OperationalError

    late_file = os.environ["JOBWATCH_E2E_LATE_FILE"]

    def late(conn, cursor, statement, parameters, context, executemany):  # type: ignore[no-untyped-def]
        text = " ".join(statement.split()).lower()
        # What the statement writes (its SET), not what it selects on: the orphan check's UPDATE of stale jobs
        # names latest_heartbeat in its WHERE and must run as usual.
        written = text.split(" where ", 1)[0]
        is_heartbeat = written.startswith("update job set") and "latest_heartbeat" in written
        is_locked_read = text.startswith("select") and "from task_instance" in text and "for share" in text
        if not (is_heartbeat or is_locked_read) or not os.path.exists(late_file):
            return
        if is_heartbeat:
            raise OperationalError(
                statement, parameters, RuntimeError("the late scheduler's heartbeat write timed out (test)")
            )
        time.sleep(random.uniform(0.0, MAX_READ_DELAY_SECONDS))

    event.listen(Engine, "before_cursor_execute", late)


# `airflow scheduler` only: not the watcher child, the credential helper or any other python process.
if os.environ.get("JOBWATCH_E2E_LATE_FILE") and sys.argv[1:2] == ["scheduler"]:
    _install()
