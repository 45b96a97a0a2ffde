"""quantize's one interface for the sweep (quantize/child_process.py): the child's one-line reason comes back as
QuantizeError, and its whole output is in the log."""

import pytest

from core.recipe import Calibration, Variant
from quantize import QuantizeError, quantize_in_subprocess
from quantize.child_process import error_reason


def test_the_reason_is_the_last_error_line_else_the_last_line():
    assert error_reason("loading\nQUANTIZE-ERROR: first\nmore\nQUANTIZE-ERROR:  ValueError: bad group \n") == \
        "ValueError: bad group"
    assert error_reason("loading\nSegmentation fault\n\n") == "Segmentation fault"
    assert error_reason("x" * 1000) == "x" * 300
    assert error_reason("  \n") is None


def test_a_failed_quantization_raises_the_childs_reason_and_logs_its_output(tmp_path):
    log = tmp_path / "variants" / "x" / "quantize.log"
    with pytest.raises(QuantizeError, match=r"^FileNotFoundError: .*nope: not a model directory \(no config.json\)$"):
        quantize_in_subprocess(tmp_path / "nope", Variant(name="x", scheme="W4A16"), Calibration(), tmp_path / "x",
                               log_path=log)
    assert "QUANTIZE-ERROR: FileNotFoundError" in log.read_text() and not (tmp_path / "x").exists()
