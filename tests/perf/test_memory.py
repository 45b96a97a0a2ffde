"""perf/memory and the device-memory readings: KV bytes per token, what fits, nvidia-smi."""

from __future__ import annotations


def test_kv_cache_accounting_is_gqa_aware():
    from perf.memory import GIB, capacity, kv_bytes_per_token, kv_element_bytes

    demo = {"num_hidden_layers": 4, "num_attention_heads": 8, "num_key_value_heads": 8, "hidden_size": 256}
    assert kv_bytes_per_token(demo) == 2 * 4 * 8 * 32 * 2
    llama8b = {"num_hidden_layers": 32, "num_attention_heads": 32, "num_key_value_heads": 8, "hidden_size": 4096}
    assert kv_bytes_per_token(llama8b) == 131_072          # 128 KiB per token in bf16
    assert kv_bytes_per_token(llama8b, kv_element_bytes({"kv_cache_dtype": "fp8_e4m3"})) == 65_536
    cap = capacity(weights_bytes=16 * GIB, kv_per_token=131_072, seq_tokens=4096, accelerator_gib=80,
                   utilization=0.9)
    assert cap["max_kv_tokens"] == (int(80 * GIB * 0.9) - 16 * GIB) // 131_072
    assert cap["max_sequences"] == cap["max_kv_tokens"] // 4096
    assert capacity(100 * GIB, 131_072, 4096, 80, 0.9)["max_sequences"] == 0   # weights alone do not fit


def test_nvidia_smi_compute_apps_parse_to_bytes_per_pid():
    from perf.engines.process import parse_gpu_apps
    out = "4242, 70123\n4243, 512\n4242, 1\n[Not Supported], 3\n"
    assert parse_gpu_apps(out) == {4242: 70124 << 20, 4243: 512 << 20}
    assert parse_gpu_apps("") == {}


def test_gpu_memory_by_pid_else_by_growth(monkeypatch):
    """By PID where nvidia-smi lists the server's processes (seen on an H200: 4,614 MiB for a child holding
    4 GiB + its CUDA context); else, as in a container with its own PID namespace, the growth of used memory."""
    import os

    from perf.engines import process
    answers = {"--query-compute-apps=pid,used_memory": f"{os.getpid()}, 4614\n",
               "--query-gpu=uuid,memory.used": "GPU-a, 9000\n"}
    monkeypatch.setattr(process, "nvidia_smi", lambda query: answers[query])
    assert process.tree_gpu_bytes(os.getpid(), used_before=4 << 20) == 4614 << 20
    answers["--query-compute-apps=pid,used_memory"] = "1, 4614\n"          # PIDs that are not ours
    assert process.tree_gpu_bytes(os.getpid(), used_before=4 << 20) == (9000 << 20) - (4 << 20)
    assert process.tree_gpu_bytes(os.getpid()) is None                      # no reading from before the start
    monkeypatch.setattr(process, "nvidia_smi", lambda query: None)        # no nvidia-smi
    assert process.tree_gpu_bytes(os.getpid(), used_before=0) is None and process.gpu_used_bytes() is None
