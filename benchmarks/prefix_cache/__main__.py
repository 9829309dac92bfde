"""`python -m benchmarks.prefix_cache`: the same as `jr2ray bench` (see jr2ray/bench/run.py)."""

import sys

from jr2ray.bench import main
from jr2ray.settings import load_settings

sys.exit(main(None, load_settings()))  # this script is where the process starts: its settings are read here
