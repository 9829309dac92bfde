"""`jr2ray bench`: the prefix-cache suite, which lives in the checkout's benchmarks/prefix_cache."""

from __future__ import annotations

import sys
from pathlib import Path


def main(argv: list[str] | None = None) -> int:
    root = Path(__file__).resolve().parents[1]
    if not (root / "benchmarks" / "prefix_cache").is_dir():
        print("jr2ray bench runs from a source checkout (benchmarks/prefix_cache is not here)", file=sys.stderr)
        return 1
    sys.path.insert(0, str(root))
    from benchmarks.prefix_cache.run import main as bench_main

    return bench_main(argv)
