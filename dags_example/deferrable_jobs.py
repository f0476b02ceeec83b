"""Deferrable KubernetesJobOperator tasks: waits handed to JobTrigger in the triggerer.

Every task creates a Kubernetes Job and defers; one shared watch per namespace in the triggerer ends the
waits. The tasks show a quick Job, a long one, a parallel one, a failing one, one whose image cannot
be pulled and one that returns a large XCom result. The commands are plain ``sh``: on a cluster they run in the ``busybox`` image; on the
embedded sandbox (``airflow_jobwatch_testing``) they run as local processes.
"""

from __future__ import annotations

import datetime
import os

from airflow.sdk import DAG

from airflow_jobwatch.operators.job import KubernetesJobOperator

# The Jobs go to the cluster the executor uses when its kubeconfig is set in the environment (as it is
# when the DAG runs against the sandbox); unset, the default kubeconfig (or in-cluster config) is used.
KUBECONFIG = os.environ.get("AIRFLOW__KUBERNETES_EXECUTOR__CONFIG_FILE") or None

common = dict(
    namespace="default",
    image="busybox:1.36",
    kubernetes_conn_id=None,
    config_file=KUBECONFIG,
    in_cluster=False,
    deferrable=True,
    wait_until_job_complete=True,  # as with upstream's operator, deferrable only waits with this
    backoff_limit=0,
    get_logs=True,
    job_poll_interval=30,
    execution_timeout=datetime.timedelta(minutes=10),
)

with DAG(
    dag_id="deferrable_jobs",
    schedule=None,
    start_date=datetime.datetime(2026, 1, 1),
    catchup=False,
    tags=["jobwatch", "deferrable"],
) as dag:
    # This one keeps the provider's default connection id ("kubernetes_default"): when that connection
    # does not exist, worker and triggerer fall back to config_file, as the provider's hooks do.
    KubernetesJobOperator(
        task_id="quick",
        cmds=["sh", "-c", "echo quick job done"],
        **{k: v for k, v in common.items() if k != "kubernetes_conn_id"},
    )
    KubernetesJobOperator(
        task_id="long",
        cmds=["sh", "-c", "echo long job starts; sleep 25; echo long job done"],
        **common,
    )
    KubernetesJobOperator(
        task_id="fan_out",
        cmds=["sh", "-c", "sleep 3; echo one of three"],
        parallelism=3,
        completions=3,
        **common,
    )
    KubernetesJobOperator(task_id="fails", cmds=["sh", "-c", "echo about to fail; exit 3"], **common)
    # A result of about 1 MiB: the pod's XCom sidecar prints it to its log when the base container has
    # exited, and the task returns it whole (no pods/exec right needed)
    KubernetesJobOperator(
        task_id="big_result",
        cmds=[
            "sh",
            "-c",
            'awk \'BEGIN { printf "["; for (i = 0; i < 100000; i++) printf "%s{\\"id\\": %d}", '
            '(i ? ", " : ""), i; printf "]" }\' > /airflow/xcom/return.json',
        ],
        do_xcom_push=True,
        **common,
    )
    KubernetesJobOperator(
        task_id="bad_image",
        cmds=["true"],
        **{**common, "image": "registry.invalid/no-such-image:1"},
    )
