"""A tiny random-weight chat model, built locally, for dev, CI and the demo.

Why: jr2ray's headline claim (a fixed tools block keeps vLLM's prefix cache hitting) is about prompt bytes and KV
blocks, not answer quality. A 2-layer Llama with a locally trained byte-level BPE tokenizer and a hermes-style chat
template exercises the whole serving path (chat template, tool parser, structured outputs, prefix cache) on a 2-core CPU
in about a minute, and never needs a model hub.

The build is deterministic: the same seed gives the same bytes in every file (weights are seeded and saved as
safetensors; the tokenizer is trained single-threaded on a fixed corpus).
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import tempfile
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import TYPE_CHECKING

from pydantic import BaseModel, ConfigDict

from jr2ray.settings import Settings, load_settings

if TYPE_CHECKING:  # imported lazily at run time: tokenizers and transformers are the cpu extra's
    from tokenizers import Tokenizer
    from transformers import PreTrainedTokenizerFast

SERVED_MODEL_NAME = "tiny"
"""The model id clients use (`model="tiny"`)."""

BUILDER_VERSION = 3
"""Bump when the builder's output changes, so `ensure_tiny` rebuilds stale copies (3: 32k positions)."""

MARKER_FILE = "jr2ray-tiny.json"

PAD_TOKEN = "<|endoftext|>"
IM_START = "<|im_start|>"
IM_END = "<|im_end|>"
TOOL_CALL_START = "<tool_call>"
TOOL_CALL_END = "</tool_call>"

# Chat-control tokens: special (skipped when decoding plain text).
CONTROL_TOKENS: tuple[str, ...] = (PAD_TOKEN, IM_START, IM_END)
# Tool-call tags: atomic tokens but not "special", so they survive decoding and a grammar may emit them.
TAG_TOKENS: tuple[str, ...] = (TOOL_CALL_START, TOOL_CALL_END, "<tool_response>", "</tool_response>")

VOCAB_TARGET = 700


class TinyModelSpec(BaseModel):
    """Shape of the tiny model. head_dim 64 because vLLM's CPU attention refuses smaller heads (at 16 it fails with
    "Unsupported CPU attention configuration")."""

    model_config = ConfigDict(frozen=True)

    hidden_size: int = 128
    intermediate_size: int = 256
    num_hidden_layers: int = 2
    num_attention_heads: int = 2
    num_key_value_heads: int = 1
    # 32k positions: the bench's --long profile replays a coder conversation past 24k prompt tokens.
    max_position_embeddings: int = 32768
    vocab_target: int = VOCAB_TARGET


class TinyMarker(BaseModel):
    """Written last into the model dir; its presence means the build finished."""

    builder_version: int
    seed: int
    served_model_name: str
    files: dict[str, str]


# A hermes-style template. The system turn carries the instructions and then a "# Tools" block with one `tojson`
# line per tool, so the tools block is a fixed byte run near the start of every prompt. Assistant calls render as
# <tool_call> blocks; tool results as <tool_response> blocks grouped into one user turn.
CHAT_TEMPLATE = r"""{#- jr2ray tiny: hermes-style tools template. Every tag trims; all text is emitted explicitly. -#}
{%- set ns = namespace(system='', start=0) -%}
{%- if messages and messages[0]['role'] == 'system' -%}
  {%- set ns.system = messages[0]['content'] -%}
  {%- set ns.start = 1 -%}
{%- endif -%}
{%- if ns.system or tools -%}
  {{- '<|im_start|>system\n' + ns.system -}}
  {%- if tools -%}
    {%- if ns.system -%}{{- '\n\n' -}}{%- endif -%}
    {{- '# Tools\n\nEach line inside <tools></tools> is the JSON signature of one function you can call:\n<tools>' -}}
    {%- for tool in tools -%}{{- '\n' + (tool | tojson) -}}{%- endfor -%}
    {{- '\n</tools>\n\nTo call a function, answer with a JSON object holding its name and arguments between tags, '
        'like this:\n<tool_call>\n{"name": <function-name>, "arguments": <arguments-json-object>}\n</tool_call>' -}}
  {%- endif -%}
  {{- '<|im_end|>\n' -}}
{%- endif -%}
{%- for message in messages[ns.start:] -%}
  {%- if message['role'] == 'tool' -%}
    {%- if loop.first or loop.previtem['role'] != 'tool' -%}{{- '<|im_start|>user' -}}{%- endif -%}
    {{- '\n<tool_response>\n' + message['content'] + '\n</tool_response>' -}}
    {%- if loop.last or loop.nextitem['role'] != 'tool' -%}{{- '<|im_end|>\n' -}}{%- endif -%}
  {%- elif message['role'] == 'assistant' -%}
    {{- '<|im_start|>assistant\n' -}}
    {%- if message['content'] -%}{{- message['content'] -}}{%- endif -%}
    {%- if message['tool_calls'] is defined and message['tool_calls'] -%}
      {%- for call in message['tool_calls'] -%}
        {%- set fn = call['function'] if call['function'] is defined else call -%}
        {%- if message['content'] or not loop.first -%}{{- '\n' -}}{%- endif -%}
        {{- '<tool_call>\n{"name": "' + fn['name'] + '", "arguments": ' -}}
        {%- if fn['arguments'] is string -%}{{- fn['arguments'] -}}{%- else -%}{{- fn['arguments'] | tojson -}}{%- endif -%}
        {{- '}\n</tool_call>' -}}
      {%- endfor -%}
    {%- endif -%}
    {{- '<|im_end|>\n' -}}
  {%- else -%}
    {{- '<|im_start|>' + message['role'] + '\n' + message['content'] + '<|im_end|>\n' -}}
  {%- endif -%}
{%- endfor -%}
{%- if add_generation_prompt -%}{{- '<|im_start|>assistant\n' -}}{%- endif -%}
"""  # noqa: E501 - the template's bytes are the model's files: rewrapping it would change them


def jr2ray_home(settings: Settings) -> Path:
    """jr2ray's state dir (the caller's settings' home; `JR2RAY_HOME` keeps CI and tests out of $HOME)."""
    return settings.home_dir(create=False)


def default_model_dir(settings: Settings) -> Path:
    """Where `jr2ray model build-tiny` and `jr2ray demo` keep the tiny model."""
    return jr2ray_home(settings) / "models" / SERVED_MODEL_NAME


_WORDS = (
    "the a an and or of to in on at for with by from is are was be been it this that these those you your we our "
    "they them he she his her i me my not no yes can will would should could may might must do does did done "
    "have has had make made write wrote read send sent ask asked answer reply replied editor writer notes note "
    "change changes draft drafting publish published question questions text title summary release version run "
    "runs state states turn turns tool tools call calls function functions name names arguments argument value "
    "values result results response request user assistant system model workflow agent gate event events pick "
    "picks allowed menu done finish wait stop start open close file files path line lines json string number "
    "integer boolean true false null list object array type types field fields required description properties "
    "please thank one two three first next last new old good bad more less all any each every some only also "
    "here there what which who when where why how because if then else so but now later before after again "
    "hello world today time day week bug fix fixed add added remove removed update updated test tests build"
).split()

_JSON_LINES = (
    '{"type": "function", "function": {"name": "ask", "description": "Ask the editor one question.", '
    '"parameters": {"properties": {"question": {"description": "One question for the editor.", '
    '"title": "Question", "type": "string"}}, "required": ["question"], "title": "AskInput", "type": "object"}}}',
    '{"name": "done", "arguments": {"notes": "Release notes for version 2."}}',
    '{"name": "reply", "arguments": {"text": "Yes, keep it short."}}',
    '{"delivered": true, "moved": true, "turn_complete": false, "allowed": ["ask", "done"], "answer": null}',
    '{"a": 1, "b": [1, 2, 3], "c": {"d": null, "e": false, "f": 0.5, "g": -12}}',
    '{"type": "object", "properties": {}, "additionalProperties": false}',
    '{"anyOf": [{"type": "string"}, {"type": "null"}], "default": null, "maxLength": 32}',
    "[1, 2, 3, 10, 20, 100, 256, 1024, -1, 0.25, 3.14, 1e3]",
)

_CHAT_LINES = (
    f"{IM_START}system\nYou write release notes.{IM_END}\n",
    f"{IM_START}user\nWrite the notes for these changes:\n- fix a bug\n- add a test{IM_END}\n",
    f"{IM_START}assistant\n{TOOL_CALL_START}\n" + '{"name": "ask", "arguments": {"question": "How long?"}}'
    f"\n{TOOL_CALL_END}{IM_END}\n",
    f"{IM_START}user\n<tool_response>\nThe editor replied: short.\n</tool_response>{IM_END}\n",
    "# Tools\n\nEach line inside <tools></tools> is the JSON signature of one function you can call:\n<tools>\n",
    "<jr2-briefing>\nA pick is a call that the newest Allowed now lists.\n</jr2-briefing>\n",
    "<jr2-turn>\nAllowed now: ask, done.\n</jr2-turn>\n",
    "The workflow's state changed since you last read the Allowed picks. Allowed now: done.\n",
)


def _corpus() -> Iterator[str]:
    """A fixed training corpus: English words, JSON punctuation, tool-call and chat-template text."""
    for _ in range(4):
        yield from _CHAT_LINES
        yield from _JSON_LINES
    for i in range(0, len(_WORDS), 12):
        yield " ".join(_WORDS[i : i + 12]) + ".\n"
        yield ", ".join(w.capitalize() for w in _WORDS[i : i + 6]) + "?\n"
    for i, w in enumerate(_WORDS):
        yield f'"{w}": {i}, "{w}_id": "{w}-{i}", '
        yield f"{w.upper()} {w.title()} {w}\n"


def _train_tokenizer(vocab_target: int) -> Tokenizer:
    """Byte-level BPE trained on the fixed corpus, then the chat and tool tags as atomic tokens."""
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
    from tokenizers import AddedToken, Tokenizer, decoders, models, pre_tokenizers, processors, trainers

    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    tok.post_processor = processors.ByteLevel(trim_offsets=False)
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_target - len(TAG_TOKENS),
        min_frequency=2,
        special_tokens=list(CONTROL_TOKENS),
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    tok.train_from_iterator(list(_corpus()), trainer=trainer)
    tok.add_tokens([AddedToken(t, special=False, normalized=False) for t in TAG_TOKENS])
    return tok


def _token_id(tok: PreTrainedTokenizerFast, token: str) -> int:
    """The id of one added token (the tokenizer answers a list only when given a list)."""
    found = tok.convert_tokens_to_ids(token)
    assert isinstance(found, int), (token, found)
    return found


def _sha256(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def file_hashes(model_dir: Path) -> dict[str, str]:
    """sha256 of every file the builder writes (minus the marker), to prove determinism."""
    return {
        p.name: _sha256(p) for p in sorted(model_dir.iterdir()) if p.is_file() and p.name != MARKER_FILE
    }


def build_tiny(
    out_dir: Path,
    seed: int = 0,
    progress: Callable[[str], None] | None = None,
    spec: TinyModelSpec | None = None,
) -> Path:
    """Build the tiny model into `out_dir` (`default_model_dir(settings)` is where the others look) and return it.

    The files are written to a sibling temp dir and moved into place at the end, so a reader never sees half a model.
    It stays one function (about 75 lines) because the steps share the temp dir and must all succeed before the move.
    """
    say = progress or (lambda _msg: None)
    spec = spec or TinyModelSpec()
    out = Path(out_dir).expanduser()
    out.parent.mkdir(parents=True, exist_ok=True)

    say("training the byte-level BPE tokenizer")
    tok = _train_tokenizer(spec.vocab_target)

    import torch
    from transformers import LlamaConfig, LlamaForCausalLM, PreTrainedTokenizerFast

    hf_tok = PreTrainedTokenizerFast(
        tokenizer_object=tok,
        eos_token=IM_END,
        pad_token=PAD_TOKEN,
        model_max_length=spec.max_position_embeddings,
        clean_up_tokenization_spaces=False,
    )
    hf_tok.chat_template = CHAT_TEMPLATE
    vocab_size = len(hf_tok)

    say(f"building a {spec.num_hidden_layers}-layer Llama (hidden {spec.hidden_size}, vocab {vocab_size})")
    config = LlamaConfig(
        vocab_size=vocab_size,
        hidden_size=spec.hidden_size,
        intermediate_size=spec.intermediate_size,
        num_hidden_layers=spec.num_hidden_layers,
        num_attention_heads=spec.num_attention_heads,
        num_key_value_heads=spec.num_key_value_heads,
        head_dim=spec.hidden_size // spec.num_attention_heads,
        max_position_embeddings=spec.max_position_embeddings,
        bos_token_id=_token_id(hf_tok, IM_START),
        eos_token_id=_token_id(hf_tok, IM_END),
        pad_token_id=_token_id(hf_tok, PAD_TOKEN),
        tie_word_embeddings=False,
        dtype="bfloat16",
    )
    config.architectures = ["LlamaForCausalLM"]
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        model = LlamaForCausalLM(config)
    # bf16 on disk: what vLLM's CPU backend runs anyway (it downcasts float32 with a warning per tensor).
    model = model.bfloat16().eval()

    tmp = Path(tempfile.mkdtemp(prefix=f".{out.name}-", dir=out.parent))
    try:
        say(f"writing {tmp}")
        model.save_pretrained(tmp, safe_serialization=True)
        hf_tok.save_pretrained(tmp)
        _normalise_files(tmp)
        marker = TinyMarker(
            builder_version=BUILDER_VERSION,
            seed=seed,
            served_model_name=SERVED_MODEL_NAME,
            files=file_hashes(tmp),
        )
        (tmp / MARKER_FILE).write_text(marker.model_dump_json(indent=2) + "\n")
        if out.exists():
            shutil.rmtree(out)
        tmp.rename(out)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    say(f"tiny model ready at {out}")
    return out


def _normalise_files(model_dir: Path) -> None:
    """Rewrite the JSON files with sorted keys, so nothing (dict order, temp paths) leaks into the bytes."""
    for p in sorted(model_dir.glob("*.json")):
        if p.name == "tokenizer.json":
            continue  # its key order is meaningful to `tokenizers`; it is deterministic as written
        data = json.loads(p.read_text())
        if p.name == "tokenizer_config.json":
            # The template also lives in tokenizer_config.json (older readers look only there), and the class is
            # named by its portable alias rather than the transformers-5 backend name.
            data["chat_template"] = CHAT_TEMPLATE
            data["tokenizer_class"] = "PreTrainedTokenizerFast"
        p.write_text(json.dumps(data, indent=2, sort_keys=True, ensure_ascii=False) + "\n")
    os.chmod(model_dir, 0o755)
    for p in model_dir.iterdir():
        os.chmod(p, 0o644)


def read_marker(model_dir: Path) -> TinyMarker | None:
    """The finished-build marker, or None when the dir holds no complete build."""
    path = Path(model_dir) / MARKER_FILE
    if not path.is_file():
        return None
    try:
        return TinyMarker.model_validate_json(path.read_text())
    except ValueError:
        return None


def ensure_tiny(settings: Settings, progress: Callable[[str], None] | None = None, out_dir: Path | None = None,
                seed: int = 0) -> Path:
    """Return the tiny model dir (`out_dir`, or under the settings' home), building it first when it is missing,
    stale or from another seed."""
    out = Path(out_dir).expanduser() if out_dir is not None else default_model_dir(settings)
    marker = read_marker(out)
    if marker is not None and marker.builder_version == BUILDER_VERSION and marker.seed == seed:
        return out
    return build_tiny(out, seed=seed, progress=progress)


def main(argv: list[str] | None = None) -> int:
    """`python -m jr2ray.tinymodel [OUT_DIR] [--seed N]`: build and print the dir and file hashes."""
    import argparse

    ap = argparse.ArgumentParser(prog="python -m jr2ray.tinymodel", description="Build the tiny local model.")
    ap.add_argument("out_dir", nargs="?", type=Path, default=None)
    ap.add_argument("--seed", type=int, default=0)
    args = ap.parse_args(argv)
    out = build_tiny(args.out_dir or default_model_dir(load_settings()), seed=args.seed, progress=print)
    for name, digest in file_hashes(out).items():
        print(f"{digest}  {name}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
