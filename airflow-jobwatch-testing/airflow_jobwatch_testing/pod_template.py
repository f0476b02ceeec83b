"""A worker pod template for ``JobWatchExecutor`` against the sandbox (``[kubernetes_executor]
pod_template_file``): write ``pod_template_yaml()`` to a file and point the option at it."""

from __future__ import annotations

# Never pulled: the sandbox's kubelet runs a container's command as a local process, so the image is
# only a name (one that no registry serves, so a pod that reached a real cluster would fail visibly).
SANDBOX_IMAGE = "jobwatch-sandbox/airflow:local"

_POD_TEMPLATE = """\
apiVersion: v1
kind: Pod
metadata:
  name: placeholder
spec:
  restartPolicy: Never
  containers:
    - name: base
      # Never pulled: the sandbox's kubelet runs the container's command as a local process, and
      # `python` resolves to this venv's interpreter (the venv's bin is first on the pods' PATH).
      image: {image}
"""


def pod_template_yaml(*, image: str = SANDBOX_IMAGE) -> str:
    """A minimal pod template: one ``base`` container (the name the executors fill in) running ``image``."""
    return _POD_TEMPLATE.format(image=image)
