"""`python -m benchmarks.prefix_cache`: see run.py."""

import sys

from benchmarks.prefix_cache.run import main

sys.exit(main())
