"""The prefix-cache benchmark suite: `python -m benchmarks.prefix_cache` runs `jr2ray bench` (jr2ray/bench), whose
figures go to benchmarks/results. The suite lives in the product because `jr2ray bench` is one of its commands."""
