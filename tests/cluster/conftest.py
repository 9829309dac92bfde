"""The cluster tier: a real two-node Ray cluster on this machine (`ray.cluster_utils.Cluster`: a head and a second
node, each with its own custom resource, as two raylets), the PostgreSQL store on a throwaway server, and a client
on the head whose runs may go to either node.

Without PostgreSQL's server binaries this tier skips locally and fails in CI (tests/conftest.py)."""

from __future__ import annotations

import os
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

sys.path.insert(0, str(Path(__file__).parent.parent / "store"))

import pg_server  # noqa: E402

pytestmark = pytest.mark.ray

HEAD_RESOURCE = "jr2ray_test_head"
SECOND_RESOURCE = "jr2ray_test_second"
# Node death is noticed in a few seconds instead of Ray's default ~30 s, so a test sees its runs move quickly.
FAST_HEALTH = {"health_check_initial_delay_ms": 0, "health_check_period_ms": 1000, "health_check_timeout_ms": 1000,
               "health_check_failure_threshold": 3}


@dataclass
class TwoNodes:
    cluster: Any
    second: Any  # the second node's handle, for `remove_node`
    head_id: str
    second_id: str
    client: Any
    url: str
    home: Path
    virtual: Any = None  # a client of virtual runs on the same store, made on first use

    def virtual_client(self) -> Any:
        """Virtual runs that stay live at Rest for the whole module (they would park after 5 s and leave no
        process on any node to lose)."""
        import jr2ray
        from jr2ray.settings import load_settings

        if self.virtual is None:
            import ray

            from jr2ray.run.names import registry_name
            from jr2ray.run.registry import RunRegistry

            # The registry is made here, on the head, before the client would make it wherever Ray likes: so the
            # node removal takes the runs' hosts and not the registry's memory of them (the case a stale map hides).
            cast_registry: Any = RunRegistry
            cast_registry.options(name=registry_name(self.url), namespace="jr2ray", lifetime="detached",
                                  get_if_exists=True, num_cpus=0, resources={HEAD_RESOURCE: 0.01}).remote(
                                      self.url, 600.0, 40, "spread")
            self.virtual = jr2ray.connect(store=self.url, launcher=None, virtual=True,
                                          settings=load_settings(idle_deactivate_s=600))
            assert ray.get(self.virtual.registry().stats.remote())["max_live"] == 40
        return self.virtual


def _node_id(resource: str) -> str:
    import ray

    return next(n["NodeID"] for n in ray.nodes() if n["Alive"] and resource in n["Resources"])


@pytest.fixture(scope="module")
def two_nodes(tmp_path_factory: pytest.TempPathFactory) -> Iterator[TwoNodes]:
    if not pg_server.available():
        msg = "PostgreSQL's initdb/pg_ctl are missing (.ci/install installs Debian's postgresql)"
        if os.environ.get("CI"):
            pytest.fail(msg)
        pytest.skip(msg)
    import ray
    from ray.cluster_utils import Cluster

    import jr2ray
    from jr2ray.run.store.postgresql import close_pools

    home = tmp_path_factory.mktemp("jr2ray_cluster_home")
    os.environ["JR2RAY_HOME"] = str(home)  # both raylets (and so every worker) start with it
    if ray.is_initialized():
        ray.shutdown()
    server = pg_server.PgServer().start()
    cluster = Cluster(initialize_head=True, head_node_args={
        "num_cpus": 2, "resources": {HEAD_RESOURCE: 1}, "include_dashboard": False, "_system_config": FAST_HEALTH})
    try:
        second = cluster.add_node(num_cpus=2, resources={SECOND_RESOURCE: 1})
        ray.init(address=cluster.address, namespace="jr2ray", log_to_driver=False)
        cluster.wait_for_nodes()
        client = jr2ray.connect(store=server.url, launcher=None, virtual=False)
        yield TwoNodes(cluster, second, _node_id(HEAD_RESOURCE), _node_id(SECOND_RESOURCE), client, server.url,
                       home)
    finally:
        ray.shutdown()
        cluster.shutdown()
        close_pools()
        server.stop()
