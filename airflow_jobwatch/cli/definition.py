"""Definition of the ``airflow jobwatch`` command group (kept import-light: Airflow loads it on every CLI call)."""

from __future__ import annotations

from airflow.cli.cli_config import ActionCommand, Arg, GroupCommand, lazy_load_command

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

ARG_TLS = Arg(
    ("--tls",),
    action="store_true",
    help="Serve HTTPS with a throw-away self-signed certificate (kubectl sends tokens only over TLS).",
)

JOBWATCH_COMMANDS = (
    ActionCommand(
        name="sandbox",
        help="Run the embedded Kubernetes sandbox (an API emulator with a Job controller and a local kubelet)",
        func=lazy_load_command("airflow_jobwatch.cli.commands.sandbox"),
        args=(ARG_PORT, ARG_KUBECONFIG, ARG_HISTORY_WINDOW, ARG_BOOKMARK_INTERVAL, ARG_TLS),
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
