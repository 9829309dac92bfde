"""store_speed's Ray arms: picks, activations and starts through the client, one arm per store (see store_speed.py).

Each arm is a client of virtual runs on its own store (so its own registry and pooled RunHosts) in one private local
Ray; the arms take turns in rounds, so the machine's load falls on both alike.
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

from load_watch import LoadWatch

IDLE_S = 1.0  # a parked run's idle time: short, so each round parks and wakes its run
WARM_PICKS = 5  # each round's first picks are not timed (the run may have parked while the other arm ran)


def init_ray() -> None:
    """A private local Ray (address="local": never join another cluster recorded on this machine)."""
    import ray

    ray.init(address="local", num_cpus=4, namespace="jr2ray", include_dashboard=False, log_to_driver=False)


class ActorArm:
    """One store's virtual runs through the client: a deploy run whose operator seat this driver plays."""

    def __init__(self, name: str, store: str, log_dir: Path) -> None:
        import jr2ray
        from jr2ray.settings import load_settings

        self.name = name
        self.door = {"log_path": str(log_dir / f"actor-{name}.log")}
        self.client = jr2ray.connect(store=store, launcher=None, virtual=True,
                                     settings=load_settings(idle_deactivate_s=IDLE_S, max_live_runs=8))
        self.samples: dict[str, list[float]] = {"pick": [], "activation": [], "start_round": []}
        self.started = 0
        self.start_s = 0.0
        self.run: Any = None
        self.n = 0

    def setup(self) -> None:

        # The pool's process starts, once for every slot, as `up` does: starts then time journals and activations,
        # not a new host process per run.
        self.client.warm_pool()
        self.run = self.client.start("deploy", self.door)
        self._start(self.client.settings.live_run_slots() - 1)  # each warm host hosts a deploy run once, untimed
        time.sleep(IDLE_S)  # (their cancels settle before the first timed start)

    def _pick(self, handle: Any) -> float:
        self.n += 1
        t0 = time.perf_counter()
        r = handle.pick("operator", "note", {"text": f"line {self.n}: checked the changelog"}, timeout=120)
        dt = time.perf_counter() - t0
        assert r.moved, r
        return dt

    def picks(self, n: int) -> None:
        for _ in range(WARM_PICKS):
            self._pick(self.run)
        self.samples["pick"].extend(self._pick(self.run) for _ in range(n))

    def activations(self, n: int) -> None:
        """Park the run (wait out its idle time), then time the first pick of a fresh handle: it wakes the run."""
        for _ in range(n):
            self._wait_parked(self.run.id, 60.0)
            fresh = self.client.get(self.run.id)
            self.samples["activation"].append(self._pick(fresh))
            self.run = fresh

    def _wait_parked(self, rid: str, timeout_s: float) -> None:

        deadline = time.monotonic() + timeout_s
        time.sleep(IDLE_S)
        while self.client.get(rid).presence() != "parked":
            if time.monotonic() > deadline:
                raise RuntimeError(f"{self.name}: run {rid} did not park within {timeout_s:.0f}s")
            time.sleep(0.05)

    def starts(self, n: int) -> None:
        """start_many, then every run live: its start activation (journal created, first macrostep) returned."""
        dt = self._start(n)
        self.start_s += dt
        self.started += n
        self.samples["start_round"].append(dt)

    def _start(self, n: int) -> float:

        t0 = time.perf_counter()
        handles = self.client.start_many("deploy", [self.door] * n)
        for h in handles:  # each live: its first activation (journal loaded, first macrostep) done
            h.ready()
        dt = time.perf_counter() - t0
        for h in handles:  # cancelled, so the next round's pick run does not wait for a slot behind them
            h.cancel()
        return dt

    def result(self, ms: Any) -> dict[str, Any]:
        out: dict[str, Any] = {k: ms(v) for k, v in self.samples.items()}
        out["start_per_s"] = round(self.started / self.start_s, 1) if self.start_s else None
        return out


def measure_actor(stores: dict[str, str], log_dir: Path, rounds: int, picks: int, parks: int, starts: int,
                  ms: Any) -> dict[str, Any]:
    """The Ray arms, taking turns in rounds. Returns each arm's result and the load average seen meanwhile."""
    import ray

    init_ray()
    watch = LoadWatch()
    try:
        arms = [ActorArm(name, store, log_dir) for name, store in stores.items()]
        for arm in arms:
            arm.setup()
        for r in range(rounds):
            for arm in arms[r % len(arms):] + arms[:r % len(arms)]:
                arm.picks(max(1, picks // rounds))
                arm.activations(max(1, parks // rounds))
                arm.starts(max(1, starts // rounds))
        out = {arm.name: arm.result(ms) for arm in arms}
    finally:
        watch.stop()
        load = watch.summary()
        ray.shutdown()
    out["load_average_1m"] = load
    return out
