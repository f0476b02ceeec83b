"""Many short sleeping tasks, for running JobWatchExecutor under faults.

Trigger it with ``{"tasks": N, "seconds": S}`` (a mapped task of N sleepers) and meanwhile break
things: 410 storms, dropped watches, the watcher process killed, pods deleted or evicted, the API
server unreachable, the scheduler killed and restarted. Every task still ends exactly once.
"""

from __future__ import annotations

import time

from airflow.sdk import DAG, task

with DAG(
    dag_id="executor_chaos",
    schedule=None,
    catchup=False,
    tags=["jobwatch", "executor"],
    params={"tasks": 6, "seconds": 6},
    default_args={"retries": 0},
) as dag:

    @task
    def make_items(params=None) -> list[int]:
        return list(range(int(params["tasks"])))

    @task
    def sleeper(i: int, params=None) -> int:
        seconds = float(params["seconds"])
        print(f"sleeper {i}: sleeping {seconds} s")
        time.sleep(seconds)
        return i

    sleeper.expand(i=make_items())
