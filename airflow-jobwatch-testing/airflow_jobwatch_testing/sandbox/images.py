"""Which container images the sandbox's kubelet cannot pull.

Two rules, either one is enough:

* an image whose registry host is in the reserved ``.invalid`` top-level domain (RFC 2606: such a name
  can never resolve), for example ``registry.invalid/app:1``, always fails to pull; this is on by
  default so that an example or a test written for a real cluster fails the same way in the sandbox;
* an image matching the sandbox's ``image_pull_failure`` pattern (``--fail-images`` or
  ``set_image_pull_failure``) fails to pull.
"""

from __future__ import annotations

import re

RESERVED_REGISTRY_SUFFIX = ".invalid"


def registry_host(image: str) -> str | None:
    """The registry host of ``image``, or None when the image names none (Docker Hub).

    Follows the reference-parsing rule of the container tools: the part before the first ``/`` is a
    registry host only when it contains a ``.`` or a ``:`` or is ``localhost``.
    """
    first, sep, _ = image.partition("/")
    if not sep:
        return None
    if "." in first or ":" in first or first == "localhost":
        return first.split(":", 1)[0].lower()
    return None


def cannot_pull(image: str, pattern: re.Pattern[str] | None) -> bool:
    """True when the kubelet must fail to pull ``image`` (reserved registry or matching pattern)."""
    host = registry_host(image)
    if host is not None and host.endswith(RESERVED_REGISTRY_SUFFIX):
        return True
    return pattern is not None and pattern.search(image) is not None
