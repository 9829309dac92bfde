"""Traces of a notes run on a real local Ray, exported over OTLP/HTTP to a receiver in this test: the spans of the
Run actor and of the Harness actor arrive as one trace, and a Gate event sent with a caller's traceparent links it."""

from __future__ import annotations

import os
import threading
import time
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest

from conformance_fakes import FakeModelServer, calls
from jr2ray.run import tracing

pytestmark = pytest.mark.ray


class Receiver:
    """A tiny OTLP/HTTP trace receiver: protobuf POSTs on /v1/traces, decoded, each span kept with its process."""

    def __init__(self) -> None:
        self.spans: list[dict[str, Any]] = []
        self.lock = threading.Lock()
        outer = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:  # noqa: N802 - the stdlib's name
                body = self.rfile.read(int(self.headers.get("Content-Length", 0)))
                ok = self.path == "/v1/traces" and self.headers.get("Content-Type") == "application/x-protobuf"
                if ok:
                    outer.take(ExportTraceServiceRequest.FromString(body))
                self.send_response(200 if ok else 404)
                self.send_header("Content-Type", "application/x-protobuf")
                self.end_headers()

            def log_message(self, *_: Any) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def take(self, req: ExportTraceServiceRequest) -> None:
        with self.lock:
            for rs in req.resource_spans:
                res = {a.key: a.value for a in rs.resource.attributes}
                pid = res["process.pid"].int_value if "process.pid" in res else None
                for ss in rs.scope_spans:
                    for s in ss.spans:
                        self.spans.append({"name": s.name, "trace": s.trace_id.hex(), "id": s.span_id.hex(),
                                           "parent": s.parent_span_id.hex() or None, "pid": pid,
                                           "attrs": {a.key: a.value for a in s.attributes},
                                           "links": [(ln.trace_id.hex(), ln.span_id.hex()) for ln in s.links]})

    def until(self, pred: Any, timeout: float = 60.0) -> list[dict[str, Any]]:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            with self.lock:
                got = list(self.spans)
            if pred(got):
                return got
            time.sleep(0.2)
        raise AssertionError(f"spans never arrived as expected: {sorted(s['name'] for s in got)}")


@pytest.fixture(scope="module")
def traced_ray(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Receiver, Path]]:
    """A private Ray whose workers export traces to the receiver (they inherit the OTLP variables), and this process
    too."""
    import ray

    receiver = Receiver()
    home = tmp_path_factory.mktemp("traced_home")
    saved = {k: os.environ.get(k) for k in (tracing.ENDPOINT_VAR, "OTEL_BSP_SCHEDULE_DELAY", "JR2RAY_HOME")}
    os.environ.update({tracing.ENDPOINT_VAR: receiver.url, "OTEL_BSP_SCHEDULE_DELAY": "100",
                       "JR2RAY_HOME": str(home)})
    if ray.is_initialized():
        ray.shutdown()
    ray.init(num_cpus=4, namespace="jr2ray", include_dashboard=False, log_to_driver=False)
    assert tracing.configure_from_env()
    try:
        yield receiver, home
    finally:
        ray.shutdown()
        tracing.uninstall()
        receiver.server.shutdown()
        for k, v in saved.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v


def test_a_notes_run_on_ray_exports_one_trace_across_its_actors(traced_ray: tuple[Receiver, Path]) -> None:
    import ray

    import jr2ray

    receiver, home = traced_ray
    caller = "00-" + "ab" * 16 + "-" + "cd" * 8 + "-01"  # an outside caller's span (another trace)
    with FakeModelServer() as model:
        model.push(calls(("ask", {"question": "Which change matters most?"})), calls(("done", {"notes": "# N"})))
        c = jr2ray.connect(store=home / "runs", launcher="jr2ray.harness.launcher:RayTurnLauncher")
        run = c.start("notes", {"changes": "fix: crash"},
                      env={"JR2RAY_NOTES_DRIVER": "harness", "JR2RAY_LOCAL_BASE_URL": model.url})
        deadline = time.time() + 60
        while not run.gates() and time.time() < deadline:
            time.sleep(0.1)
        (gate,) = run.gates()
        # As the API's gate route calls the run's host: the Gate event with the caller's traceparent.
        run.pid()  # caches the host that holds the run on the handle
        host = run.host
        ray.get(host.call.remote(run.id, "send", [gate.id, "reply", {"text": "The crash fix."}, None, caller], False))
        assert run.wait(60).status == "done"

    got = receiver.until(lambda s: sum(x["name"] == "chat tiny" for x in s) == 2
                         and any(x["name"] == "pick done" for x in s) and any(x["name"] == "gate reply" for x in s))
    mine = [s for s in got if s["attrs"].get("jr2ray.run.id") and s["attrs"]["jr2ray.run.id"].string_value == run.id]
    (root,) = [s for s in mine if s["name"] == "run notes"]
    trace = [s for s in got if s["trace"] == root["trace"]]
    by_id = {s["id"]: s for s in trace}
    (turn,) = [s for s in trace if s["name"] == "turn writer"]
    chats = [s for s in trace if s["name"] == "chat tiny"]
    assert len(chats) == 2 and all(s["parent"] == turn["id"] for s in chats)
    # The model requests were made in the Harness actor's process, the Turn in the Run actor's.
    assert {s["pid"] for s in chats} != {turn["pid"]}
    assert chats[0]["attrs"]["gen_ai.request.model"].string_value == "tiny"
    assert {s["name"] for s in trace if s["parent"] == turn["id"]} >= {"chat tiny", "pick ask", "pick done"}
    # The Gate event stays in the run's trace, under its root, linked to the caller's span.
    (g,) = [s for s in trace if s["name"] == "gate reply"]
    assert g["parent"] == root["id"] and g["links"] == [("ab" * 16, "cd" * 8)]
    assert all(s["parent"] is None or s["parent"] in by_id for s in trace), "every parent is in the trace"
