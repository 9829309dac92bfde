"""`jr2ray bench`: the prefix-cache suite, one scripted trajectory per workflow replayed through the Harness in every
arm against the Ray-hosted vLLM (`run.py` says what it measures).

Why it lives in the package and not in benchmarks/: `jr2ray bench` is a command of the product, so what it runs is
importable wherever jr2ray is installed, and the product never reaches into a source checkout.
`python -m benchmarks.prefix_cache` (in a checkout) runs the same `main`; its figures go to benchmarks/results.
"""

from __future__ import annotations

from jr2ray.bench.run import main

__all__ = ["main"]
