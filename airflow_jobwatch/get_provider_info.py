"""Provider metadata for Airflow's provider manager.

GENERATED from provider.yaml by `make provider-info`; do not edit by hand.
tests/unit/test_provider_info.py fails when the two disagree.
"""

from __future__ import annotations

from typing import Any


def get_provider_info() -> dict[str, Any]:
    return {
        "package-name": "airflow-jobwatch",
        "name": "JobWatch (Kubernetes)",
        "description": "Runs Airflow work on Kubernetes and never loses track of it: an executor whose\nKubernetesJobWatcher survives 410 Gone and reconciles after every relist, a deferrable\nKubernetesJobOperator whose JobTrigger shares one watch per namespace, and an embedded\nKubernetes sandbox to run it all without a cluster.\n",
        "integrations": [
            {
                "integration-name": "JobWatch (Kubernetes)",
                "external-doc-url": "https://kubernetes.io/docs/concepts/workloads/controllers/job/",
                "tags": ["software"],
            }
        ],
        "operators": [
            {
                "integration-name": "JobWatch (Kubernetes)",
                "python-modules": ["airflow_jobwatch.operators.job", "airflow_jobwatch.operators.kueue"],
            }
        ],
        "triggers": [
            {"integration-name": "JobWatch (Kubernetes)", "python-modules": ["airflow_jobwatch.triggers.job"]}
        ],
        "executors": ["airflow_jobwatch.executors.JobWatchExecutor"],
        "cli": ["airflow_jobwatch.cli.definition.get_jobwatch_cli_commands"],
        "config": {
            "jobwatch": {
                "description": "Options of airflow-jobwatch's watch engine, shared by JobWatchExecutor's KubernetesJobWatcher\nand JobTrigger. The [kubernetes_executor] options keep their meaning for JobWatchExecutor.\n",
                "options": {
                    "watch_timeout_seconds": {
                        "description": "Server-side timeoutSeconds of one watch request. Each request is jittered between this\nvalue and twice it, so that many watchers do not reconnect in step.\n",
                        "version_added": "0.1.0",
                        "type": "float",
                        "example": None,
                        "default": "300",
                    },
                    "watch_stall_timeout_seconds": {
                        "description": "A watch that delivers no event and no BOOKMARK for this long is presumed half-open and\nis reconnected. Must be larger than the server's bookmark interval (about 60 s on a\nreal API server).\n",
                        "version_added": "0.1.0",
                        "type": "float",
                        "example": None,
                        "default": "90",
                    },
                    "api_connect_timeout_seconds": {
                        "description": "Client-side connect timeout of every Kubernetes API request.",
                        "version_added": "0.1.0",
                        "type": "float",
                        "example": None,
                        "default": "10",
                    },
                    "backoff_initial_seconds": {
                        "description": "First delay before retrying a failed list or watch. Delays double up to\nbackoff_max_seconds, with equal jitter: the n-th retry in a row waits a random time\nbetween half the current delay and the whole of it, so that many clients spread out\nwhile the wait still grows with every failure. A Retry-After from the server (429, 503)\nis honoured, up to 5 minutes.\n",
                        "version_added": "0.1.0",
                        "type": "float",
                        "example": None,
                        "default": "0.8",
                    },
                    "backoff_max_seconds": {
                        "description": "Upper bound of the retry delay of lists and watches.",
                        "version_added": "0.1.0",
                        "type": "float",
                        "example": None,
                        "default": "30",
                    },
                    "backoff_reset_after_seconds": {
                        "description": "A watch that stayed healthy this long resets the retry delay to its initial value.",
                        "version_added": "0.1.0",
                        "type": "float",
                        "example": None,
                        "default": "120",
                    },
                    "unhealthy_after_seconds": {
                        "description": "After this long without a successful list or watch the engine reports itself unhealthy\n(it keeps retrying). Logged by the executor; used by JobTrigger with\napi_failure_tolerance_seconds.\n",
                        "version_added": "0.1.0",
                        "type": "float",
                        "example": None,
                        "default": "60",
                    },
                    "resync_interval_seconds": {
                        "description": "Every this many seconds the executor's watcher hands each pod in its cache to its handler\nagain, as client-go's resync does: no request to the API server, and only a state that\nchanged is reported. It never lists on a timer: a watch resumes from the last\nresourceVersion it saw and lists again only after 410 Gone, so a pod that ends and is\ndeleted is seen ending. 0 disables it. The triggerer's watches ignore it.\n",
                        "version_added": "0.1.0",
                        "type": "float",
                        "example": None,
                        "default": "600",
                    },
                    "job_label_selector": {
                        "description": "JobTrigger: a label selector (e.g. \"kubernetes_pod_operator=True\", which KubernetesJobOperator\nputs on every Job it creates) that restricts the Job watch of each namespace. Empty (the\ndefault) watches every Job in the namespace. Trade-off: with a selector the triggerer caches\nonly matching Jobs, so other teams' Jobs (CronJobs, Spark, Argo) cost no memory or traffic; a\ndeferred Job that does not match is not in the cache and is read with one GET every\npoll_interval instead (like upstream's KubernetesJobTrigger), so its result arrives up to\npoll_interval late. The pods of Jobs are always selected by their controller-uid label.\n",
                        "version_added": "0.1.0",
                        "type": "string",
                        "example": "kubernetes_pod_operator=True",
                        "default": "",
                    },
                    "namespace_watch_linger_seconds": {
                        "description": "JobTrigger: when the last deferred task of a namespace leaves a triggerer, the namespace's\nJob and pod watches stay open this long, so that the next task deferred there joins a warm\ncache instead of starting with a full LIST. 0 closes them at once.\n",
                        "version_added": "0.1.0",
                        "type": "float",
                        "example": None,
                        "default": "60",
                    },
                    "api_failure_tolerance_seconds": {
                        "description": 'How long a JobTrigger keeps waiting while the Kubernetes API is unreachable before it\nends with status "error" and the last API error in its message.\n',
                        "version_added": "0.1.0",
                        "type": "float",
                        "example": None,
                        "default": "300",
                    },
                    "resume_hold_seconds": {
                        "description": "JobTrigger: a Job that ends this soon after its task deferred, for a task that must resume\non a worker, is held until this many seconds after the deferral before the task resumes.\nAirflow's scheduler can fail a task that resumes before it has processed the exit of the\nworker that deferred it (\"finished with state success, but the task instance's state\nattribute is queued\"); under load that took over 6 s. Tasks the trigger ends itself are\nnever held. 0 disables the hold.\n",
                        "version_added": "0.1.0",
                        "type": "float",
                        "example": None,
                        "default": "15",
                    },
                    "trigger_log_max_bytes": {
                        "description": "JobTrigger: the most of a task's pod logs (get_logs=True), in bytes, that the trigger\nwrites into the task's log when it ends the task itself; each line counts its text and\nabout 200 bytes for its log record. The tail is kept, and a line says how much of which\ncontainer's log was left out and where the full log is (the pod, if on_finish_action keeps\nit). A task that resumes on a worker gets its whole logs there. A whole number from 1024 to\n16777216 (16 MiB).\n",
                        "version_added": "0.1.0",
                        "type": "integer",
                        "example": None,
                        "default": "1048576",
                    },
                    "watcher_unresponsive_after_seconds": {
                        "description": "JobWatchExecutor: a KubernetesJobWatcher child process whose event loop has not beaten for\nthis long is presumed wedged; it is killed and replaced (with backoff), and the replacement\nstarts with a fresh list so that nothing that happened meanwhile is lost.\n",
                        "version_added": "0.1.0",
                        "type": "float",
                        "example": None,
                        "default": "60",
                    },
                    "pod_creation_concurrency": {
                        "description": "JobWatchExecutor: worker pod creates in flight at once, sent from a small thread pool so that\nthe scheduler loop never waits for the API server (at least worker_pods_creation_batch_size).\n",
                        "version_added": "0.1.0",
                        "type": "integer",
                        "example": "16",
                        "default": "8",
                    },
                    "disruption_relaunches": {
                        "description": "JobWatchExecutor: how many times a task's worker pod that was disrupted (preempted, evicted,\nits node shut down or lost) before any of its containers started is launched again for the\nsame try, with backoff, while the task stays queued. Such a pod cannot have run the task, so\nthis spends none of the task's retries. Past this bound the task fails with a message naming\nevery disruption. 0 fails at the first one, as upstream does.\n",
                        "version_added": "0.1.0",
                        "type": "integer",
                        "example": "5",
                        "default": "3",
                    },
                    "worker_pod_labels": {
                        "description": 'JobWatchExecutor: which labels mark its worker pods. "upstream" (default): the upstream\nKubernetesExecutor\'s (airflow-worker=<scheduler job id>, kubernetes_executor=True), so pods\nstay adoptable when switching between the two executors. "jobwatch": its own\n(airflow-jobwatch-worker=<scheduler job id>, jobwatch_executor=True), for running both\nexecutors side by side ([core] executor = KubernetesExecutor,airflow_jobwatch.executors.JobWatchExecutor):\nthen neither watches, adopts, deletes or reports the other\'s pods. Adoption recognises both.\n',
                        "version_added": "0.1.0",
                        "type": "string",
                        "example": "jobwatch",
                        "default": "upstream",
                    },
                    "executor_status_file": {
                        "description": "JobWatchExecutor: if set, the path of a small JSON file the executor rewrites at most once\na second with its counters (pods launched, terminal reports, watcher restarts, relists,\npods found deleted after a watcher gap). Empty disables it.\n",
                        "version_added": "0.1.0",
                        "type": "string",
                        "example": "/tmp/jobwatch-executor-status.json",
                        "default": "",
                    },
                    "triggerer_status_file": {
                        "description": "Triggerer: if set, the path of a small JSON file the triggerer rewrites when its shared\nwatches change, when a watch's health changes, and every 10 s while watches are open: the\nopen watches, the triggers on each, and each informer's health, relists, 410s and seconds\nsince its last event. `airflow jobwatch status` reads it. Empty disables it.\n",
                        "version_added": "0.1.0",
                        "type": "string",
                        "example": "/tmp/jobwatch-triggerer-status.json",
                        "default": "",
                    },
                },
            }
        },
    }
