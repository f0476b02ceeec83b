"""What Kubernetes objects mean, the watch engine that follows them, and how to reach a cluster.

Layer 0 (docs/internals.md, "The map"): imports nothing of the provider outside this folder, and nothing
of Airflow; the executor's watcher subprocess and the triggerer both run it.

* what objects mean: ``states`` (with ``objectstate``, ``pod_states``, ``job_states``, ``containers``,
  ``disruptions``, ``state_words``), ``result``, ``objects``, ``projection``;
* the watch engine: ``informer`` (its facade) with ``relist``, ``watch``, ``watchstream``, ``listwatch``,
  ``listing``, ``cache``, ``store``, ``health``, ``backoff``, ``observer``, ``informer_types``,
  ``label_selector``, ``apierrors``;
* how to reach a cluster: ``client`` (with ``kubeconfig``, ``credhelper``), ``direct``, ``errors``.
"""
