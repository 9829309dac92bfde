"""`python -m benchmarks.prefix_cache`: the same as `jr2ray bench` (see jr2ray/bench/run.py)."""

import sys

from jr2ray.bench import main

sys.exit(main())
