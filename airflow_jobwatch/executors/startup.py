"""What ``JobWatchExecutor.start()`` checks before it starts anything, so that a configuration mistake
stops the scheduler's executor at start, in words that name the setting, and not each task later.

* ``[kubernetes_executor] pod_template_file`` set but missing, unreadable or not YAML: the path and the
  reason (:func:`~airflow_jobwatch.pod_template.pod_template_problem`).
* A ``[jobwatch]`` option of the wrong kind or out of its range: the option, the value and what it
  accepts, as Airflow's own ``AirflowConfigException`` (the provider's internal error class is not named).
* An option set in ``[jobwatch]`` that does not exist: a warning naming the closest option.
"""

from __future__ import annotations

from typing import Any

from airflow_jobwatch import config as jobwatch_config
from airflow_jobwatch.pod_template import pod_template_problem

#: The [jobwatch] options the executor reads when it starts (its watch engine's and its supervisor's).
EXECUTOR_START_OPTIONS = (*jobwatch_config.TRIGGER_OPTIONS, "watcher_unresponsive_after_seconds")


def check_executor_configuration(kube_config: Any, *, source: Any = None, log: Any) -> None:
    """Raise ``AirflowConfigException`` ("JobWatchExecutor cannot start: ...") for the first unusable
    setting; log a warning for each unknown ``[jobwatch]`` option.

    :param kube_config: the executor's ``KubeConfig`` (its ``pod_template_file``).
    :param source: the executor's configuration (a team's ``ExecutorConf``, or None for Airflow's).
    :param log: the executor's logger.
    """
    from airflow.exceptions import AirflowConfigException

    jobwatch_config.warn_unknown_options(log)
    problem = pod_template_problem(getattr(kube_config, "pod_template_file", None))
    if problem:
        raise AirflowConfigException(
            f"JobWatchExecutor cannot start: [kubernetes_executor] pod_template_file: {problem}"
        )
    try:
        jobwatch_config.check_options(EXECUTOR_START_OPTIONS, source=source)
    except jobwatch_config.JobwatchConfigError as err:
        raise AirflowConfigException(f"JobWatchExecutor cannot start: {err}") from None
