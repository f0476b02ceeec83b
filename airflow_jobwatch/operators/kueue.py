"""KubernetesStartKueueJobOperator: a Job that waits in a Kueue queue, on our KubernetesJobOperator.

Upstream's operator of the same name (``airflow.providers.cncf.kubernetes.operators.kueue``) has the
same arguments, validation and labels: ``queue_name``; ``suspend`` must not be False (it is set to True
when left unset, with the same log line), and the Job gets the ``kueue.x-k8s.io/queue-name`` label and
annotation. What differs is the wait (see ``docs/migration.md``): upstream lists the Job's pods right
after creating it and fails when there are none, which is exactly the state of a Job Kueue has not
admitted yet; ours waits through the suspension (``JobTrigger`` keeps waiting on a suspended Job, and
logs its admission, and its preemption when Kueue suspends it again), deferred or in the worker.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from airflow.providers.common.compat.sdk import AirflowException

from airflow_jobwatch.operators.job import KubernetesJobOperator
from airflow_jobwatch.triggers.notes import QUEUE_LABEL

__all__ = ["KubernetesStartKueueJobOperator"]


class KubernetesStartKueueJobOperator(KubernetesJobOperator):
    """
    Run a Kubernetes Job through Kueue: created suspended in ``queue_name``, started when Kueue admits it.

    Takes every parameter of :class:`~airflow_jobwatch.operators.job.KubernetesJobOperator`, and:

    :param queue_name: the Kueue LocalQueue to submit the Job to (label and annotation
        ``kueue.x-k8s.io/queue-name``).
    """

    template_fields: Sequence[str] = ("queue_name", *KubernetesJobOperator.template_fields)

    def __init__(self, *, queue_name: str, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.queue_name = queue_name
        if self.suspend is False:
            raise AirflowException(
                "The `suspend` parameter can't be False. If you want to use Kueue for running Job"
                " in a Kubernetes cluster, set the `suspend` parameter to True.",
            )
        if self.suspend is None:
            self.log.info(
                "You have not set parameter `suspend` in class %s. "
                "For running a Job in Kueue the `suspend` parameter has been set to True.",
                self.__class__.__name__,
            )
            self.suspend = True
        self.labels.update({QUEUE_LABEL: self.queue_name})
        self.annotations.update({QUEUE_LABEL: self.queue_name})
