"""The tiny model builder: deterministic bytes, the shape vLLM's CPU backend accepts, a hermes-style template."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

pytest.importorskip("torch")
pytest.importorskip("transformers")
pytest.importorskip("tokenizers")

from jr2ray import tinymodel  # noqa: E402
from jr2ray.settings import load_settings  # noqa: E402
from jr2ray.tinymodel import build_tiny, ensure_tiny, file_hashes, read_marker  # noqa: E402

TOOLS = [
    {
        "type": "function",
        "function": {
            "name": "ask",
            "description": "Ask the editor one question.",
            "parameters": {
                "properties": {"question": {"type": "string"}},
                "required": ["question"],
                "type": "object",
            },
        },
    },
    {
        "type": "function",
        "function": {
            "name": "done",
            "description": "Publish the notes.",
            "parameters": {"properties": {"notes": {"type": "string"}}, "required": ["notes"], "type": "object"},
        },
    },
]


@pytest.fixture(scope="module")
def built(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    base = tmp_path_factory.mktemp("tiny")
    return build_tiny(base / "a", seed=0), build_tiny(base / "b", seed=0)


def test_same_seed_same_bytes(built: tuple[Path, Path]) -> None:
    a, b = built
    ha, hb = file_hashes(a), file_hashes(b)
    assert ha == hb
    assert {"config.json", "model.safetensors", "tokenizer.json", "tokenizer_config.json"} <= set(ha)


def test_other_seed_other_weights(built: tuple[Path, Path], tmp_path: Path) -> None:
    c = build_tiny(tmp_path / "c", seed=1)
    a = file_hashes(built[0])
    other = file_hashes(c)
    assert other["model.safetensors"] != a["model.safetensors"]
    assert other["tokenizer.json"] == a["tokenizer.json"]  # the tokenizer does not depend on the seed


def test_shape_fits_vllm_cpu(built: tuple[Path, Path]) -> None:
    cfg = json.loads((built[0] / "config.json").read_text())
    assert cfg["architectures"] == ["LlamaForCausalLM"]
    assert cfg["hidden_size"] == 128
    assert cfg["num_attention_heads"] == 2
    assert cfg["num_key_value_heads"] == 1
    assert cfg["hidden_size"] // cfg["num_attention_heads"] == 64 == cfg["head_dim"]
    assert cfg["num_hidden_layers"] == 2
    assert cfg["max_position_embeddings"] >= 32768  # the bench's --long profile
    assert 650 <= cfg["vocab_size"] <= 1000


def test_tokenizer_specials_and_template(built: tuple[Path, Path]) -> None:
    from transformers import AutoTokenizer

    tok = AutoTokenizer.from_pretrained(str(built[0]))
    assert len(tok) == json.loads((built[0] / "config.json").read_text())["vocab_size"]
    for special in ("<|im_start|>", "<|im_end|>", "<tool_call>", "</tool_call>"):
        ids = tok.encode(special, add_special_tokens=False)
        assert len(ids) == 1, special
    assert tok.eos_token == "<|im_end|>"
    assert "chat_template" in json.loads((built[0] / "tokenizer_config.json").read_text())

    messages = [
        {"role": "system", "content": "You write notes."},
        {"role": "user", "content": "Write."},
        {
            "role": "assistant",
            "content": None,
            "tool_calls": [{"id": "c1", "type": "function",
                            "function": {"name": "ask", "arguments": '{"question": "How long?"}'}}],
        },
        {"role": "tool", "tool_call_id": "c1", "content": "Short."},
    ]
    text = tok.apply_chat_template(messages, tools=TOOLS, add_generation_prompt=True, tokenize=False)
    assert text.startswith("<|im_start|>system\nYou write notes.\n\n# Tools\n")
    for tool in TOOLS:
        assert "\n" + json.dumps(tool, ensure_ascii=False) + "\n" in text  # one tojson line per tool
    call = '{"name": "ask", "arguments": {"question": "How long?"}}'
    assert f"<|im_start|>assistant\n<tool_call>\n{call}\n</tool_call><|im_end|>" in text
    assert "<|im_start|>user\n<tool_response>\nShort.\n</tool_response><|im_end|>\n" in text
    assert text.endswith("<|im_start|>assistant\n")

    # The tools block is the same bytes whatever follows it (the prefix-cache premise).
    other = tok.apply_chat_template(messages[:2], tools=TOOLS, add_generation_prompt=True, tokenize=False)
    head = text[: text.index("<|im_end|>") + len("<|im_end|>")]
    assert other.startswith(head)


def test_ensure_tiny_reuses_and_honours_home(built: tuple[Path, Path], tmp_path: Path,
                                             monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("JR2RAY_HOME", str(tmp_path / "home"))
    assert tinymodel.default_model_dir(load_settings()) == tmp_path / "home" / "models" / "tiny"
    out = ensure_tiny(load_settings(), out_dir=built[0])
    assert out == built[0]
    marker = read_marker(out)
    assert marker is not None and marker.seed == 0 and marker.served_model_name == "tiny"
    assert marker.files == file_hashes(out)
