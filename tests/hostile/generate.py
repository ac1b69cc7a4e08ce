#!/usr/bin/env python3
"""Write the hostile corpus' generated files (bombs, the repetitive log, the over-limit log) to a
directory: the tests make the same files in their session's temporary directory.

    python tests/hostile/generate.py DIR
"""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from tests.hostile.corpus import generate_all


def main() -> int:
    if len(sys.argv) != 2:
        print(__doc__, file=sys.stderr)
        return 2
    for path in generate_all(Path(sys.argv[1])):
        print(f"{path.stat().st_size:>12,}  {path}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
