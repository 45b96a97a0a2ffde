from pathlib import Path

import pytest

from tests.perf.fake_vllm import FakeVLLM


@pytest.fixture
def fake():
    srv = FakeVLLM()
    yield srv
    srv.close()


@pytest.fixture(scope="session")
def tokenizer_dir(tmp_path_factory) -> Path:
    from demo.tokenizer import train_tokenizer
    out = tmp_path_factory.mktemp("tok")
    train_tokenizer([f"item {i}: the quick brown fox {i * 7} jumps" for i in range(200)], vocab_size=300).save_pretrained(out)
    return out
