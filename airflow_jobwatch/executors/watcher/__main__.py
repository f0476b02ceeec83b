"""``python -m airflow_jobwatch.executors.watcher``: the KubernetesJobWatcher child (see :func:`.child.main_from_stdin`)."""

from __future__ import annotations

from airflow_jobwatch.executors.watcher.child import main_from_stdin

if __name__ == "__main__":
    main_from_stdin()
