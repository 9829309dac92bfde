"""`ray start`, but a loopback `--node-ip-address` is kept as given.

Ray's `ray start` turns 127.0.0.1 into the machine's routable address (so that other nodes could join), and then
its GCS, raylet, object manager, agents and workers listen there. A single-machine instance needs none of that, so
`jr2ray up` runs Ray's own CLI through this module, which keeps a loopback node address as it is; every Ray
process then binds 127.0.0.1 only (and drivers joining it keep the loopback address too: `jr2ray.run.loopback`). `jr2ray up --cluster` runs Ray's CLI unchanged.
"""

from __future__ import annotations

import sys

from jr2ray.run.loopback import keep_loopback


def main() -> int:
    keep_loopback()
    from ray.scripts.scripts import main as ray_main

    return int(ray_main() or 0)


if __name__ == "__main__":
    sys.exit(main())
