"""Fail when two test files would import under the same module name.

pytest's default ("prepend") import mode names a test file after its path from the nearest directory
without an ``__init__.py``. Two files with one such name collect fine on their own but abort a whole run
("import file mismatch"), so CI's full run catches what a run of one directory does not.
"""

from __future__ import annotations

import sys
from collections import defaultdict
from pathlib import Path


def module_name(path: Path) -> str:
    parts = [path.stem]
    parent = path.parent
    while (parent / "__init__.py").exists():
        parts.insert(0, parent.name)
        parent = parent.parent
    return ".".join(parts)


def main(root: Path) -> int:
    owners: dict[str, list[Path]] = defaultdict(list)
    for path in sorted(root.rglob("*.py")):
        if path.name.startswith("test_"):
            owners[module_name(path)].append(path)
    clashes = {name: paths for name, paths in owners.items() if len(paths) > 1}
    for name, paths in clashes.items():
        print(
            f"test module name {name!r} is used by {', '.join(map(str, paths))}: rename one", file=sys.stderr
        )
    return 1 if clashes else 0


if __name__ == "__main__":
    sys.exit(main(Path(sys.argv[1] if len(sys.argv) > 1 else "tests")))
