"""Two deferrable get_logs=True tasks whose pods echo a connection password and a sensitive Variable,
both rendered from templated ``env_vars``: one ends from the triggerer, which writes its pod log, XCom
and termination-message lines; the other resumes on a worker (a callback must run there), after the
triggerer logged its event. The connection and the Variable come from the environment
(``AIRFLOW_CONN_JOBWATCH_E2E_DB``, ``AIRFLOW_VAR_JOBWATCH_E2E_API_TOKEN``)."""

from __future__ import annotations

import datetime
import os

from airflow.sdk import DAG

from airflow_jobwatch.operators.job import KubernetesJobOperator

KUBECONFIG = os.environ.get("AIRFLOW__KUBERNETES_EXECUTOR__CONFIG_FILE") or None
ECHO = 'echo "connecting with $DB_PASSWORD"; echo "token=$API_TOKEN"'
XCOM = 'printf \'{"password": "%s"}\' "$DB_PASSWORD" > /airflow/xcom/return.json'

with DAG("trigger_logs_secrets", schedule=None, start_date=datetime.datetime(2026, 1, 1), catchup=False):
    for task_id, script, options in (
        ("ends_here", f"{ECHO}; {XCOM}", {"do_xcom_push": True}),
        ("resumes", ECHO, {"on_success_callback": lambda context: None, "do_xcom_push": False}),
    ):
        KubernetesJobOperator(
            task_id=task_id,
            cmds=["sh", "-c", script],
            # rendered by the worker, which registers both values with the task's masker
            env_vars={
                "DB_PASSWORD": "{{ conn.jobwatch_e2e_db.password }}",
                "API_TOKEN": "{{ var.value.jobwatch_e2e_api_token }}",
            },
            backoff_limit=0,
            config_file=KUBECONFIG,
            deferrable=True,
            get_logs=True,
            image="busybox:1.36",
            in_cluster=False,
            kubernetes_conn_id=None,
            namespace="default",
            retries=0,
            wait_until_job_complete=True,
            **options,
        )
