from pathlib import Path

import pytest

from core.recipe import Calibration
from quantize.calibration import calibration_texts


@pytest.fixture(scope="session")   # one probe model for every quantize test
def probe_model(tmp_path_factory) -> Path:
    """A random Llama with the demo model's shapes (hidden 256, 4 layers, vocab 1024, bf16, untied head)."""
    import torch
    from transformers import LlamaForCausalLM

    from demo.tokenizer import train_tokenizer
    from demo.train import model_config

    out = tmp_path_factory.mktemp("probe")
    torch.manual_seed(0)
    model = LlamaForCausalLM(model_config(1024)).to(torch.bfloat16)
    model.save_pretrained(out)
    train_tokenizer(calibration_texts(Calibration(num_samples=30))).save_pretrained(out)
    return out
