"""The CLI's own logic, without Ray: run-id prefixes, argument parsing, exit codes, and `model build-tiny`."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import httpx
import pytest
from up_instance import child_env, free_port, run_cli

from jr2ray.cli import (
    EXIT_ERROR,
    EXIT_USAGE,
    Api,
    CliError,
    main,
    parse_json_arg,
    split_passthrough,
)
from jr2ray.settings import load_settings

SSE = {"content-type": "text/event-stream; charset=utf-8"}
IDS = ["a1b2c3d4e5f6", "a1b2ffff0000", "9f8e7d6c5b4a"]


def fake_api(tmp_path: Path, ids: list[str], status: int = 200, body: Any = None) -> Api:
    def handler(request: httpx.Request) -> httpx.Response:
        if request.url.path == "/runs":
            return httpx.Response(200, json=[{"id": i} for i in ids])
        return httpx.Response(status, json=body if body is not None else {"path": request.url.path})

    api = Api(tmp_path, "http://jr2ray.test", load_settings())
    api.http = httpx.Client(base_url="http://jr2ray.test", transport=httpx.MockTransport(handler))
    return api


@pytest.mark.parametrize(("given", "want"), [
    ("9f8e7d6c5b4a", "9f8e7d6c5b4a"),  # a full id
    ("9f8e", "9f8e7d6c5b4a"),          # an unambiguous 4-character prefix
    ("a1b2c", "a1b2c3d4e5f6"),         # longer, to tell two runs apart
])
def test_a_run_id_or_an_unambiguous_prefix_resolves(tmp_path: Path, given: str, want: str) -> None:
    assert fake_api(tmp_path, IDS).resolve(given) == want


def test_an_ambiguous_prefix_names_every_match(tmp_path: Path) -> None:
    with pytest.raises(CliError) as err:
        fake_api(tmp_path, IDS).resolve("a1b2")
    assert err.value.code == EXIT_ERROR
    assert "ambiguous" in str(err.value) and "a1b2c3d4e5f6" in str(err.value) and "a1b2ffff0000" in str(err.value)


def test_a_short_prefix_is_a_usage_error_and_no_match_is_an_error(tmp_path: Path) -> None:
    api = fake_api(tmp_path, IDS)
    with pytest.raises(CliError) as short:
        api.resolve("9f8")
    assert short.value.code == EXIT_USAGE
    with pytest.raises(CliError) as none:
        api.resolve("0000")
    assert none.value.code == EXIT_ERROR and "no run matches" in str(none.value)


def test_a_409_carries_what_the_gate_accepts_now(tmp_path: Path) -> None:
    api = fake_api(tmp_path, IDS, status=409, body={"detail": "the run would not take 'x' now",
                                                    "accepts_now": ["reply"]})
    with pytest.raises(CliError) as err:
        api.request("POST", "/runs/9f8e7d6c5b4a/gates/g/events", {"event": "x", "input": {}})
    assert err.value.code == EXIT_ERROR
    assert str(err.value) == "409: the run would not take 'x' now (accepts now: reply)"


class _Broken(httpx.SyncByteStream):
    """An SSE body that delivers `chunks` and then breaks off, like a dropped connection."""

    def __init__(self, chunks: list[bytes]) -> None:
        self.chunks = chunks

    def __iter__(self) -> Any:
        yield from self.chunks
        raise httpx.ReadError("connection reset")


def test_a_broken_event_stream_resumes_after_the_last_event(tmp_path: Path) -> None:
    asked: list[str] = []

    def handler(request: httpx.Request) -> httpx.Response:
        asked.append(request.url.params.get("since", ""))
        if len(asked) == 1:
            return httpx.Response(200, headers=SSE, stream=_Broken([b"retry: 2000\n\n",
                                                       b'id: 7\nevent: pick\ndata: {"name": "ask"}\n\n',
                                                       b": keep-alive\n\n"]))
        return httpx.Response(200, headers=SSE, content=b'event: status\ndata: {"status": "done"}\n\n'
                                           b'event: end\ndata: {"status": "done"}\n\n')

    api = Api(tmp_path, "http://jr2ray.test", load_settings())
    api.http = httpx.Client(base_url="http://jr2ray.test", transport=httpx.MockTransport(handler))
    got = list(api.events("r1"))  # the `retry:` block and the keep-alive comment carry no event
    assert got == [("pick", {"name": "ask"}), ("status", {"status": "done"}), ("end", {"status": "done"})]
    assert asked == ["0", "7"]


def test_input_is_json_or_an_at_file(tmp_path: Path) -> None:
    f = tmp_path / "in.json"
    f.write_text('{"changes": "a"}')
    assert parse_json_arg('{"a": 1}', "--input") == {"a": 1}
    assert parse_json_arg(f"@{f}", "--input") == {"changes": "a"}
    for bad in ("{nope", f"@{tmp_path / 'missing.json'}"):
        with pytest.raises(CliError) as err:
            parse_json_arg(bad, "--input")
        assert err.value.code == EXIT_USAGE


@pytest.mark.parametrize(("argv", "head", "tail"), [
    (["bench", "--quick", "--out", "x"], ["bench"], ["--quick", "--out", "x"]),
    (["--home", "/h", "bench", "--help"], ["--home", "/h", "bench"], ["--help"]),
    (["bench"], ["bench"], []),
    (["run", "notes", "--input", "{}"], ["run", "notes", "--input", "{}"], None),
    (["--api", "http://x", "runs"], ["--api", "http://x", "runs"], None),
])
def test_bench_passes_its_whole_tail_to_the_suite(argv: list[str], head: list[str], tail: list[str] | None) -> None:
    assert split_passthrough(argv) == (head, tail)


def test_usage_errors_exit_2_in_process(capsys: pytest.CaptureFixture[str]) -> None:
    for argv in ([], ["nope"], ["send", "abcd"], ["up", "--llm", "tpu"]):
        with pytest.raises(SystemExit) as exc:
            main(argv)
        assert exc.value.code == EXIT_USAGE
    assert "usage: jr2ray" in capsys.readouterr().err


def test_no_api_is_an_error_that_says_so(tmp_path: Path) -> None:
    env = child_env(tmp_path, {"JR2RAY_API": f"http://127.0.0.1:{free_port()}"})
    for argv in (["runs"], ["status"], ["status", "abcd1234"], ["cancel", "abcd1234"]):
        res = run_cli(argv, env, 60)
        assert res.code == EXIT_ERROR, res.explain()
        assert "no jr2ray API" in res.stderr and "jr2ray up" in res.stderr
    down = run_cli(["down"], env, 60)
    assert down.code == EXIT_ERROR and "no instance" in down.stderr
    nowhere = run_cli(["runs"], child_env(tmp_path), 60)  # no instance file, no --api: no guessing
    assert nowhere.code == EXIT_ERROR and "no jr2ray instance recorded" in nowhere.stderr, nowhere.explain()


def test_model_build_tiny_prints_the_files_hashes_and_the_dir(tmp_path: Path) -> None:
    pytest.importorskip("transformers")
    pytest.importorskip("tokenizers")
    out = tmp_path / "tiny"
    res = run_cli(["model", "build-tiny", "--out", str(out)], child_env(tmp_path), 600)
    assert res.code == 0, res.explain()
    *hashes, last = res.stdout.strip().splitlines()
    assert Path(last) == out and (out / "config.json").is_file()
    names = set()
    for line in hashes:
        m = re.fullmatch(r"([0-9a-f]{64})  (\S+)", line)
        assert m, line
        names.add(m.group(2))
    assert {"config.json", "model.safetensors", "tokenizer.json", "chat_template.jinja"} <= names
    assert json.loads((out / "config.json").read_text())["hidden_size"] == 128


def test_a_single_machine_ray_head_binds_loopback_and_cluster_does_not() -> None:
    """`up` starts its head through jr2ray's shim with node address 127.0.0.1; `--cluster` runs Ray's CLI as is."""
    from jr2ray.cli.main import build_parser
    from jr2ray.cli.rayproc import _start_cmd

    single = _start_cmd(6390, 2, "/tmp/jr2ray-x")
    assert single[1:4] == ["-m", "jr2ray.cli.raystart", "start"]
    assert single[single.index("--node-ip-address") + 1] == "127.0.0.1"
    cluster = _start_cmd(6390, 2, "/tmp/jr2ray-x", cluster=True)
    assert cluster[1:4] == ["-m", "ray.scripts.scripts", "start"] and "--node-ip-address" not in cluster
    assert not build_parser().parse_args(["up"]).cluster  # not given: the kept value, else off
    assert build_parser().parse_args(["up", "--no-cluster"]).cluster is False
    assert build_parser().parse_args(["up", "--cluster"]).cluster is True


def test_the_shim_keeps_a_loopback_node_address_that_ray_would_swap() -> None:
    from ray._private import services

    from jr2ray.run.loopback import is_loopback_address, keep_loopback

    before = services.resolve_ip_for_localhost  # Ray's own: 127.0.0.1 becomes the routable address
    try:
        keep_loopback()
        keep_loopback()  # idempotent: wraps Ray's function once
        assert services.resolve_ip_for_localhost("127.0.0.1") == "127.0.0.1"
        assert services.resolve_ip_for_localhost("10.1.2.3") == "10.1.2.3"
    finally:
        services.resolve_ip_for_localhost = before
    assert [is_loopback_address(a) for a in ("127.0.0.1:6379", "localhost:1", "[::1]:2", "10.0.0.1:3", None)] == [
        True, True, True, False, False]
