"""How to reach a cluster: API clients, their credentials, and what a refusal means.

* ``client`` - ``kubernetes_asyncio`` and ``kubernetes`` clients from a :class:`ClusterConfig`
  (kubeconfig, in-cluster, a connection's settings), checked first by ``kubeconfig``;
* ``direct`` - the raw aiohttp client of the executor's watcher child, whose credentials come from
  ``credhelper`` (run as ``python -m airflow_jobwatch.kube.cluster.credhelper``);
* ``errors`` - 401 and 403 refusals recognised and explained.

Imports nothing of the provider outside this folder (the lowest layer of ``kube/``, beside
``meaning/``), and nothing of Airflow.
"""
