"""A driver's parked picks (`jr2ray.run.wakes.Waker`), in-process with stand-in hosts and registry: a pick whose run
parked is sent again, with the same delivery id and wake id, once the registry says the run woke; a wake heard
before the parked answer, and a registry that restarted, each still get the pick sent again exactly once."""

from __future__ import annotations

import asyncio
import contextlib
import threading
from types import SimpleNamespace
from typing import Any

from ray_stand_ins import Wired

from jr2ray.run.handover import DRAIN_BATCH, DRAIN_LEAST, Inbox
from jr2ray.run.models import Carried, PickParked, RunStatus, Standing, Waiting
from jr2ray.run.wakes import WakeBoard, Waker

LOOP: list[asyncio.AbstractEventLoop] = []  # the Waker's loop, where a stand-in call's answer is made


class _Ref:
    """An ObjectRef's two faces: awaitable (on the Waker's loop), and `.future()` (from any thread)."""

    def __init__(self, coro: Any) -> None:
        self.coro = coro

    def __await__(self) -> Any:
        return self.coro.__await__()

    def future(self) -> Any:
        return asyncio.run_coroutine_threadsafe(self.coro, LOOP[-1])


class _Method:
    """`.remote(...)` gives a ref to the next scripted answer (a value, or a callable of the arguments)."""

    def __init__(self, *answers: Any) -> None:
        self.answers = list(answers)
        self.calls: list[tuple[Any, ...]] = []

    def remote(self, *args: Any) -> Any:
        self.calls.append(args)
        answer = self.answers.pop(0) if len(self.answers) > 1 else self.answers[0]

        async def got() -> Any:
            return answer(*args) if callable(answer) else answer
        return _Ref(got())


class _ThreadNoted(_Method):
    """`_Method` that also notes the thread each call was sent from (the caller's, or the driver's loop)."""

    def __init__(self, *answers: Any) -> None:
        super().__init__(*answers)
        self.threads: list[str] = []

    def remote(self, *args: Any) -> Any:
        self.threads.append(threading.current_thread().name)
        return super().remote(*args)


class _Slow:
    """A host's `call` whose answer waits until the test sets `gate` (an answer still on its way)."""

    def __init__(self, gate: asyncio.Event, answer: Any) -> None:
        self.gate, self.answer = gate, answer
        self.calls: list[tuple[Any, ...]] = []

    def remote(self, *args: Any) -> Any:
        self.calls.append(args)

        async def later() -> Any:
            await self.gate.wait()
            return self.answer
        return _Ref(later())


class _Wakes:
    """The registry's long poll: each call waits until the test puts the answer (who woke). It waits on the Waker's
    own loop (no thread is left blocked when the test ends: a pool thread stuck in a get kept pytest from exiting)."""

    def __init__(self) -> None:
        self.queue: asyncio.Queue[dict[str, Any]] | None = None
        self.loop: asyncio.AbstractEventLoop | None = None

    def remote(self, *_args: Any) -> Any:
        async def next_answer() -> dict[str, Any]:
            if self.queue is None:
                self.queue = asyncio.Queue()
            return await self.queue.get()
        return next_answer()

    def put(self, answer: dict[str, Any]) -> None:
        assert self.loop is not None
        self.loop.call_soon_threadsafe(self._put, answer)

    def _put(self, answer: dict[str, Any]) -> None:
        if self.queue is None:
            self.queue = asyncio.Queue()
        self.queue.put_nowait(answer)


class _Registry:
    def __init__(self, activate_to: Any) -> None:
        self._actor_id = SimpleNamespace(hex=lambda: str(id(self)))
        self.wakes = _Wakes()
        self.polls = self.wakes
        self.activate = _Method([activate_to])


def _waker(activate_to: Any) -> tuple[Waker, _Registry]:
    reg = _Registry(activate_to)
    waker = Waker(reg)
    reg.wakes.loop = waker.loop
    LOOP.append(waker.loop)
    return waker, reg


def _host(call: Any) -> Any:
    """A stand-in host actor: its `call` method, and an actor id as Ray's handles have."""
    host = SimpleNamespace(call=call, _actor_id=SimpleNamespace(binary=lambda: str(id(call)).encode()))
    host.wire = Wired(host)
    return host


def _handle(host: Any, reg: Any) -> Any:
    """A stand-in VirtualRunHandle: its cached host, else the one the registry activates."""
    handle = SimpleNamespace(id="run-1", host=host)

    async def host_for_write() -> Any:
        if handle.host is None:
            (handle.host,) = await reg.activate.remote("run-1")
        return handle.host
    handle._host_for_write = host_for_write
    handle.landed = lambda got: got.value if isinstance(got, Carried) else got
    handle.watched = True
    return handle


def test_a_parked_pick_is_sent_again_to_the_host_the_wake_names() -> None:
    waker, reg = _waker(activate_to="unused")
    old = _host(_Method(PickParked(run_id="run-1")))
    new = _host(_Method("the receipt"))
    handle = _handle(old, reg)
    pending = waker.pick(handle, "writer", "ask", {"question": "q?"}, "ask-1")
    reg.polls.put({"registry": "r1", "runs": []})
    _until(lambda: "run-1" in waker.parked)
    assert not pending.done(), "answered before the run woke"
    assert handle.host is None, "the run parked: a write now must go to the registry, not a NotHere hop"
    reg.polls.put({"registry": "r1", "runs": [("run-1", new)]})
    assert pending.result(10) == "the receipt"
    sent = ("run-1", "pick", ["writer", "ask", {"question": "q?"}, "ask-1", waker.id], False, True)
    assert old.call.calls == [sent] and new.call.calls == [sent], "the same delivery id and wake id both times"
    assert handle.host is new and reg.activate.calls == [] and waker.resent == 1


def test_a_wake_heard_before_the_parked_answer_still_sends_the_pick_again() -> None:
    waker, reg = _waker(activate_to=None)
    new = _host(_Method("the receipt"))
    reg.activate = _Method([new])  # type: ignore[assignment]
    gate = asyncio.Event()
    old = _host(_Slow(gate, PickParked(run_id="run-1")))
    pending = waker.pick(_handle(old, reg), "writer", "ask", {}, "ask-1")
    reg.polls.put({"registry": "r1", "runs": [("run-1", new)]})  # the wake comes first
    _until(lambda: "run-1" in waker.early)
    waker.loop.call_soon_threadsafe(gate.set)  # then the parked answer
    assert pending.result(10) == "the receipt"
    assert reg.activate.calls == [("run-1",)], "the host is asked of the registry: the early wake's may be gone"
    assert not waker.early and waker.resent == 1


def test_a_watch_listening_before_its_note_hears_a_wake_a_parked_pick_took() -> None:
    """A pick parked on the run, and a watch that listens (`expect`) before the registry notes it: the wake comes
    before the watch awaits it; both hear it (a watch that listened only once it awaited hung the N=2,000 bench)."""
    waker, reg = _waker(activate_to="unused")
    new = _host(_Method("the receipt"))
    pending = waker.pick(_handle(_host(_Method(PickParked(run_id="run-1"))), reg), "writer", "ask", {}, "ask-1")
    reg.polls.put({"registry": "r1", "runs": []})
    _until(lambda: "run-1" in waker.parked)
    listening = waker.run(_expect(waker, "run-1"))
    wake = listening.result(10)
    reg.polls.put({"registry": "r1", "runs": [("run-1", new)]})  # the wake, before the watch awaits it
    assert pending.result(10) == "the receipt"
    assert waker.run(waker.woken("run-1", wake)).result(10) is new
    assert not waker.parked and not waker.waits and waker.resent == 1


async def _expect(waker: Waker, run_id: str) -> Any:
    return waker.expect(run_id)


def test_after_a_registry_restart_every_parked_pick_is_sent_again() -> None:
    new = _host(_Method("the receipt"))
    waker, reg = _waker(activate_to=new)
    old = _host(_Method(PickParked(run_id="run-1")))
    reg.polls.put({"registry": "r1", "runs": []})
    pending = waker.pick(_handle(old, reg), "writer", "ask", {}, "ask-1")
    _until(lambda: "run-1" in waker.parked)
    reg.polls.put({"registry": "r2", "runs": []})  # a new registry: it forgot who waited
    assert pending.result(10) == "the receipt"
    assert reg.activate.calls == [("run-1",)] and waker.resent == 1


def _on_loop(waker: Waker, fn: Any) -> Any:
    """Run `fn()` on the Waker's loop (where its records live) and return what it gave."""
    async def go() -> Any:
        return fn()
    return waker.run(go()).result(10)


def test_a_write_that_carried_a_parked_pick_answers_it_and_sends_again_only_the_one_without_a_receipt() -> None:
    """A Gate's reply takes this driver's picks parked on its run along (`take_parked`); the receipts its host gave
    back answer them (`carried`), with no pick sent again; one without a receipt (it waits for Rest) is sent alone
    to the host the write reached, with its own delivery id."""
    waker, reg = _waker(activate_to="unused")
    # two handles on the run (a parked answer drops its own handle's host: one handle's second pick could race it)
    first = waker.pick(_handle(_host(_Method(PickParked(run_id="run-1"))), reg), "writer", "ask", {}, "ask-1")
    second = waker.pick(_handle(_host(_Method(PickParked(run_id="run-1"))), reg), "editor", "look", {}, "look-1")
    reg.polls.put({"registry": "r1", "runs": []})
    _until(lambda: len(waker.parked.get("run-1", [])) == 2)
    taken = _on_loop(waker, lambda: waker.take_parked("run-1"))
    assert len(taken) == 2 and "run-1" not in waker.parked, "taken: a wake heard now does not send them again"
    live = _host(_Method("the look's receipt"))
    _on_loop(waker, lambda: waker.carried(live, taken, ["the ask's receipt", None]))
    assert first.result(10) == "the ask's receipt" and second.result(10) == "the look's receipt"
    assert [c[2][3] for c in live.call.calls] == ["look-1"], "only the pick without a receipt is sent again"
    assert waker.answered_carried == 1 and waker.resent == 1


def test_the_picks_of_a_write_that_failed_are_sent_again_through_the_registry() -> None:
    """A write that raised (or whose host let the run go) gave no receipts back: every pick it carried is sent
    again on its own, to the host the registry names, as at a wake; none is lost."""
    live = _host(_Method("the receipt"))
    waker, reg = _waker(activate_to=live)
    handle = _handle(_host(_Method(PickParked(run_id="run-1"))), reg)
    pending = waker.pick(handle, "writer", "ask", {}, "ask-1")
    reg.polls.put({"registry": "r1", "runs": []})
    _until(lambda: "run-1" in waker.parked)
    taken = _on_loop(waker, lambda: waker.take_parked("run-1"))
    _on_loop(waker, lambda: waker.carried(None, taken, None))
    assert pending.result(10) == "the receipt"
    assert reg.activate.calls == [("run-1",)] and waker.resent == 1 and waker.answered_carried == 0


def test_a_wake_heard_before_a_pick_was_sent_does_not_send_it_again_when_it_parks() -> None:
    """A wake whose parked picks rode with the write that woke the run finds nothing waiting, and leaves a mark;
    a pick sent after it that parks waits for the run's next wake: sent again at once, it would wake the run it
    just parked on, an activation for nothing."""
    waker, reg = _waker(activate_to="unused")
    new = _host(_Method("the receipt"))
    reg.polls.put({"registry": "r1", "runs": [("run-1", new)]})  # a wake, with nothing here waiting on it
    _until(lambda: "run-1" in waker.early)
    pending = waker.pick(_handle(_host(_Method(PickParked(run_id="run-1"))), reg), "writer", "ask", {}, "ask-1")
    _until(lambda: "run-1" in waker.parked)
    assert not pending.done() and waker.resent == 0 and reg.activate.calls == []
    reg.polls.put({"registry": "r1", "runs": [("run-1", new)]})  # its own wake
    assert pending.result(10) == "the receipt" and waker.resent == 1


def test_a_wake_of_the_activation_a_pick_parked_from_does_not_send_it_again_and_a_later_ones_does() -> None:
    """A pick sent again after a wake that was not its reply (or after a refused reply) activates the run itself;
    that activation's wake, heard while the pick was on its way, marked the run woken, and the pick that then parked
    was sent again at once: woken and parked once an idle spell, for ever (161 times in one trial). A wake counts
    for a parked pick only if its activation (lease epoch) is later than the one the pick parked from."""
    waker, reg = _waker(activate_to="unused")
    new = _host(_Method("the receipt"))
    reg.polls.put({"registry": "r1", "runs": [("run-1", new, None, 4)]})  # the wake of activation 4
    _until(lambda: "run-1" in waker.early)
    old = _host(_Method(PickParked(run_id="run-1", epoch=4)))  # ... which the pick then parked from
    pending = waker.pick(_handle(old, reg), "writer", "ask", {}, "ask-1")
    _until(lambda: "run-1" in waker.parked)
    assert not pending.done() and waker.resent == 0, "sent again on the wake of the activation it parked from"
    reg.polls.put({"registry": "r1", "runs": [("run-1", new, None, 5)]})  # a later activation: its wake
    assert pending.result(10) == "the receipt" and waker.resent == 1


def test_a_wake_of_the_same_activation_heard_after_the_pick_was_sent_does_not_send_it_again() -> None:
    """The pick's own send activated the run (epoch 4), and that activation's wake reached this driver while the
    pick was on its way: heard after it was sent, but of the activation the pick then parked from. Not its wake."""
    waker, reg = _waker(activate_to="unused")
    new = _host(_Method("the receipt"))
    gate = asyncio.Event()
    pending = waker.pick(_handle(_host(_Slow(gate, PickParked(run_id="run-1", epoch=4))), reg), "writer", "ask", {},
                         "ask-1")
    reg.polls.put({"registry": "r1", "runs": [("run-1", new, None, 4)]})  # after the send, before its answer
    _until(lambda: "run-1" in waker.early)
    waker.loop.call_soon_threadsafe(gate.set)
    _until(lambda: "run-1" in waker.parked)
    assert not pending.done() and waker.resent == 0 and reg.activate.calls == []


def test_a_later_activations_wake_heard_before_the_pick_was_sent_still_sends_it_again() -> None:
    """The activation order decides, not the clock: a pick answered "parked" by an older activation's host (its
    cached host, epoch 4) after the run had been woken again (epoch 5) is sent again at once."""
    live = _host(_Method("the receipt"))
    waker, reg = _waker(activate_to=live)
    reg.polls.put({"registry": "r1", "runs": [("run-1", live, None, 5)]})  # heard first
    _until(lambda: "run-1" in waker.early)
    pending = waker.pick(_handle(_host(_Method(PickParked(run_id="run-1", epoch=4))), reg), "writer", "ask", {},
                         "ask-1")
    assert pending.result(10) == "the receipt" and waker.resent == 1


def _standing(version: int) -> Standing:
    return Standing(status=RunStatus(id="run-1", workflow="notes", digest="d", status="active"),
                    waiting=Waiting(gates=["notes.writing.asking"]), version=version)


def test_the_board_hands_each_waiting_caller_the_host_and_how_the_run_stood_once_taken() -> None:
    async def go() -> tuple[list[Any], list[Any], list[Any]]:
        board = WakeBoard()
        board.note("run-1", ["w1", "w2"])
        assert board.watched("run-1") and not board.watched("run-2")
        board.tell("run-1", "host-a", _standing(7), 3)
        board.tell("run-2", "host-a")  # nobody waits on run-2: nobody hears of it
        assert not board.watched("run-1")  # told once: a later activation is not theirs
        return await board.poll("w1", 0.01), await board.poll("w2", 0.01), await board.poll("w1", 0.01)

    first, second, again = asyncio.run(go())
    assert first == second == [("run-1", "host-a", _standing(7), 3)] and again == []


def test_a_watching_driver_gets_the_standing_its_wake_carried_with_the_host() -> None:
    waker, reg = _waker(activate_to="unused")
    new = _host(_Method("unused"))
    watching = waker.run(waker.woken_standing("run-1"))
    plain = waker.run(waker.woken("run-2"))
    _until(lambda: "run-1" in waker.waits and "run-2" in waker.waits)
    # run-1's host said how the run stood once taken; run-2's wake names only its host (as after a failed adopt)
    reg.polls.put({"registry": "r1", "runs": [("run-1", new, _standing(3)), ("run-2", new)]})
    host, standing = watching.result(10)
    assert host is new and standing == _standing(3)  # the driver watches on from version 3: no call to ask it
    assert plain.result(10) is new


def test_an_inbox_runs_a_burst_in_chunks_and_the_loop_serves_others_between() -> None:
    """1,000 answers handed to a caller's loop at once run a chunk at a time, in order, with that loop's other work
    between the chunks (its heartbeat is not held for all of them)."""
    async def go() -> list[Any]:
        loop = asyncio.get_running_loop()
        inbox, seen = Inbox(loop), []
        for i in range(3 * DRAIN_BATCH + 1):
            inbox.put(lambda i=i: seen.append(i))
        loop.call_soon(lambda: seen.append("other"))
        while len(seen) < 3 * DRAIN_BATCH + 2:
            await asyncio.sleep(0)
        return seen

    seen = asyncio.run(go())
    assert seen.index("other") == DRAIN_BATCH
    assert [x for x in seen if x != "other"] == list(range(3 * DRAIN_BATCH + 1))


def test_an_inbox_halves_its_batch_while_what_a_batch_sets_off_holds_the_loop_and_grows_it_back_after() -> None:
    """Each answer wakes a task that costs the loop 1 ms on a fake clock, after the batch: 200 a batch held it
    200 ms, so batches halve down to DRAIN_LEAST; once those tasks cost nothing, they double back up."""
    clock = [0.0]

    async def go() -> list[int]:
        loop = asyncio.get_running_loop()
        inbox, sizes, costly = Inbox(loop, clock=lambda: clock[0]), [], [True]
        seen = [0]

        def woken() -> None:  # the task an answer wakes, in the loop's next step
            if costly[0]:
                clock[0] += 0.001

        def answer() -> None:
            seen[0] += 1
            loop.call_soon(woken)

        for _ in range(2000):
            inbox.put(answer)
        while seen[0] < 2000:
            sizes.append(inbox.batch)
            await asyncio.sleep(0)
        costly[0] = False
        for _ in range(2000):
            inbox.put(answer)
        while seen[0] < 4000:
            sizes.append(inbox.batch)
            await asyncio.sleep(0)
        return sizes

    sizes = asyncio.run(go())
    steps = [b for i, b in enumerate(sizes) if i == 0 or b != sizes[i - 1]]
    shrunk = steps.index(DRAIN_LEAST)
    assert steps[: shrunk + 1] == [DRAIN_BATCH, 100, 50, DRAIN_LEAST]  # halved while the loop was held
    assert steps[shrunk + 1:] == [64, 128, DRAIN_BATCH]  # doubled back after


def test_an_answer_for_a_loop_that_has_closed_is_dropped_and_the_inbox_takes_more_later() -> None:
    """A script's `asyncio.run` ends while a watch of its is still being let go on the driver's loop: the answer
    that comes after has nobody to go to. It is dropped, where it raised "Event loop is closed" in the driver."""
    loop = asyncio.new_event_loop()
    inbox, seen = Inbox(loop), []
    loop.close()
    inbox.put(lambda: seen.append("late"))  # raised RuntimeError before
    assert not inbox.items and not inbox.armed and seen == []


def _until(cond: Any, timeout_s: float = 10.0) -> None:
    import time

    t0 = time.monotonic()
    while not cond():
        assert time.monotonic() - t0 < timeout_s, "timed out"
        time.sleep(0.01)


def test_cancelling_what_run_returned_stops_a_watch_and_never_a_delivery() -> None:
    """A caller that gives up on a watch (a wait's timeout, an event stream closed) stops the coroutine it started
    on the driver's loop: a watch left running kept its run counted among those waited on (`gcfreeze`) until the
    run finished. A pick or Gate event given up on is still delivered (as a Ray call is once sent)."""
    import threading

    waker, _reg = _waker(activate_to=None)

    def started_and_stopped(stop_on_cancel: bool) -> tuple[bool, bool]:
        started, stopped, carried_on = threading.Event(), threading.Event(), threading.Event()

        async def work() -> None:
            started.set()
            try:
                await asyncio.sleep(0.3)
                carried_on.set()
            finally:
                stopped.set()

        out = waker.run(work(), stop_on_cancel)
        assert started.wait(10)
        assert out.cancel()
        assert stopped.wait(10)
        return carried_on.is_set(), out.cancelled()

    assert started_and_stopped(True) == (False, True), "the watch went on after its caller cancelled"
    assert started_and_stopped(False) == (True, True), "a delivery was dropped when its caller gave up"
    done = waker.run(asyncio.sleep(0, result="answered"), stop_on_cancel=True)
    assert done.result(10) == "answered"  # an answered call's own future is not touched


def test_a_burst_of_picks_from_one_loop_sends_its_share_straight_and_the_rest_by_the_drivers_loop() -> None:
    """A script's loop wakes hundreds of tasks in one step and each sends a pick to its run's host: once the step
    has spent its share (`LoopBudget`), the rest go by the driver's loop, so the caller's loop is not held for all
    of them; each is sent once and answered."""
    from jr2ray.run import loop_budget

    senders: list[tuple[str, str]] = []

    def answer(_rid: str, _m: str, args: list[Any], *_r: Any) -> str:
        return f"receipt {args[3]}"

    class _Recorded(_Method):
        def remote(self, *args: Any) -> Any:
            senders.append((threading.current_thread().name, args[2][3]))
            return super().remote(*args)

    host = _host(_Recorded(answer))
    waker, reg = _waker(host)

    async def go() -> list[Any]:
        budget = loop_budget.LoopBudget.of(asyncio.get_running_loop())
        budget.step_s = 0.0  # one send straight a step: the test does not depend on how fast this box sends
        picks = [waker.pick(_handle(host, reg), "writer", "done", {}, f"d-{i}") for i in range(40)]
        return list(await asyncio.gather(*(_await(p) for p in picks)))

    assert asyncio.run(go()) == [f"receipt d-{i}" for i in range(40)]
    assert sorted(d for _, d in senders) == sorted(f"d-{i}" for i in range(40))  # each sent once
    assert [d for t, d in senders if t != "jr2ray-driver"] == ["d-0"]  # the step's share, from the caller
    assert [d for t, d in senders if t == "jr2ray-driver"] == [f"d-{i}" for i in range(1, 40)]  # in order


def test_a_sync_pick_on_a_loop_whose_step_has_spent_its_share_is_answered() -> None:
    """A sync `pick` blocks the loop it is called on; past the step's share its send goes by the driver's loop,
    which is not blocked, so it is answered (a send held for the blocked loop's next step never would be)."""
    from jr2ray.run import loop_budget

    def answer(_rid: str, _m: str, args: list[Any], *_r: Any) -> str:
        return f"receipt {args[3]}"

    method = _ThreadNoted(answer)
    host = _host(method)
    waker, reg = _waker(host)

    async def go() -> tuple[Any, Any]:
        budget = loop_budget.LoopBudget.of(asyncio.get_running_loop())
        budget.step_s = 0.0
        first = waker.pick(_handle(host, reg), "writer", "done", {}, "d-0")
        got = waker.pick(_handle(host, reg), "writer", "done", {}, "d-1").result(timeout=10)  # on the loop
        return await first, got

    assert asyncio.run(go()) == ("receipt d-0", "receipt d-1")
    assert [(t, c[2][3]) for t, c in zip(method.threads, host.call.calls, strict=True)] == \
        [("MainThread", "d-0"), ("jr2ray-driver", "d-1")]


def test_a_pick_past_the_steps_share_whose_caller_gives_up_at_once_is_still_sent() -> None:
    """A pick straight from the caller's thread is sent before `pick_async` returns, so giving up on it never
    unsent it; one handed to the driver's loop must not depend on how soon that loop starts it."""
    from jr2ray.run import loop_budget

    host = _host(_Method(lambda _rid, _m, args, *_r: f"receipt {args[3]}"))
    waker, reg = _waker(host)

    async def go() -> None:
        budget = loop_budget.LoopBudget.of(asyncio.get_running_loop())
        budget.step_s = 0.0
        await _await(waker.pick(_handle(host, reg), "writer", "done", {}, "d-0"))
        budget.used = 1  # this step has sent its share
        given_up = asyncio.ensure_future(_await(waker.pick(_handle(host, reg), "writer", "done", {}, "d-1")))
        await asyncio.sleep(0)
        given_up.cancel()

    asyncio.run(go())
    _until(lambda: len(host.call.calls) == 2)
    assert [c[2][3] for c in host.call.calls] == ["d-0", "d-1"]


def test_picks_from_a_thread_with_no_loop_are_all_sent_straight_from_it() -> None:
    """A plain thread's call blocks only that thread, so no step's share applies: every pick goes straight from it,
    none by the driver's loop."""
    method = _ThreadNoted(lambda _rid, _m, args, *_r: f"receipt {args[3]}")
    host = _host(method)
    waker, reg = _waker(host)
    got = [waker.pick(_handle(host, reg), "writer", "done", {}, f"d-{i}").result(timeout=10) for i in range(20)]
    assert got == [f"receipt d-{i}" for i in range(20)]
    assert method.threads == ["MainThread"] * 20


def test_an_inbox_stopped_mid_batch_by_a_keyboard_interrupt_runs_the_rest_next() -> None:
    async def go() -> list[Any]:
        loop = asyncio.get_running_loop()
        inbox, seen = Inbox(loop), []

        def interrupted() -> None:
            raise KeyboardInterrupt

        inbox.put(lambda: seen.append(1))
        inbox.put(interrupted)
        inbox.put(lambda: seen.append(2))
        with contextlib.suppress(KeyboardInterrupt):
            inbox._drain()
        assert seen == [1] and inbox.armed
        while len(seen) < 2:
            await asyncio.sleep(0)
        inbox.put(lambda: seen.append(3))  # and it takes more after
        while len(seen) < 3:
            await asyncio.sleep(0)
        return seen

    assert asyncio.run(go()) == [1, 2, 3]


def test_an_inbox_whose_loop_closed_with_a_drain_queued_drops_what_waited() -> None:
    """A put lands after the loop's last step and before it closes: the drain it queued never runs. The next put
    finds the loop closed and drops what waited, not keeping it (and the loop) for ever."""
    loop = asyncio.new_event_loop()
    inbox, seen = Inbox(loop), []
    inbox.put(lambda: seen.append("queued"))  # a drain is queued, never run
    loop.close()
    inbox.put(lambda: seen.append("late"))
    assert not inbox.items and not inbox.armed and seen == []


async def _await(p: Any) -> Any:
    return await p
