"""The child process of :func:`airflow_jobwatch_testing.run_dag` (``python -m``): migrate the database of
its fresh ``AIRFLOW_HOME``, parse the DAG file, run ``dag.test()``, write what each task did as JSON."""

from __future__ import annotations

import json
import sys
from typing import Any


def _value(stored: Any) -> Any:
    """An XCom's value as the task SDK decodes it (``serde``); JSON-unfriendly parts become strings
    when the result is written."""
    from airflow.models.xcom import XComModel

    value = XComModel.deserialize_value(stored)
    try:
        from airflow.sdk.serde import deserialize

        return deserialize(value)
    except Exception:
        return value


def main(spec_path: str) -> int:
    with open(spec_path) as fh:
        spec = json.load(fh)
    result_path = spec["result_path"]

    def write(result: dict[str, Any]) -> None:
        with open(result_path, "w") as out:
            json.dump(result, out, default=str)

    from airflow.utils import db

    db.initdb()

    from airflow_jobwatch.compat import dag_bag_class

    bag = dag_bag_class()(dag_folder=spec["dag_file"])
    if bag.import_errors:
        errors = "\n".join(f"{path}:\n{err}" for path, err in bag.import_errors.items())
        write({"error": f"the DAG file does not import:\n{errors}"})
        return 1
    dag_id = spec["dag_id"]
    if dag_id is None:
        if len(bag.dags) != 1:
            write(
                {
                    "error": f"{spec['dag_file']} defines {len(bag.dags)} DAGs ({sorted(bag.dags)}); "
                    f"pass dag_id= to run_dag"
                }
            )
            return 1
        (dag_id,) = bag.dags
    dag = bag.dags.get(dag_id)
    if dag is None:
        write(
            {
                "error": f"no DAG {dag_id!r} at module level of {spec['dag_file']} (found {sorted(bag.dags)}). "
                f"A DAG built inside a test function is not found by Airflow's parser: write it to a file."
            }
        )
        return 1

    kwargs: dict[str, Any] = {"run_conf": spec.get("run_conf")}
    if spec.get("logical_date"):
        from airflow.sdk import timezone

        kwargs["logical_date"] = timezone.parse(spec["logical_date"])
    dr = dag.test(**kwargs)

    from airflow.models.xcom import XComModel
    from airflow.utils.session import create_session

    tasks = []
    with create_session() as session:
        for ti in dr.get_task_instances(session=session):
            rows = session.query(XComModel).filter(
                XComModel.dag_id == dr.dag_id,
                XComModel.run_id == dr.run_id,
                XComModel.task_id == ti.task_id,
                XComModel.map_index == ti.map_index,
            )
            tasks.append(
                {
                    "task_id": ti.task_id,
                    "map_index": ti.map_index,
                    "state": str(ti.state.value if hasattr(ti.state, "value") else ti.state)
                    if ti.state
                    else None,
                    "try_number": ti.try_number,
                    "xcoms": {row.key: _value(row) for row in rows},
                }
            )
        state = dr.state.value if hasattr(dr.state, "value") else str(dr.state)
    write({"dag_id": dr.dag_id, "run_id": dr.run_id, "state": state, "tasks": tasks})
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1]))
