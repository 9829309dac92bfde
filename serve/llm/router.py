"""The LLM app's request router: a conversation placed on a replica by Turn admission goes to that replica.

Why not only Serve's consistent hash: with a KV budget per replica (issue 25), the budget decides where a conversation
lives, because only it knows which replica has room and which already holds the workflow's shared prefix (its tools
block and Briefing). The Harness then sends the placement inside its session id (`jr2ray.harness.replicas`:
`<conversation>#replica=<k>`), and this router sends the request to the k-th replica in a stable order (replica ids
sorted). A session id without a placement is routed as Ray's `ConsistentHashRouter` routes it, so a Harness with
admission off, or any other client, keeps plain session affinity.

The order is stable while the replica set is: a replica that dies and comes back under a new id may move the
placements, which costs one prefill each (its cache is gone anyway).
"""

from __future__ import annotations

from ray.serve.experimental.consistent_hash_router import ConsistentHashRouter
from ray.serve.request_router import PendingRequest, RunningReplica

from jr2ray.harness.replicas import placed_replica


class PlacedReplicaRouter(ConsistentHashRouter):
    """Routes `...#replica=<k>` to the k-th replica (ids sorted), other replicas after it as fallbacks under
    backpressure; every other request as the consistent-hash router does."""

    async def choose_replicas(self, candidate_replicas: list[RunningReplica],
                              pending_request: PendingRequest | None = None) -> list[list[RunningReplica]]:
        session = pending_request.metadata.session_id if pending_request is not None else None
        k = placed_replica(session) if session else None
        if k is None or not candidate_replicas:
            return await super().choose_replicas(candidate_replicas, pending_request)
        if pending_request is not None:
            pending_request.routing_context.should_backoff = True
        ordered = sorted(candidate_replicas, key=lambda r: r.replica_id.unique_id)
        first = ordered[k % len(ordered)]
        return [[first], [r for r in ordered if r is not first]] if len(ordered) > 1 else [[first]]
