"""A llama.cpp variant is checked before work as a vLLM variant is: its GGUF file by its header (a failed
download's HTML page, a file cut short, a version llama.cpp does not read), and its server settings against
llama-cpp-python's own settings models (where its environment is set up); one line each, exit 2."""

from __future__ import annotations

import os
import struct
from pathlib import Path

import pytest

from core.recipe import RecipeError
from perf.engines.llamacpp import resolve_llamacpp_python
from perf.validate import gguf_problem
from quant.validate import check_file
from tests.helpers import quant
from tests.quantize.test_gguf_source import write_tiny_gguf

HAS_LLAMACPP = Path(resolve_llamacpp_python(None)).is_file()


def recipe(tmp_path: Path, gguf: str, args: str = "{}", python: str = "") -> Path:
    path = tmp_path / "r.yaml"
    path.write_text("name: r\nmodel: demo\nengine: {args: {max_model_len: 512}}\nvariants:\n"
                    "  - {name: bf16, baseline: true}\n"
                    f"  - name: q\n    llamacpp: {{gguf: {gguf}, args: {args}{python}}}\n"
                    "tasks: [{name: demo_math, limit: 2}]\n")
    return path


def test_a_real_gguf_file_passes_its_header_check(tmp_path):
    write_tiny_gguf(tmp_path / "tiny.gguf")
    assert gguf_problem(tmp_path / "tiny.gguf") is None


@pytest.mark.parametrize("content, said", [
    (b"<!DOCTYPE html><html><body>404</body></html>", "not a GGUF file (it begins '<!DOCTYPE html><', not 'GGUF'"),
    (b"GGUF\x03\x00\x00", "cut short (7 bytes"),
    (b"GGUF" + struct.pack("<IQQ", 9, 1, 1), "GGUF version 9, which llama.cpp does not read"),
    (b"GGUF" + struct.pack("<IQQ", 3, 0, 2**40), "a damaged GGUF header (0 tensors"),
])
def test_a_file_that_is_no_gguf_is_one_line_before_work(tmp_path, content, said):
    (tmp_path / "model.gguf").write_bytes(content)
    with pytest.raises(RecipeError) as err:
        check_file(recipe(tmp_path, "model.gguf"))
    (line,) = err.value.problems
    assert ":7: variants.1.llamacpp.gguf: model.gguf: " in line and said in line, line


def test_the_sweep_refuses_it_with_exit_2_before_any_work(tmp_path):
    (tmp_path / "model.gguf").write_text("<html>Access denied</html>")
    code, out = quant("sweep", str(recipe(tmp_path, "model.gguf")), "--out", str(tmp_path / "run"),
                      "--cache-dir", str(tmp_path / "cache"), env={**os.environ, "HF_HUB_OFFLINE": "1"})
    assert code == 2 and "not a GGUF file" in out and "Traceback" not in out, out
    assert not (tmp_path / "run").exists() and not (tmp_path / "cache").exists()


def test_settings_of_a_python_the_recipe_names_are_not_checked_unless_trusted(tmp_path):
    write_tiny_gguf(tmp_path / "tiny.gguf")
    mark = tmp_path / "ran"
    python = tmp_path / "python"
    python.write_text(f"#!/bin/sh\ntouch {mark}\n")
    python.chmod(0o755)
    _, findings = check_file(recipe(tmp_path, "tiny.gguf", "{n_ctx: 512}", f", python: {python}"))
    assert not mark.exists()
    assert any("llama.cpp settings not checked: that would run llamacpp.python" in w for w in findings.warnings)


@pytest.mark.skipif(not HAS_LLAMACPP, reason="llama.cpp is not set up (make setup-llamacpp)")
def test_a_misspelled_or_refused_setting_is_one_line_before_work(tmp_path):
    write_tiny_gguf(tmp_path / "tiny.gguf")
    with pytest.raises(RecipeError) as err:
        check_file(recipe(tmp_path, "tiny.gguf", "{n_ctxx: 2048, n_threads: many}"))
    lines = err.value.problems
    assert len(lines) == 2, lines
    assert "variants.1.llamacpp.args.n_ctxx: llama.cpp's server has no setting 'n_ctxx' (did you mean n_ctx?)" \
        in lines[0] or "did you mean n_ctx?" in " ".join(lines)
    assert any("variants.1.llamacpp.args.n_threads: llama.cpp refuses 'many'" in line for line in lines)
    _, findings = check_file(recipe(tmp_path, "tiny.gguf", "{n_ctx: 1024}"))
    assert findings.errors == []
