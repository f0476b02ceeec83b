"""Definition of the ``airflow jobwatch`` command group (kept import-light: Airflow loads it on every CLI call)."""

from __future__ import annotations

from airflow.cli.cli_config import ActionCommand, Arg, GroupCommand, lazy_load_command


def _text(help_text: str) -> str:
    """Help text as Airflow's help formatter (rich-argparse) must get it: it reads ``[...]`` as rich markup
    and drops it, so an option's section (``[kubernetes_executor]``) is escaped to stay visible."""
    return help_text.replace("[", "\\[")


ARG_PORT = Arg(
    ("--port",), type=int, default=0, help="Port to listen on (127.0.0.1 only); 0 picks a free one."
)
ARG_KUBECONFIG = Arg(
    ("--kubeconfig",),
    required=True,
    help="Where to write the kubeconfig (server URL and a random bearer token) once the sandbox is ready.",
)
ARG_HISTORY_WINDOW = Arg(
    ("--history-window",),
    type=int,
    default=None,
    help="How many past changes the sandbox keeps for watch replay; a small value makes 410 Gone frequent.",
)
ARG_BOOKMARK_INTERVAL = Arg(
    ("--bookmark-interval",),
    type=float,
    default=None,
    help="Seconds between BOOKMARK events on watches that ask for them.",
)

ARG_FAIL_IMAGES = Arg(
    ("--fail-images",),
    default=None,
    metavar="PATTERN",
    help="Regular expression: pods whose image matches never start (ErrImagePull, then ImagePullBackOff). "
    "Images from a registry in the reserved .invalid domain (registry.invalid/...) always fail to pull.",
)

ARG_TLS = Arg(
    ("--tls",),
    action="store_true",
    help="Serve HTTPS with a throw-away self-signed certificate (kubectl sends tokens only over TLS).",
)

ARG_NAMESPACE = Arg(
    ("--namespace",),
    default=None,
    help=_text("Kubernetes namespace. Default: [kubernetes_executor] namespace."),
)
ARG_MIN_PENDING_MINUTES = Arg(
    ("--min-pending-minutes",),
    default=30,
    type=int,
    help="Delete pods still Pending this many minutes after their creation (at least 5). Default 30.",
)
ARG_MIN_COMPLETED_MINUTES = Arg(
    ("--min-completed-minutes",),
    default=1,
    type=int,
    help="Delete completed (Succeeded/Failed/Evicted) pods once done for this many minutes; 0: at once. Default 1.",
)
ARG_DRY_RUN = Arg(("--dry-run",), action="store_true", help="Print what would be deleted; delete nothing.")
ARG_VERBOSE = Arg(("-v", "--verbose"), action="store_true", help="Print every pod inspected.")
ARG_EXECUTOR_STATUS_FILE = Arg(
    ("--executor-status-file",), default=None, help=_text("Default: [jobwatch] executor_status_file.")
)
ARG_TRIGGERER_STATUS_FILE = Arg(
    ("--triggerer-status-file",), default=None, help=_text("Default: [jobwatch] triggerer_status_file.")
)
ARG_COMPONENT = Arg(
    ("--component",),
    choices=("all", "executor", "triggerer"),
    default="all",
    help="Which status to check (for a probe of one process). Default: every configured one.",
)
ARG_MAX_AGE = Arg(
    ("--max-age",),
    type=float,
    default=60.0,
    help="A status file older than this many seconds means the process is stuck or gone. Default 60.",
)
ARG_STATUS_OUTPUT = Arg(("--output", "-o"), choices=("text", "json"), default="text", help="Output format.")
ARG_DAG_ID = Arg(("dag_id",), help="The DAG's id.")
ARG_TASK_ID = Arg(("task_id",), help="The task's id.")
ARG_SUBDIR = Arg(
    ("-S", "--subdir"), default=None, help=_text("DAG file or folder to parse. Default: [core] dags_folder.")
)
ARG_MAP_INDEX = Arg(("--map-index",), type=int, default=-1, help="Map index of a mapped task. Default -1.")
ARG_OUTPUT_PATH = Arg(("--output-path",), default=None, help="Write the YAML to this file instead of stdout.")

JOBWATCH_COMMANDS = (
    ActionCommand(
        name="sandbox",
        help="Run the embedded Kubernetes sandbox (an API emulator with a Job controller and a local kubelet)",
        func=lazy_load_command("airflow_jobwatch.cli.commands.sandbox"),
        args=(ARG_PORT, ARG_KUBECONFIG, ARG_HISTORY_WINDOW, ARG_BOOKMARK_INTERVAL, ARG_FAIL_IMAGES, ARG_TLS),
    ),
    ActionCommand(
        name="cleanup-pods",
        help="Delete worker pods that completed (Succeeded/Failed/Evicted) or stayed Pending too long "
        "(the rules of 'airflow kubernetes cleanup-pods', for executor worker pods only)",
        func=lazy_load_command("airflow_jobwatch.cli.commands.cleanup_pods"),
        args=(ARG_NAMESPACE, ARG_MIN_PENDING_MINUTES, ARG_MIN_COMPLETED_MINUTES, ARG_DRY_RUN, ARG_VERBOSE),
    ),
    ActionCommand(
        name="status",
        help="Health of the running executor's KubernetesJobWatcher and of the triggerer's shared watches, "
        "from their status files; exits 1 when unhealthy (a liveness probe), 2 when none is configured",
        func=lazy_load_command("airflow_jobwatch.cli.commands.status"),
        args=(
            ARG_EXECUTOR_STATUS_FILE,
            ARG_TRIGGERER_STATUS_FILE,
            ARG_COMPONENT,
            ARG_MAX_AGE,
            ARG_STATUS_OUTPUT,
        ),
    ),
    ActionCommand(
        name="generate-pod-yaml",
        help="Print the worker pod JobWatchExecutor would create for a task (YAML)",
        func=lazy_load_command("airflow_jobwatch.cli.commands.generate_pod_yaml"),
        args=(ARG_DAG_ID, ARG_TASK_ID, ARG_SUBDIR, ARG_MAP_INDEX, ARG_OUTPUT_PATH),
    ),
)


def get_jobwatch_cli_commands() -> list[GroupCommand]:
    return [
        GroupCommand(
            name="jobwatch",
            help="airflow-jobwatch tools",
            subcommands=JOBWATCH_COMMANDS,
        )
    ]
