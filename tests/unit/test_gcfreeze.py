"""The driver's GC policy (jr2ray/run/gcfreeze.py): while many runs are waited on, what survives a full pass of the
cyclic GC is frozen, and then what survives each middle-generation pass, so a full pass (which stops the caller's
loop) walks only what is new; with few, nothing is."""

from __future__ import annotations

import gc
import threading
import time
from collections.abc import Iterator

import pytest

from jr2ray.run import gcfreeze

# Well clear of MANY on either side: a driver thread left by an earlier test of this process (the Ray tiers) may
# still move the count of watched runs by a few while these run.
LOTS = gcfreeze.MANY + 100
FEW = gcfreeze.MANY - 100


class Held:
    """Stands for what a driver keeps per waiting run (a handle, its standing)."""

    def __init__(self) -> None:
        self.parts: list[object] = [{}, []]


@pytest.fixture
def waited_on(monkeypatch: pytest.MonkeyPatch) -> Iterator[list[int]]:
    n = [0]
    monkeypatch.setattr(gcfreeze, "_counts", [lambda: n[0]])
    monkeypatch.setattr(gcfreeze, "_watched", 0)
    monkeypatch.setattr(gcfreeze, "_armed", False)
    gcfreeze.enable()
    automatic = gc.isenabled()
    gc.disable()  # only the passes a test makes: an automatic one between its steps would arm or freeze early
    try:
        yield n
    finally:
        if automatic:
            gc.enable()
        gcfreeze.disable()


def _tracked(objs: list[Held]) -> int:
    ids = {id(o) for o in objs}
    return sum(1 for o in gc.get_objects() if id(o) in ids)


def test_survivors_of_a_full_pass_are_frozen_while_many_runs_are_waited_on(waited_on: list[int]) -> None:
    waited_on[0] = LOTS
    kept = [Held() for _ in range(1000)]
    passes = gcfreeze.frozen_passes
    assert _tracked(kept) == 1000  # made after enable(): the collector still walks them
    gc.collect()
    assert gcfreeze.frozen_passes == passes + 1
    assert _tracked(kept) == 0, "a later full pass no longer walks them"
    assert gc.get_freeze_count() >= 3000


def test_with_few_runs_waited_on_a_full_pass_freezes_nothing(waited_on: list[int]) -> None:
    waited_on[0] = FEW
    kept = [Held() for _ in range(1000)]
    passes = gcfreeze.frozen_passes
    gc.collect()
    assert gcfreeze.frozen_passes == passes
    assert _tracked(kept) == 1000


def test_a_frozen_object_is_still_freed_when_its_last_reference_goes(waited_on: list[int]) -> None:
    import weakref

    waited_on[0] = LOTS
    held = Held()
    ref = weakref.ref(held)
    gc.collect()
    assert _tracked([held]) == 0
    del held
    assert ref() is None


def test_disable_gives_every_frozen_object_back_to_the_collector(waited_on: list[int]) -> None:
    waited_on[0] = LOTS
    kept = [Held() for _ in range(100)]
    gc.collect()
    assert _tracked(kept) == 0
    gcfreeze.disable()
    assert gc.get_freeze_count() == 0 and _tracked(kept) == 100
    assert gcfreeze._after_pass not in gc.callbacks



def test_survivors_of_a_middle_generation_pass_are_frozen_once_a_full_pass_froze(waited_on: list[int]) -> None:
    """The oldest generation does not fill up between full passes: what outlives a young pass is frozen then. Not
    before a full pass has frozen with many runs waited on: garbage already in the oldest generation would be
    frozen with it, never to be reclaimed."""
    waited_on[0] = LOTS
    early = [Held() for _ in range(1000)]
    middle = gcfreeze.frozen_middle_passes
    gc.collect(1)
    assert _tracked(early) == 1000 and gcfreeze.frozen_middle_passes == middle, "not armed yet"
    full = gcfreeze.frozen_passes
    gc.collect()
    assert gcfreeze.frozen_passes == full + 1 and _tracked(early) == 0
    kept = [Held() for _ in range(1000)]
    gc.collect(1)
    assert _tracked(kept) == 0, "a full pass would not walk them"
    assert gcfreeze.frozen_middle_passes == middle + 1 and gcfreeze.frozen_passes == full + 1


def test_a_pass_with_few_runs_waited_on_disarms_the_middle_passes(waited_on: list[int]) -> None:
    waited_on[0] = LOTS
    gc.collect()
    waited_on[0] = FEW
    gc.collect(1)
    waited_on[0] = LOTS
    kept = [Held() for _ in range(1000)]
    gc.collect(1)
    assert _tracked(kept) == 1000, "many again: it waits for a full pass before freezing young survivors"


def test_runs_watched_or_being_started_count_as_waited_on(waited_on: list[int]) -> None:
    """A burst of starts makes most of its objects before any run parks: those runs count while they are made, and
    a burst that makes many arms the middle passes at once with one full pass."""
    before = gcfreeze.waiting()
    gcfreeze.watching(1)
    assert gcfreeze.waiting() == before + 1
    gcfreeze.watching(-1)
    full = gcfreeze.frozen_passes
    with gcfreeze.starting(LOTS):
        assert gcfreeze.waiting() == before + LOTS and gcfreeze.frozen_passes == full + 1
        kept = [Held() for _ in range(1000)]
        gc.collect(1)
        assert _tracked(kept) == 0
    assert gcfreeze.waiting() == before
    with pytest.raises(RuntimeError), gcfreeze.starting(3):
        raise RuntimeError("a start refused")
    assert gcfreeze.waiting() == before, "a refused batch of starts is not counted after it"


def test_answers_heard_as_one_are_freed_without_the_collector(waited_on: list[int]) -> None:
    """`many.AllOf` leaves no cycle behind: once frozen, a cycle would never be freed."""
    import concurrent.futures
    import weakref

    from jr2ray.run.many import AllOf

    waited_on[0] = LOTS
    futs: list[concurrent.futures.Future[object]] = [concurrent.futures.Future() for _ in range(50)]
    gather = AllOf()
    for f in futs:
        gather.add(f)
    out = gather.close()
    gc.collect()  # frozen, as they would be while they wait for their answers
    for f in futs:
        f.set_result(Held())
    assert len(out.result()) == 50
    refs = [weakref.ref(f) for f in futs]
    del futs, out, f
    assert all(r() is None for r in refs), "freed by their reference counts, with no pass of the collector"


def _churn(old: list[list[int]], seconds: float) -> int:
    """Make a new object in place of each old one, as a driver does for its waiting runs, for `seconds`; the
    largest the youngest generation grew meanwhile."""
    gc.collect(0)  # each from an empty youngest generation
    biggest, i, end = 0, 0, time.monotonic() + seconds
    while time.monotonic() < end and i < len(old):
        for j in range(i, min(i + 3_000, len(old))):
            old[j] = [j, j]  # one made, one freed: the collector's count of new objects does not move
        i += 3_000
        biggest = max(biggest, len(gc.get_objects(0)))
        time.sleep(0.005)
    return biggest


@pytest.mark.skipif(not gcfreeze._MIDDLE, reason="Python 3.14's incremental collector counts otherwise")
def test_young_passes_are_paced_while_objects_are_made_in_place_of_others(waited_on: list[int]) -> None:
    """A young pass walks only what was made since the last one, even when frees keep the collector's count down
    (`_pace`): without it the youngest generation grew with every object made, and the pass that came at last
    held the driver's loop for as long as it took to walk them all."""
    gc.enable()  # the automatic passes too: what a driver has
    old = [[i] for i in range(300_000)]
    gc.collect()
    gc.freeze()  # the old ones out of every generation, as a driver's frozen state is
    try:
        waited_on[0] = FEW
        unpaced = _churn(old, 2.0)
        waited_on[0] = LOTS
        paced = _churn(old, 2.0)
    finally:
        gc.unfreeze()
        gc.disable()  # as the fixture left it
    assert unpaced > 100_000, "with few runs waited on, the collector is left as it is"
    assert paced < unpaced / 2, (paced, unpaced)


class Ticks:
    """Stands for `_pace`'s stop event: `wait` says "not stopped" `n` times, then "stopped"."""

    def __init__(self, n: int) -> None:
        self.left = n

    def wait(self, _timeout: float) -> bool:
        self.left -= 1
        return self.left < 0


def _passes_of_pace(ticks: int) -> list[int]:
    """The generations of the passes `_pace` makes in `ticks` steps, on this thread (the fixture's own pacing thread
    may make one meanwhile: not counted)."""
    seen: list[int] = []
    here = threading.get_ident()

    def note(phase: str, info: dict[str, int]) -> None:
        if phase == "stop" and threading.get_ident() == here:
            seen.append(info["generation"])

    gc.callbacks.append(note)
    try:
        gcfreeze._pace(Ticks(ticks))  # type: ignore[arg-type]
    finally:
        gc.callbacks.remove(note)
    return seen


def test_pacing_makes_young_passes_and_every_tenth_a_middle_one_only_while_many_are_waited_on(
        waited_on: list[int]) -> None:
    before = gc.get_threshold()
    gc.set_threshold(10**9, *before[1:])  # no automatic pass on this thread meanwhile: only `_pace`'s are counted
    gc.enable()
    try:
        waited_on[0] = LOTS
        assert _passes_of_pace(2 * gcfreeze.MIDDLE_EVERY) == ([0] * (gcfreeze.MIDDLE_EVERY - 1) + [1]) * 2
        waited_on[0] = FEW
        assert _passes_of_pace(gcfreeze.MIDDLE_EVERY) == [], "few runs waited on: the collector is left alone"
        waited_on[0] = LOTS
        gc.set_threshold(0)
        assert _passes_of_pace(gcfreeze.MIDDLE_EVERY) == [], "automatic passes switched off: none made"
    finally:
        gc.set_threshold(*before)
        gc.disable()
    assert _passes_of_pace(gcfreeze.MIDDLE_EVERY) == [], "the collector off (as Ray does to deserialize): none made"


@pytest.mark.skipif(not gcfreeze._PACED, reason="no pacing on this build")
def test_disable_stops_the_pacing_thread_before_it_returns(waited_on: list[int]) -> None:
    assert [t for t in threading.enumerate() if t.name == "jr2ray-gc-pace"], "enable() started it"
    gcfreeze.disable()
    assert not [t for t in threading.enumerate() if t.name == "jr2ray-gc-pace"], "no pass of it lands after disable()"
