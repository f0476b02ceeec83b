"""`airflow jobwatch ...` as a user runs it: real `airflow` processes, the sandbox as the cluster."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest
import yaml
from kubernetes.client import CoreV1Api

from airflow_jobwatch.compat import AIRFLOW_V_3_2_PLUS
from airflow_jobwatch.kube.cluster.client import ClusterConfig, sync_api_client
from airflow_jobwatch_testing.pod_template import pod_template_yaml
from airflow_jobwatch_testing.sandbox import SandboxThread

ROOT = Path(__file__).resolve().parents[2]
pytestmark = pytest.mark.timeout(300)


def airflow(*args: str, home: Path, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    full_env = dict(
        os.environ,
        AIRFLOW_HOME=str(home),
        AIRFLOW__CORE__LOAD_EXAMPLES="False",
        **(env or {}),
    )
    if not AIRFLOW_V_3_2_PLUS:  # Airflow 3.1 has `airflow jobwatch` where the executor is configured
        full_env.setdefault("AIRFLOW__CORE__EXECUTOR", "airflow_jobwatch.executors.JobWatchExecutor")
    exe = Path(sys.executable).with_name("airflow")
    return subprocess.run(
        [str(exe), "jobwatch", *args], env=full_env, capture_output=True, text=True, timeout=240
    )


def worker_pod(name: str, command: list[str], *, worker: bool = True) -> dict:
    labels = (
        {"kubernetes_executor": "True", "dag_id": "d", "task_id": name, "try_number": "1"} if worker else {}
    )
    return {
        "metadata": {"name": name, "labels": labels},
        "spec": {
            "restartPolicy": "Never",
            "containers": [{"name": "base", "image": "x", "command": command}],
        },
    }


def test_cleanup_pods_deletes_finished_worker_pods_only(tmp_path):
    with SandboxThread() as sb:
        kubeconfig = sb.write_kubeconfig(str(tmp_path / "kubeconfig"))
        api = sync_api_client(ClusterConfig(config_file=kubeconfig))
        core = CoreV1Api(api)
        core.create_namespaced_pod("default", worker_pod("done-ok", ["true"]))
        core.create_namespaced_pod("default", worker_pod("done-failed", ["false"]))
        core.create_namespaced_pod("default", worker_pod("still-running", ["sleep", "120"]))
        core.create_namespaced_pod("default", worker_pod("not-a-worker", ["true"], worker=False))
        deadline = time.monotonic() + 60
        while {p["metadata"]["name"]: p["status"].get("phase") for p in sb.objects("pods", "default")} != {
            "done-ok": "Succeeded",
            "done-failed": "Failed",
            "still-running": "Running",
            "not-a-worker": "Succeeded",
        }:
            assert time.monotonic() < deadline, sb.objects("pods", "default")
            time.sleep(0.1)
        env = {
            "AIRFLOW__KUBERNETES_EXECUTOR__CONFIG_FILE": kubeconfig,
            "AIRFLOW__KUBERNETES_EXECUTOR__IN_CLUSTER": "False",
            "AIRFLOW__KUBERNETES_EXECUTOR__NAMESPACE": "default",
        }
        dry = airflow("cleanup-pods", "--min-completed-minutes", "0", "--dry-run", home=tmp_path, env=env)
        assert dry.returncode == 0, dry.stderr
        assert "Would delete 2 pod(s) in default" in dry.stdout
        assert len(sb.objects("pods", "default")) == 4

        run = airflow("cleanup-pods", "--min-completed-minutes", "0", home=tmp_path, env=env)
        assert run.returncode == 0, run.stderr
        assert 'Deleting pod "done-ok" (completed)' in run.stdout
        assert "Deleted 2 pod(s) in default" in run.stdout
        deadline = time.monotonic() + 60
        while sorted(p["metadata"]["name"] for p in sb.objects("pods", "default")) != [
            "not-a-worker",
            "still-running",
        ]:
            assert time.monotonic() < deadline, sb.objects("pods", "default")
            time.sleep(0.1)
        api.close()


def test_status_exit_codes(tmp_path):
    assert airflow("status", home=tmp_path).returncode == 2  # nothing configured

    status_file = tmp_path / "executor-status.json"
    data = {"updated_at": time.time(), "watcher_healthy": True, "tracked_pods": 2, "relists": 1}
    status_file.write_text(json.dumps(data))
    env = {"AIRFLOW__JOBWATCH__EXECUTOR_STATUS_FILE": str(status_file)}
    ok = airflow("status", home=tmp_path, env=env)
    assert ok.returncode == 0, ok.stdout + ok.stderr
    assert "executor: healthy" in ok.stdout and "tracked_pods: 2" in ok.stdout

    status_file.write_text(
        json.dumps({**data, "watcher_healthy": False, "watcher_last_error": "401 Unauthorized"})
    )
    bad = airflow("status", "--output", "json", home=tmp_path, env=env)
    assert bad.returncode == 1
    [report] = json.loads(bad.stdout)
    assert report["healthy"] is False
    assert report["problems"] == ["the watcher cannot reach the Kubernetes API: 401 Unauthorized"]


def test_generate_pod_yaml_prints_the_executors_worker_pod(tmp_path):
    template = tmp_path / "pod_template.yaml"
    template.write_text(pod_template_yaml(image="example/airflow:1"))
    env = {
        "AIRFLOW__CORE__DAGS_FOLDER": str(ROOT / "dags_example"),
        "AIRFLOW__KUBERNETES_EXECUTOR__POD_TEMPLATE_FILE": str(template),
        "AIRFLOW__KUBERNETES_EXECUTOR__NAMESPACE": "airflow-workers",
    }
    out = airflow("generate-pod-yaml", "executor_basics", "succeed", home=tmp_path, env=env)
    assert out.returncode == 0, out.stderr
    pod = yaml.safe_load(out.stdout)
    assert pod["kind"] == "Pod"
    assert pod["metadata"]["namespace"] == "airflow-workers"
    assert pod["metadata"]["labels"]["dag_id"] == "executor_basics"
    assert pod["metadata"]["labels"]["task_id"] == "succeed"
    assert pod["metadata"]["labels"]["kubernetes_executor"] == "True"
    [container] = pod["spec"]["containers"]
    assert container["name"] == "base" and container["image"] == "example/airflow:1"
    assert container["args"][:3] == ["python", "-m", "airflow.sdk.execution_time.execute_workload"]

    missing = airflow("generate-pod-yaml", "executor_basics", "no_such_task", home=tmp_path, env=env)
    assert missing.returncode != 0
    assert "has no task 'no_such_task'" in missing.stderr


# ---- help text, errors and documented commands as a user meets them ------------------------------


def _airflow_cli(
    *args: str, home: Path, env: dict[str, str] | None = None
) -> subprocess.CompletedProcess[str]:
    """Any ``airflow`` command (not only ``airflow jobwatch``), in a wide terminal so help lines don't wrap."""
    full_env = dict(os.environ, AIRFLOW_HOME=str(home), AIRFLOW__CORE__LOAD_EXAMPLES="False", COLUMNS="200")
    full_env.update(env or {})
    if not AIRFLOW_V_3_2_PLUS:  # Airflow 3.1 has `airflow jobwatch` where the executor is configured
        full_env.setdefault("AIRFLOW__CORE__EXECUTOR", "airflow_jobwatch.executors.JobWatchExecutor")
    exe = Path(sys.executable).with_name("airflow")
    return subprocess.run([str(exe), *args], env=full_env, capture_output=True, text=True, timeout=240)


def test_the_installation_check_shows_what_the_page_says_it_shows(tmp_path):
    """The `airflow providers get` line of the installation page whose comment promises the
    configuration sections, run as written, prints them."""
    import re
    import shlex

    page = (ROOT / "docs" / "installation.md").read_text()
    block = re.search(r"### Check the installation\n\n```bash\n(.*?)```", page, re.S)
    assert block, "the installation page has no 'Check the installation' block"
    checked = 0
    for line in block.group(1).splitlines():
        command, _, comment = line.partition("#")
        words = shlex.split(command)
        if words[:3] != ["airflow", "providers", "get"] or "configuration" not in comment:
            continue
        proc = _airflow_cli(*words[1:], home=tmp_path)
        assert proc.returncode == 0, proc.stderr
        assert "watch_timeout_seconds" in proc.stdout, f"{line!r} shows no configuration"
        checked += 1
    assert checked == 1, "no line of the block shows the configuration sections"


@pytest.mark.parametrize(
    ("command", "text"),
    [
        ("cleanup-pods", "Default: [kubernetes_executor] namespace."),
        ("status", "Default: [jobwatch] executor_status_file."),
        ("generate-pod-yaml", "Default: [core] dags_folder."),
    ],
)
def test_help_shows_the_config_sections(tmp_path, command, text):
    # Airflow's help formatter (rich-argparse) reads "[...]" as markup: unescaped, the section vanished.
    proc = _airflow_cli("jobwatch", command, "--help", home=tmp_path)
    assert proc.returncode == 0, proc.stderr
    assert text in " ".join(proc.stdout.split()), proc.stdout


def test_generate_pod_yaml_without_a_pod_template_is_a_clear_error(tmp_path):
    dags = tmp_path / "dags"
    dags.mkdir()
    (dags / "one.py").write_text(
        "import datetime\n"
        "from airflow.sdk import DAG\n"
        "from airflow.providers.standard.operators.empty import EmptyOperator\n"
        "with DAG('one', schedule=None, start_date=datetime.datetime(2026, 1, 1)):\n"
        "    EmptyOperator(task_id='t')\n"
    )
    proc = _airflow_cli(
        "jobwatch",
        "generate-pod-yaml",
        "one",
        "t",
        "-S",
        str(dags),
        home=tmp_path,
        env={"AIRFLOW__KUBERNETES_EXECUTOR__POD_TEMPLATE_FILE": ""},
    )
    assert proc.returncode != 0
    assert "Traceback" not in proc.stderr, proc.stderr
    assert "cannot build the worker pod of one.t" in proc.stderr
    assert "[kubernetes_executor] pod_template_file" in proc.stderr


def test_generate_pod_yaml_with_a_malformed_pod_template_says_where_in_one_line(tmp_path):
    template = tmp_path / "pod_template.yaml"
    template.write_text("apiVersion: v1\nkind: Pod\nspec:\n  containers:\n  - name: base\n    image: [x\n")
    env = {
        "AIRFLOW__CORE__DAGS_FOLDER": str(ROOT / "dags_example"),
        "AIRFLOW__KUBERNETES_EXECUTOR__POD_TEMPLATE_FILE": str(template),
    }
    proc = airflow("generate-pod-yaml", "executor_basics", "succeed", home=tmp_path, env=env)
    assert proc.returncode != 0
    assert "Traceback" not in proc.stderr, proc.stderr
    last = proc.stderr.strip().splitlines()[-1]
    assert last.startswith(
        f"airflow jobwatch generate-pod-yaml: cannot build the worker pod of executor_basics.succeed: "
        f"the pod template file {template}:7:1 is not valid YAML: "
    ), proc.stderr


def test_config_list_shows_the_values_in_force_as_the_docs_say(tmp_path):
    """The docs send users to `airflow config list --section jobwatch` for the values in force; without
    --show-values Airflow 3 prints the options commented out, without values."""
    documented = [
        line
        for path in [ROOT / "README.md", ROOT / "docs" / "conf.py", *sorted((ROOT / "docs").glob("*.md"))]
        for line in path.read_text().splitlines()
        if "airflow config list --section jobwatch" in line
    ]
    assert documented
    assert all("airflow config list --section jobwatch --show-values" in line for line in documented), (
        documented
    )
    # Airflow 3.1's `config list` has no --show-values: it shows the values always (docs/compatibility.md)
    show_values = ["--show-values"] if AIRFLOW_V_3_2_PLUS else []
    proc = _airflow_cli(
        "config",
        "list",
        "--section",
        "jobwatch",
        *show_values,
        home=tmp_path,
        env={"AIRFLOW__JOBWATCH__WATCH_TIMEOUT_SECONDS": "77"},
    )
    assert proc.returncode == 0, proc.stderr
    assert "watch_timeout_seconds = 77" in proc.stdout
