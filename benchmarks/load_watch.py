"""The 1-minute load average, sampled while a benchmark runs: the box may be shared, so each result says how loaded
it was when it was measured. One sampler for every benchmark script."""

from __future__ import annotations

import os
import threading


class LoadWatch:
    """Samples the load average every `every_s` seconds on a daemon thread until `stop`."""

    def __init__(self, every_s: float = 5.0) -> None:
        self.samples: list[float] = []
        self._stop = threading.Event()
        self._every = every_s
        threading.Thread(target=self._run, daemon=True).start()

    def _run(self) -> None:
        while not self._stop.is_set():
            self.samples.append(os.getloadavg()[0])
            self._stop.wait(self._every)

    def stop(self) -> None:
        self._stop.set()

    def summary(self) -> dict[str, float]:
        xs = self.samples or [os.getloadavg()[0]]
        return {"min": round(min(xs), 1), "mean": round(sum(xs) / len(xs), 1), "max": round(max(xs), 1)}
