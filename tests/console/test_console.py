"""The Console (V1-V3) in headless Chromium against a real `jr2ray up --llm none`.

The main test is the notes run end to end: start it from the Console's form, see `writing.drafting` lit, pick `ask`
for the writer through the API, see the Gate card appear, answer it in its form, and see the run move on.
"""

from __future__ import annotations

import json
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest
from up_instance import REPO, PickInBackground, UpInstance, start_keyed

pytestmark = pytest.mark.console

GATE = "notes.writing.asking"
TIMEOUT_S = 90.0


# ---- helpers ---------------------------------------------------------------------------------------------------
def until(driver: Any, what: str, check: Any, timeout_s: float = TIMEOUT_S) -> Any:
    """Wait for `check(driver)` in the page; on timeout fail with the page's state to debug from."""
    from selenium.common.exceptions import StaleElementReferenceException, TimeoutException
    from selenium.webdriver.support.ui import WebDriverWait

    try:
        return WebDriverWait(driver, timeout_s, poll_frequency=0.2,
                             ignored_exceptions=(StaleElementReferenceException,)).until(lambda d: check(d))
    except TimeoutException:
        center = driver.find_element("css selector", "#center").text
        pytest.fail(f"timed out after {timeout_s:.0f}s waiting for {what}; the page's center says:\n{center[:6000]}")


def steady(driver: Any, read: Any) -> Any:
    """`read(driver)` once it meets no redrawn element: the Console polls, so a part found a moment ago can be gone.
    `read` finds what it reads from the page each time; an element held from before would stay stale."""
    return until(driver, "a read of the page between two redraws", lambda d: (read(d),))[0]


def css(driver: Any, selector: str) -> list[Any]:
    return driver.find_elements("css selector", selector)


def click(driver: Any, selector: str) -> None:
    """Click the first match, again if the page redrew it under the pointer (a list refreshed meanwhile)."""
    from selenium.common.exceptions import StaleElementReferenceException

    def attempt(d: Any) -> bool:
        found = css(d, selector)
        if not found:
            return False
        try:
            found[0].click()
        except StaleElementReferenceException:
            return False
        return True

    until(driver, f"a clickable {selector}", attempt)


def fresh_page(driver: Any, up: UpInstance) -> None:
    """The Console from scratch, locked: no token kept from an earlier test."""
    driver.get(up.api + "/healthz")  # same origin, no Console script that could store the token again
    driver.execute_script("sessionStorage.clear()")
    driver.get(up.api + "/")
    until(driver, "the workflow list", lambda d: len(css(d, "#workflow-list li")) >= 3)


def choose_workflow(driver: Any, name: str) -> None:
    click(driver, f'#workflow-list li[data-workflow="{name}"]')
    until(driver, f"the {name} graph", lambda d: css(d, f'#graph svg .state[data-path="{name}"]'))


def unlock(driver: Any, token: str) -> None:
    box = css(driver, "#token")[0]
    box.clear()
    box.send_keys(token)
    css(driver, "#unlock")[0].click()


def lit(driver: Any) -> set[str]:
    return {g.get_attribute("data-path") for g in css(driver, "#graph svg .state.lit")}


def visible_forms(driver: Any) -> list[Any]:
    return [f for f in css(driver, "form.schema-form") if f.is_displayed()]


def record_telemetry(up: UpInstance, run_id: str, rows: list[dict[str, Any]]) -> None:
    """Push model-request telemetry into the Run actor, as a Harness does (H12), from a separate driver process."""
    script = (
        "import json, sys\n"
        "import jr2ray, ray\n"
        "from jr2ray.settings import load_settings\n"
        "client = jr2ray.connect(launcher=None, settings=load_settings(home=sys.argv[1]))\n"
        "run = client.get(sys.argv[2])\n"
        "for row in json.loads(sys.argv[3]):\n"
        "    run.record_telemetry(row)\n"
        "ray.shutdown()\n"
    )
    proc = subprocess.run([sys.executable, "-c", script, str(up.home), run_id, json.dumps(rows)], env=up.env,
                          cwd=REPO, capture_output=True, text=True, timeout=180)
    assert proc.returncode == 0, proc.stdout + proc.stderr


# ---- tests -----------------------------------------------------------------------------------------------------
def test_without_the_token_the_console_is_read_only(up: UpInstance, browser: Any) -> None:
    d = browser
    # A run exists, but a locked Console must not show it (200: a retry found the start that went through).
    assert start_keyed(up, "notes", {"changes": "x"}).status_code in (200, 201)
    fresh_page(d, up)
    assert [li.get_attribute("data-workflow") for li in css(d, "#workflow-list li")] == ["coder", "deploy", "notes"]
    choose_workflow(d, "notes")
    # What is public: the chart and the seats.
    for path in ("notes.writing", "notes.writing.drafting", "notes.writing.asking", "notes.published"):
        assert css(d, f'#graph svg .state[data-path="{path}"]'), path
    writer = css(d, '#seats .seat[data-state="notes.writing"]')[0].text
    assert "agent:writer" in writer and "ask" in writer and "done" in writer
    assert "reply" in css(d, '#seats .seat[data-state="notes.writing.asking"]')[0].text
    # What is not: runs, forms, the start button.
    assert css(d, "#mode")[0].text == "read-only"
    assert css(d, "#runs-locked")[0].is_displayed()
    assert not css(d, "#run-list li") and not visible_forms(d) and not css(d, "#start")[0].is_displayed()
    assert not [b for b in css(d, "button") if b.is_displayed() and "Start" in b.text]
    # A wrong token does not unlock it.
    unlock(d, "not-the-token")
    until(d, "the refusal", lambda d: "refused" in css(d, "#token-msg")[0].text)
    assert css(d, "#mode")[0].text == "read-only" and not visible_forms(d) and not css(d, "#run-list li")


def test_a_notes_run_driven_from_the_console(up: UpInstance, browser: Any, artifacts: Path) -> None:
    d = browser
    fresh_page(d, up)
    unlock(d, up.token)
    until(d, "unlocked mode", lambda d: css(d, "#mode")[0].text == "unlocked")
    choose_workflow(d, "notes")

    # Start the run from the form built from the door schema.
    changes = until(d, "the start form", lambda d: [t for t in css(d, '#start-form textarea[name="changes"]')
                                                    if t.is_displayed()])[0]
    changes.send_keys("fix: crash on empty input\nfeat: dark mode")
    click(d, "#start-run button[type=submit]")
    title = until(d, "the new run to be selected", lambda d: css(d, "#run-title")[0].text.startswith("run ")
                  and css(d, "#run-title")[0].text)
    run_id = title.split()[1]
    until(d, "writing.drafting lit", lambda d: "notes.writing.drafting" in lit(d))
    assert "notes.writing" in lit(d) and "notes.writing.asking" not in lit(d)
    until(d, "the run in the runs list", lambda d: css(d, f'#run-list li[data-run="{run_id}"] .badge.active'))
    with up.http() as http:
        run = http.get(f"/runs/{run_id}").json()
    assert run["context"]["changes"] == "fix: crash on empty input\nfeat: dark mode"
    iid = next(t["iid"] for t in run["turns"] if t["slot"] == "writer")

    # The writer picks `ask` (through the API, like a Harness); the Gate card appears with its form.
    pick = PickInBackground(up, iid, "ask", {"question": "Which change leads?"})
    card = until(d, "the Gate card", lambda d: css(d, f'.gate-card[data-gate="{GATE}"]'))[0]
    until(d, "writing.asking lit", lambda d: "notes.writing.asking" in lit(d))
    assert "notes.writing.drafting" not in lit(d)
    assert "Which change leads?" in steady(d, lambda d: css(d, f'.gate-card[data-gate="{GATE}"] .meta')[0].text)
    form = card.find_element("css selector", 'form[data-event="reply"]')
    assert form.find_element("css selector", "fieldset").is_enabled()
    until(d, "the outstanding pick in the history", lambda d: css(d, '#history tr[data-pick="ask"][data-pending]'))
    d.save_screenshot(str(artifacts / "console-gate.png"))

    # Answer it in the form: the Gate closes, the pick gets its answer, the run moves back to drafting.
    form.find_element("css selector", 'textarea[name="text"]').send_keys("Lead with the crash fix.")
    form.find_element("css selector", "button[type=submit]").click()
    until(d, "the Gate card to go", lambda d: not css(d, f'.gate-card[data-gate="{GATE}"]'))
    until(d, "writing.drafting lit again", lambda d: "notes.writing.drafting" in lit(d))
    receipt = pick.join()
    assert receipt["answer"] == "The editor replied: Lead with the crash fix." and receipt["moved"] is True
    def answered(d: Any) -> list[Any]:
        return [r for r in css(d, '#history tr[data-pick="ask"]') if not r.get_attribute("data-pending")]

    until(d, "the answered pick in the history", answered)
    cells = steady(d, lambda d: [c.text for c in answered(d)[0].find_elements("css selector", "td")])
    assert cells[1] == iid and cells[2].startswith("ask") and "Which change leads?" in cells[2]
    assert cells[3:] == ["yes", "no", "The editor replied: Lead with the crash fix."]

    # Telemetry, as the writer's Harness would record it: the per-Turn cache chart draws cached vs prefilled.
    record_telemetry(up, run_id, [
        {"iid": iid, "slot": "writer", "state": "notes.writing", "step": 1, "prompt_tokens": 445, "cached_tokens": 0},
        {"iid": iid, "slot": "writer", "state": "notes.writing", "step": 2, "prompt_tokens": 470,
         "cached_tokens": 416},
    ])
    bar = f'#cache-svg .turn-bar[data-iid="{iid}"]'
    until(d, "the Turn's cache bar", lambda d: css(d, bar))
    tip = steady(d, lambda d: css(d, f"{bar} title")[0].get_attribute("textContent"))
    assert "416 cached" in tip and "499 prefilled" in tip and "2 requests" in tip

    # The writer finishes; the run is done and `published` is lit.
    with up.http() as http:
        done = http.post(f"/agents/{iid}/picks", json={"name": "done", "args": {"notes": "- crash fix"}}).json()
    assert done["moved"] is True and done["turn_complete"] is True
    until(d, "the run's done status", lambda d: css(d, "#run-status-badge")[0].text == "done")
    until(d, "published lit", lambda d: "notes.published" in lit(d))
    until(d, "done in the runs list", lambda d: css(d, f'#run-list li[data-run="{run_id}"] .badge.done'))
    rows = steady(d, lambda d: [r.get_attribute("data-pick") for r in css(d, "#history tbody tr")])
    assert rows == ["ask", "done"]
    d.save_screenshot(str(artifacts / "console.png"))
    assert (artifacts / "console.png").stat().st_size > 10_000

    # Reloading replays the run from its feed: the same history, the same lit state.
    d.get(up.api + "/")
    until(d, "the run list after a reload", lambda d: css(d, f'#run-list li[data-run="{run_id}"]'))
    click(d, f'#run-list li[data-run="{run_id}"]')
    until(d, "published lit after a reload", lambda d: "notes.published" in lit(d))
    until(d, "the replayed history", lambda d: len(css(d, "#history tbody tr")) == 2)


def test_forms_follow_the_schemas_and_grey_what_a_gate_does_not_accept_now(up: UpInstance, browser: Any) -> None:
    d = browser
    fresh_page(d, up)
    unlock(d, up.token)
    until(d, "unlocked mode", lambda d: css(d, "#mode")[0].text == "unlocked")
    choose_workflow(d, "deploy")
    # The door of `deploy`: a string, a number and an integer, with their defaults.
    until(d, "the deploy start form", lambda d: css(d, '#start-form textarea[name="log_path"]'))
    seconds = css(d, '#start-form input[name="deploy_seconds"]')[0]
    cooldown = css(d, '#start-form input[name="cooldown_ms"]')[0]
    assert seconds.get_attribute("type") == "number" and seconds.get_attribute("value") == "0.2"
    assert cooldown.get_attribute("step") == "1" and cooldown.get_attribute("value") == "1000"
    # A Gate with two events, one of them accepted now: the other's form is greyed (disabled), not hidden.
    d.execute_script("""
        document.getElementById("run-detail").hidden = false;
        renderGates({id: "fake", gates: [{id: "review", state: "x.review", meta: {diff: "+1"}, accepts: [
          {name: "approve", description: "Approve.", schema: {properties: {by: {type: "string"}}, required: ["by"]}},
          {name: "request_changes", description: "Ask for changes.",
           schema: {properties: {why: {type: "string"}, severity: {enum: ["low", "high"]},
                                 blocking: {type: "boolean"}}}}],
          accepts_now: ["approve"]}]});
    """)
    card = until(d, "the synthetic Gate card", lambda d: css(d, '.gate-card[data-gate="review"]'))[0]
    approve = card.find_element("css selector", 'form[data-event="approve"] fieldset')
    changes = card.find_element("css selector", 'form[data-event="request_changes"] fieldset')
    assert approve.get_attribute("disabled") is None and changes.get_attribute("disabled") is not None
    # Everything inside a disabled fieldset is disabled: the form cannot be filled in or sent.
    assert approve.find_element("css selector", "button[type=submit]").is_enabled()
    assert approve.find_element("css selector", "textarea[name=by]").is_enabled()
    assert not changes.find_element("css selector", "button[type=submit]").is_enabled()
    assert not changes.find_element("css selector", "textarea[name=why]").is_enabled()
    assert "not accepted now" in changes.text, changes.text
    assert changes.find_element("css selector", "select[name=severity]").tag_name == "select"
    assert changes.find_element("css selector", "input[name=blocking]").get_attribute("type") == "checkbox"


def test_the_live_allowed_picks_beside_the_graph_are_the_models_line(up: UpInstance, browser: Any) -> None:
    """Beside the graph, each live Agent Turn's "Allowed now" line: the very text its model reads (the surface's)."""
    from jr2ray.menu import texts

    d = browser
    fresh_page(d, up)
    unlock(d, up.token)
    until(d, "unlocked mode", lambda d: css(d, "#mode")[0].text == "unlocked")
    with up.http() as http:
        run = http.post("/workflows/notes/runs", json={"input": {"changes": "fix: crash"}}).json()
    rid, iid = run["id"], run["turns"][0]["iid"]
    click(d, f'#run-list li[data-run="{rid}"]')

    def shown(d: Any) -> str | bool:
        found = css(d, f'#allowed-now .allowed-turn[data-iid="{iid}"] pre')
        return found[0].text if found and found[0].is_displayed() else False

    def surface_line() -> str:
        with up.http() as http:
            s = http.get(f"/agents/{iid}/surface").json()
        assert s["allowed_now"] == texts.allowed_line(s["allowed"])
        return s["allowed_now"]

    until(d, "the writer's Allowed now", lambda d: shown(d) == texts.allowed_line(["ask"]))
    line = surface_line()
    until(d, "the surface's own line on the page", lambda d: shown(d) == line)
    assert steady(d, lambda d: css(d, f'#allowed-now .allowed-turn[data-iid="{iid}"]')[0]
                  .get_attribute("data-slot")) == "writer"

    pick = PickInBackground(up, iid, "ask", {"question": "Which change leads?"})  # not at Rest while it waits
    until(d, "no pick allowed while ask is outstanding", lambda d: shown(d) == texts.allowed_line([]))
    with up.http() as http:
        gate = until(d, "the Gate", lambda d: http.get(f"/runs/{rid}").json()["gates"])[0]
        ok = http.post(f"/runs/{rid}/gates/{gate['id']}/events", json={"event": "reply", "input": {"text": "ed"}})
        assert ok.status_code == 200
    pick.join()
    until(d, "ask and done allowed after the reply", lambda d: shown(d) == texts.allowed_line(["ask", "done"]))
    line = surface_line()
    until(d, "the surface's own line on the page", lambda d: shown(d) == line)

    with up.http() as http:
        assert http.post(f"/runs/{rid}/cancel").json()["status"] == "cancelled"
    until(d, "no live Turn after the cancel",
          lambda d: not css(d, "#allowed-now .allowed-turn")
          and "No Agent Turn is live" in css(d, "#allowed-now")[0].text)


# ---- many runs: pages, filters, finding one, and what waits for you ---------------------------------------------
def unlocked_page(driver: Any, up: UpInstance) -> None:
    fresh_page(driver, up)
    unlock(driver, up.token)
    until(driver, "unlocked mode", lambda d: css(d, "#mode")[0].text == "unlocked")


def listed(driver: Any) -> list[str]:
    from selenium.common.exceptions import StaleElementReferenceException

    try:
        return [li.get_attribute("data-run") for li in css(driver, "#run-list li")]
    except StaleElementReferenceException:  # redrawn meanwhile: read it on the next poll
        return []


def choose(driver: Any, selector: str, value: str) -> None:
    from selenium.webdriver.support.ui import Select

    Select(css(driver, selector)[0]).select_by_value(value)


def test_the_run_list_pages_past_50_runs_filters_them_and_finds_one(up: UpInstance, browser: Any) -> None:
    """61 runs and more: the first page shows 50, the oldest is reached with "Older", opened from there, and the
    filters and the id-prefix search narrow the list through the API."""
    import uuid

    from jr2ray.run.store import NewRun, Store

    with up.http() as http:  # a real run, older than the batch below: it ends up beyond the first page
        r = http.post("/workflows/notes/runs", json={"input": {"changes": "fix: old"}})
        assert r.status_code == 201, r.text
        older = r.json()["id"]
    tag = uuid.uuid4().hex[:6]
    batch = [f"pg{tag}{i:02d}" for i in range(60)]  # oldest first; every fourth of deploy
    Store(up.home / "runs").create_runs([NewRun(id=rid, workflow="deploy" if i % 4 == 0 else "notes", digest="d",
                                                input={"i": i}, status="done") for i, rid in enumerate(batch)])
    d = browser
    unlocked_page(d, up)
    until(d, "a full first page", lambda d: len(listed(d)) == 50)
    first = listed(d)
    assert first[:50] == batch[::-1][:50] and older not in first and batch[0] not in first

    click(d, "#runs-pager button.older")
    until(d, "the second page", lambda d: batch[0] in listed(d))
    assert older in listed(d) and not set(listed(d)) & set(first)
    assert "page 2" in steady(d, lambda d: css(d, "#runs-pager .page")[0].text)
    click(d, f'#run-list li[data-run="{batch[0]}"]')
    until(d, "the old run opened", lambda d: css(d, "#run-title")[0].text == f"run {batch[0]}")
    until(d, "its status", lambda d: css(d, "#run-status-badge") and css(d, "#run-status-badge")[0].text == "done")
    click(d, "#runs-pager button.newer")
    until(d, "back on the first page", lambda d: listed(d) == first)

    choose(d, "#run-workflow-filter", "deploy")
    until(d, "only deploy runs", lambda d: listed(d) == [rid for i, rid in enumerate(batch) if i % 4 == 0][::-1])
    choose(d, "#run-workflow-filter", "")
    choose(d, "#run-status-filter", "active")
    until(d, "only active runs", lambda d: listed(d) and not set(listed(d)) & set(batch))
    assert older in listed(d)
    choose(d, "#run-status-filter", "")
    choose(d, "#run-where-filter", "queued")
    until(d, "no queued runs", lambda d: not listed(d) and "No runs here" in css(d, "#runs-msg")[0].text)
    choose(d, "#run-where-filter", "")

    box = css(d, "#run-prefix")[0]
    box.send_keys(older[:6])
    click(d, "#find-run button[type=submit]")
    until(d, "the run found by its prefix", lambda d: listed(d) == [older])
    box.clear()
    box.send_keys("zzzz")
    click(d, "#find-run button[type=submit]")
    until(d, "nothing found", lambda d: not listed(d) and "No run id starts with zzzz" in css(d, "#runs-msg")[0].text)
    with up.http() as http:
        http.post(f"/runs/{older}/cancel")


def test_waiting_for_you_lists_every_open_gate_and_links_to_its_run(up: UpInstance, browser: Any) -> None:
    """A Gate a real run opened, and Gates of runs parked in the store, are listed across runs; the link opens the
    run, where the Gate is answered, and then it leaves the list."""
    import uuid

    from jr2ray.run.store import NewRun, Store

    store = Store(up.home / "runs")
    parked = [f"wt{uuid.uuid4().hex[:8]}" for _ in range(2)]
    store.create_runs([NewRun(id=rid, workflow="deploy", digest="d", input={}, status="active") for rid in parked])
    for rid in parked:
        store.set_parked(rid, True, {"status": {"id": rid, "workflow": "deploy", "digest": "d", "status": "active",
                                                "value": "review"},
                                     "waiting": {"gates": ["deploy.review"], "turns": {}, "timer_due": None}})
    with up.http() as http:
        run = http.post("/workflows/notes/runs", json={"input": {"changes": "fix: crash"}}).json()
    rid, iid = run["id"], run["turns"][0]["iid"]
    pick = PickInBackground(up, iid, "ask", {"question": "Which change leads?"})

    d = browser
    unlocked_page(d, up)
    for sel in (f'#gate-list li[data-run="{other}"][data-gate="deploy.review"]' for other in parked):
        until(d, "a parked run's Gate", lambda d, sel=sel: css(d, sel))
    item = f'#gate-list li[data-run="{rid}"][data-gate="{GATE}"]'
    until(d, "the notes run's Gate", lambda d: css(d, item))
    assert "notes" in steady(d, lambda d: css(d, item)[0].text)
    assert int(steady(d, lambda d: css(d, "#waiting-count")[0].text).rstrip("+")) >= 3

    click(d, f'#gate-list li[data-run="{rid}"] a.open-run')
    until(d, "the run page", lambda d: css(d, "#run-title")[0].text == f"run {rid}")
    assert d.current_url.endswith(f"#run={rid}")
    card = until(d, "the Gate card", lambda d: css(d, f'.gate-card[data-gate="{GATE}"]'))[0]
    form = card.find_element("css selector", 'form[data-event="reply"]')
    form.find_element("css selector", 'textarea[name="text"]').send_keys("The crash fix.")
    form.find_element("css selector", "button[type=submit]").click()
    assert pick.join()["answer"] == "The editor replied: The crash fix."
    until(d, "the answered Gate to leave the list", lambda d: not css(d, f'#gate-list li[data-run="{rid}"]'))
    assert css(d, f'#gate-list li[data-run="{parked[0]}"]')

    d.get(up.api + f"/#run={rid}")  # the run's address opens it after a reload
    until(d, "the linked run", lambda d: css(d, "#run-title")[0].text == f"run {rid}")
    with up.http() as http:
        http.post(f"/runs/{rid}/cancel")


def _parked(up: UpInstance, run_id: str) -> bool:
    with up.http() as http:
        return any(r["id"] == run_id for r in http.get("/runs", params={"where": "parked"}).json())


def test_a_runs_timeline_shows_its_turn_requests_gate_wait_and_parked_period(
        up: UpInstance, browser: Any, artifacts: Path) -> None:
    """A notes run that parks while its writer thinks, asks the editor, and finishes: its timeline, drawn from the
    journal, has the run's steps, the writer's Turn with its two model requests (cached against prefilled), the
    Gate wait, the parked period and the end, on one axis. The screenshot goes to docs/ for the design page."""
    # No Console page left open by an earlier test: an open page reads its selected run's surface over and over, and
    # each read of a live run restarts its idle clock, so the run would never park (a known cost, see issue 21).
    browser.get(up.api + "/healthz")
    with up.http() as http:
        started = http.post("/workflows/notes/runs", json={"input": {"changes": "fix: crash\nfeat: dark mode"}})
        run_id = started.json()["id"]
        deadline = time.monotonic() + TIMEOUT_S
        while time.monotonic() < deadline and not (turns := http.get(f"/runs/{run_id}").json()["turns"]):
            time.sleep(0.2)
        iid = turns[0]["iid"]
    # At Rest with nothing running, the run parks after the idle setting; on a loaded 2-core box its Turn's first
    # request alone can take most of TIMEOUT_S, so the park gets twice that.
    deadline = time.monotonic() + 2 * TIMEOUT_S
    while time.monotonic() < deadline and not _parked(up, run_id):
        time.sleep(1.0)
    assert _parked(up, run_id), "the run never parked"
    record_telemetry(up, run_id, [  # the writer's model requests, as its Harness records them (H12)
        {"iid": iid, "slot": "writer", "state": "notes.writing", "step": 1, "model": "local/tiny",
         "prompt_tokens": 445, "cached_tokens": 0, "completion_tokens": 20, "latency_s": 0.9},
    ])
    pick = PickInBackground(up, iid, "ask", {"question": "Which change leads?"})
    with up.http() as http:
        deadline = time.monotonic() + TIMEOUT_S
        while time.monotonic() < deadline and not http.get(f"/runs/{run_id}").json()["gates"]:
            time.sleep(0.2)
        time.sleep(1.0)  # the editor reads the question
        r = http.post(f"/runs/{run_id}/gates/{GATE}/events", json={"event": "reply", "input": {"text": "The fix."}})
        assert r.status_code == 200, r.text
        pick.join()
    record_telemetry(up, run_id, [
        {"iid": iid, "slot": "writer", "state": "notes.writing", "step": 2, "model": "local/tiny",
         "prompt_tokens": 470, "cached_tokens": 416, "completion_tokens": 31, "latency_s": 0.4},
    ])
    with up.http() as http:
        done = http.post(f"/agents/{iid}/picks", json={"name": "done", "args": {"notes": "- crash fix"}}).json()
        assert done["turn_complete"] is True
        tl = http.get(f"/runs/{run_id}/timeline").json()
    assert tl["finished"] and any(b["kind"] == "parked" and b["end"] for b in tl["bars"])

    d = browser
    fresh_page(d, up)
    unlock(d, up.token)
    click(d, f'#run-list li[data-run="{run_id}"]')
    until(d, "the finished timeline", lambda d: css(d, '#timeline-svg[data-finished="1"]'))
    # Read the drawing in one go in the page (the feed's replay may redraw it meanwhile).
    tl = d.execute_script("""
        const svg = document.querySelector('#timeline-svg');
        const tip = (g) => g.querySelector('title').textContent;
        return {lanes: [...svg.querySelectorAll('.lane-label')].map((t) => t.textContent),
                bars: [...svg.querySelectorAll('.tl-bar')].map((g) => [g.dataset.kind, tip(g)]),
                marks: [...svg.querySelectorAll('.tl-mark')].map((g) => [g.dataset.kind, tip(g).split(' at ')[0],
                                                                         parseFloat(g.dataset.x)])};""")
    lanes = tl["lanes"]
    assert lanes[:2] == ["run", "steps"] and f"turn writer {iid.rsplit('.', 1)[-1]}" in lanes
    assert f"gate {GATE}" in lanes
    kinds = [k for k, _ in tl["bars"]]
    assert kinds.count("request") == 2 and {"run", "turn", "gate", "parked"} <= set(kinds)
    tips = [t for k, t in tl["bars"] if k == "request"]
    assert any("416 cached + 54 prefilled" in t for t in tips) and any("0 cached + 445 prefilled" in t for t in tips)
    xs = {label: x for _, label, x in tl["marks"]}
    assert {(k, label) for k, label, _ in tl["marks"]} >= {
        ("pick", "pick ask"), ("pick", "pick done"), ("gate_event", "gate event reply"), ("end", "end done"),
        ("step", "step start")}
    # The marks sit in time order along the axis: start, ask, the editor's reply, done, the end.
    assert xs["step start"] < xs["pick ask"] < xs["gate event reply"] < xs["pick done"] <= xs["end done"]
    time.sleep(1.0)  # no redraw pending: the picture is the finished run's
    out = REPO / "docs" / "console-timeline.png"

    def shoot(d: Any) -> bool:
        from selenium.common.exceptions import StaleElementReferenceException

        try:
            box = css(d, "#timeline")[0]
            d.execute_script("arguments[0].scrollIntoView()", box)
            return bool(box.screenshot(str(out)))
        except StaleElementReferenceException:
            return False

    until(d, "a screenshot of the timeline", shoot)
    d.save_screenshot(str(artifacts / "console-timeline-page.png"))
    assert out.stat().st_size > 5_000
