"""The arguments of every `quant` command, under one convention:
- two sides are `--baseline` and `--candidate`, each a run directory, results.json, lm-eval output directory or
  fsspec URL, with `:VARIANT` (gate, diff, compare);
- a list flag takes several values and may be repeated (`--task a b` = `--task a --task b`);
- `--json FILE` writes JSON to FILE, `--json -` to stdout (the command's own text then goes to stderr);
- every flag has a help text, and every command's epilog lists its exit codes (core/exit_codes.py)."""

from __future__ import annotations

import argparse
from typing import Callable

from quant import logs

STDOUT = "-"
SEVERAL = {"action": "extend", "nargs": "+"}
JSON_HELP = "also write {what} as JSON to FILE ('-': stdout, the text then goes to stderr)"
UNISOLATED_HELP = ("where bubblewrap is missing, run model-generated code on this host anyway (rlimits and a "
                   "private temporary directory only; also lm-eval's own code tasks)")
TRUST_RECIPE_HELP = ("run what the recipe names for its engine (engine.python; engine.env entries other than "
                     "VLLM_*) to check its engine arguments, and allow trust_remote_code; by default nothing the "
                     "recipe names runs, and a warning says what was not checked")
SIDE_HELP = ("run dir, results.json, lm-eval output directory (--log_samples) or a run's fsspec URL, with "
             ":VARIANT")
BAD_INPUT = "  2    bad input: one line `{command} error: <what>` on stderr, before any work"
INTERRUPTS = "  130  interrupted (Ctrl-C), 143 terminated (SIGTERM)"

EXIT_CODES = {
    "sweep": ["  0    every variant ok, or declared unsupported by the engine (recorded, scored in-process, or "
              "not scored where\n       that would take hours on the CPU)",
              "  1    a variant failed: crash, quantization or measurement error (--allow-failed: 0); the "
              "baseline could not\n       be served, or no variant could (the gate and choose would have nothing "
              "to stand on); or the disk\n       filled up (one line; free space and re-run: finished stages are "
              "cached)",
              "  2    bad input, found before any work: every recipe problem listed, one line each; or the engine "
              "refused to\n       start with the recipe's engine arguments or environment (its message, one line)",
              "  130  interrupted (Ctrl-C), 143 terminated (SIGTERM): servers stopped, finished stages cached; "
              "re-run to continue"],
    "validate": ["  0    ok: the recipe, its files and the engine's flags pass every check (warnings aside)",
                 "  2    the problems, one line each, all at once"],
    "gate": ["  0    pass: every check of every candidate within its margin (as the rule decides)",
             "  1    regression: a measured drop beyond its margin (after the family-wise correction)",
             BAD_INPUT + " (a missing or damaged file, a variant that cannot be deployed, a policy that can "
             "never decide); a crash is never a regression",
             "  3    inconclusive: too few items to decide under the policy (the output says how many would)"],
    "diff": ["  0    listed (also when no item flipped)", BAD_INPUT],
    "choose": ["  0    a variant for every task", "  1    some task has no served variant meeting the "
               "constraints (the output names it and why each variant was rejected)", BAD_INPUT],
    "export": ["  0    exported (and pushed, with --push-to-hub; also when the hub already held the folder)",
               "  1    the disk filled up or a file could not be written (nothing is left at DIR), or the push "
               "failed (the folder is written)",
               BAD_INPUT + " (an unknown run or variant, a variant that failed or could not be served, a "
               "non-empty DIR without --force)"],
    "report": ["  0    reports written", BAD_INPUT + " (also --screenshot without a browser)"],
    "history": ["  0    listed", "  2    bad arguments"],
    "compare": ["  0    compared (also when the runs share no variant and task)", BAD_INPUT],
    "sensitivity": ["  0    ranked and written", BAD_INPUT, INTERRUPTS],
    "sandbox-check": ["  0    every hostile program contained and every integrity case scored right",
                      "  1    a program was not contained, or a cheat scored a pass",
                      BAD_INPUT + " (no isolation here and no --allow-unisolated-code)"],
    "demo": ["  0    built", "  2    bad arguments", INTERRUPTS],
    "doctor": ["  0    ready: every check ok", "  2    something is missing: each such line starts MISSING and ends "
               "with its fix; or a bad recipe\n       (one line per problem)"],
}


class QuantParser(argparse.ArgumentParser):
    """An argument a command does not know is refused with that command's usage, not the top level's."""

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.commands: dict[str, argparse.ArgumentParser] = {}   # filled once every command is added

    def parse_args(self, args=None, namespace=None):
        parsed, unknown = self.parse_known_args(args, namespace)
        if unknown:
            self.commands.get(getattr(parsed, "command", None), self).error(
                f"unrecognized arguments: {' '.join(unknown)}")
        return parsed


def fraction(text: str) -> float:
    """An accuracy drop on the command line: a fraction in [0, 1], as the recipe's gates take it."""
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a number") from None
    if not 0 <= value <= 1:
        raise argparse.ArgumentTypeError(f"{text} is not a fraction in [0, 1] (0.02: two points of accuracy)")
    return value


def _command(sub, name: str, help: str, handler: Callable) -> argparse.ArgumentParser:
    epilog = "exit codes:\n" + "\n".join(EXIT_CODES[name]).format(command=name)
    parser = sub.add_parser(name, help=help, description=help, epilog=epilog,
                            formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.set_defaults(func=handler)
    return parser


def build(handlers: dict[str, Callable], version: str) -> argparse.ArgumentParser:
    p = QuantParser(prog="quant", description="LLM quantization accuracy and performance regression suite")
    p.add_argument("--version", action="version", version=version, help="the installed quant-suite's version")
    sub = p.add_subparsers(dest="command", required=True)

    s = _command(sub, "sweep", "quantize, serve, evaluate and benchmark every variant of a recipe", handlers["sweep"])
    s.add_argument("recipe", help="the recipe YAML (recipes/demo.yaml runs offline on a CPU)")
    s.add_argument("--out", help="run directory, or an fsspec URL every node reaches (s3://, gs://, file:///...; "
                                 "default runs/<recipe name>)")
    s.add_argument("--cache-dir", help="stage cache, a directory or an fsspec URL (default: <out>/../.cache)")
    s.add_argument("--only", **SEVERAL, metavar="VARIANT", help="run only these variants")
    s.add_argument("--retry-failed", action="store_true",
                   help="retry variants the engine rejected before or is known to refuse")
    s.add_argument("--allow-failed", action="store_true", help="exit 0 even when a variant failed")
    s.add_argument("--strict", action="store_true", help=argparse.SUPPRESS)   # accepted; its behaviour is the default
    s.add_argument("--allow-unisolated-code", action="store_true", help=UNISOLATED_HELP)
    s.add_argument("--executor", choices=["local", "ray"],
                   help="where variants run: one after another here (local, the default) or fanned out on Ray")
    s.add_argument("--ray-address", metavar="ADDR",
                   help="a running Ray cluster (implies --executor ray; default: start a local one)")
    s.add_argument("--device", default="auto", help="torch device of the sweep's own model work: the sensitivity "
                   "ranking and the in-process scoring of variants the engine cannot serve (default auto: cuda "
                   "where a GPU is visible, else cpu)")
    s.add_argument("--allow-long-cpu-eval", action="store_true",
                   help="score a variant the engine cannot serve in-process on the CPU even where that is estimated "
                   "to take over 2 hours (default: recorded unsupported, not scored; the estimate is printed)")
    s.add_argument("--quiet", action="store_true", help="no progress lines, only the report and errors")
    s.add_argument("--replace-run", action="store_true",
                   help="let --out replace a run of another recipe there (default: refused, exit 2)")
    s.add_argument("--trust-remote-code", action="store_true",
                   help="let the recipe's engine arguments set trust_remote_code, which runs the model repository's "
                   "own code (default: refused, exit 2)")

    v = _command(sub, "validate", "every check a sweep makes before work, and no work", handlers["validate"])
    v.add_argument("recipe", help="the recipe YAML to check")
    v.add_argument("--allow-unisolated-code", action="store_true", help=UNISOLATED_HELP)
    v.add_argument("--trust-recipe", action="store_true", help=TRUST_RECIPE_HELP)

    g = _command(sub, "gate", "does a candidate lose more accuracy (or perf) than the policy allows?", handlers["gate"])
    g.add_argument("--baseline", required=True, help=f"{SIDE_HELP} (default: the run's baseline)")
    g.add_argument("--candidate", required=True, help=f"{SIDE_HELP} (without it, a run of several variants: "
                   "every variant but the baseline, gated as one family)")
    g.add_argument("--policy", help="YAML like a recipe's gates: section (default: the BASELINE run's recipe gates)")
    g.add_argument("--rule", choices=["point", "significant", "non-inferiority"],
                   help="override the policy's rule (default: the policy's rule)")
    g.add_argument("--junit", metavar="FILE", help="write JUnit XML to FILE ('-': stdout; one test case per task and metric)")
    g.add_argument("--markdown", metavar="FILE", help="write a Markdown summary to FILE ('-': stdout; a pull-request comment)")
    g.add_argument("--json", metavar="FILE", help=JSON_HELP.format(what="the checks"))
    g.add_argument("--allow-partial-overlap", action="store_true",
                   help="gate on the items both sides scored when their item sets differ (default: exit 2)")
    g.add_argument("--allow-undeployable", action="store_true",
                   help="gate the accuracy of a variant recorded failed or unsupported (default: exit 2, it cannot "
                   "be deployed); every line and report says so, and perf is not gated")
    g.add_argument("--perf-history", type=int, nargs="?", const=5, metavar="N",
                   help="also compare each candidate's headline output tok/s with the last N (default 5) earlier "
                   "runs in the history of the same checkpoint, engine configuration and hardware, any engine "
                   "version: a regression beyond the policy's max_throughput_drop (else 5%%) plus their spread")
    g.add_argument("--allow-foreign-load", action="store_true",
                   help="gate perf measured while other processes took CPU (default: such perf checks are "
                   "inconclusive); each check says so")

    f = _command(sub, "diff", "the items a candidate scored differently from the baseline, lost first: prompt, "
                 "both responses, the filtered answers, the metric, a diff of the responses", handlers["diff"])
    f.add_argument("--baseline", required=True, help=f"{SIDE_HELP} (default: the run's baseline)")
    f.add_argument("--candidate", required=True, help=f"{SIDE_HELP} where the run has several variants")
    f.add_argument("--task", **SEVERAL, help="only these tasks (default: every task of the baseline)")
    f.add_argument("--json", metavar="FILE", help=JSON_HELP.format(what="the flipped items"))

    c = _command(sub, "choose", "the variant to deploy per task, why, and its serve command", handlers["choose"])
    c.add_argument("run", help="run dir, results.json or a run's fsspec URL")
    c.add_argument("--task", **SEVERAL, help="only these tasks (default: every task in the run)")
    c.add_argument("--slo", **SEVERAL, default=[], metavar="METRIC=LIMIT",
                   help="latency bounds, e.g. ttft_p99=500ms tpot_p50=50ms e2e_p99=2s")
    c.add_argument("--objective", choices=["throughput", "latency", "memory", "cost"], default="throughput",
                   help="what the best variant within the limits maximizes or minimizes: output tokens/s, latency, "
                   "memory, or dollars per million output tokens (default throughput)")
    c.add_argument("--max-drop", type=fraction, help="allowed absolute accuracy drop (default: the run's recipe "
                   "gates, per task, as `quant gate` reads them)")
    c.add_argument("--exclude-blocked", action="store_true", help="never pick a variant the recipe's gate blocks "
                   "(a regression on any task, or one that cannot be deployed); by default such a variant may be "
                   "picked for another task and is named as blocked")
    c.add_argument("--json", metavar="FILE", help=JSON_HELP.format(what="the choices"))

    e = _command(sub, "export", "the variant as a self-contained folder with a model card, to serve or push to "
                 "the hub", handlers["export"])
    e.add_argument("run", metavar="RUN:VARIANT", help="a run dir (or results.json, or a run's fsspec URL) and the "
                   "variant to export")
    e.add_argument("dir", metavar="DIR", help="the folder to write (its parent is created; it must not exist or be "
                   "empty)")
    e.add_argument("--force", action="store_true", help="replace a DIR holding an earlier export")
    e.add_argument("--allow-undeployable", action="store_true", help="export a variant recorded failed or "
                   "unsupported (default: exit 2); its card says so on the first line after its metadata header")
    e.add_argument("--policy", metavar="FILE", help="the gate policy the card's verdict is decided under "
                   "(default: the run's recipe gates, as `quant gate` reads them)")
    e.add_argument("--push-to-hub", metavar="REPO", help="also upload the folder to this hub model repo "
                   "(HF_ENDPOINT, token from HF_TOKEN); created private unless --public")
    e.add_argument("--public", action="store_true", help="with --push-to-hub: create the repo public (an existing "
                   "repo keeps its visibility)")

    r = _command(sub, "report", "re-render reports from a run's results.json", handlers["report"])
    r.add_argument("run", help="run dir, results.json or a run's fsspec URL (rendered there)")
    r.add_argument("--screenshot", action="store_true", help="also render report.html in headless Chromium "
                   "to report.png")

    h = _command(sub, "history", "list recorded sweeps (SQLite; $QUANT_HISTORY_DB)", handlers["history"])
    h.add_argument("--limit", type=int, default=20, help="the newest N runs (default 20)")
    h.add_argument("--recipe", help="only runs of this recipe name")
    h.add_argument("--variant", help="this variant's headline perf over time (output tok/s, engine version, "
                   "load) instead of the runs")

    m = _command(sub, "compare", "per-task deltas, candidate minus baseline, with the paired interval where "
                 "per-item scores exist", handlers["compare"])
    m.add_argument("--baseline", help=f"a run id (or unique prefix) from history, or a {SIDE_HELP}")
    m.add_argument("--candidate", help=f"a run id (or unique prefix) from history, or a {SIDE_HELP}")
    m.add_argument("--json", metavar="FILE", help=JSON_HELP.format(what="the deltas"))
    m.add_argument("runs", nargs="*", help=argparse.SUPPRESS)   # `compare A B`: the two sides in order

    z = _command(sub, "sensitivity", "rank layers by the damage quantizing each alone does (KL, task loss)",
                 handlers["sensitivity"])
    z.add_argument("recipe", help="the recipe YAML whose model and variant to rank")
    z.add_argument("--variant", help="whose weight scheme to rank under (default: the first with one)")
    z.add_argument("--by", choices=["module", "layer"], help="unit: one Linear (q/k/v and gate/up fused, as vLLM "
                   "runs them) or a decoder layer (default module)")
    z.add_argument("--samples", type=int, help="calibration texts for the KL (default 32)")
    z.add_argument("--items", type=int, help="items per task for the loss change (default 32; 0: none)")
    z.add_argument("--device", default="cpu", help="torch device, e.g. cuda (default cpu)")
    z.add_argument("--out", help="report directory (default runs/<recipe>/sensitivity/<variant>)")
    z.add_argument("--cache-dir", help="stage cache (default runs/.cache, the sweep's)")

    x = _command(sub, "sandbox-check", "run the hostile-program and scoring-integrity corpora; exit 1 if any "
                 "program is not contained or a cheat scores a pass", handlers["sandbox-check"])
    x.add_argument("--allow-unisolated-code", action="store_true", help=UNISOLATED_HELP)

    o = _command(sub, "doctor", "is this machine ready to sweep (the recipe)? One line per check, each missing "
                 "thing with its fix", handlers["doctor"])
    o.add_argument("recipe", nargs="?", help="also check what this recipe needs: its model on the hub with the "
                   "token, bubblewrap for its code tasks, disk for its checkpoints; and the recipe itself, as "
                   "`quant validate` does")
    o.add_argument("--cache-dir", help="where the sweep will keep its stage cache (checkpoints; default "
                   "runs/.cache)")
    o.add_argument("--trust-recipe", action="store_true", help=TRUST_RECIPE_HELP)

    d = _command(sub, "demo", "rebuild the shipped demo assets", handlers["demo"])
    d.add_argument("what", choices=["build-tasks", "build-model", "build-outliers"],
                   help="the demo task sets, the demo model, or the demo model with outlier channels "
                        "(demo/model-outliers, from demo/model)")
    d.add_argument("--out", help="build-model, build-outliers: where to write the checkpoint (default "
                                 "demo/model, demo/model-outliers)")
    d.add_argument("--device", default="cpu", help="build-model on cpu (default; the shipped checkpoint) or cuda")
    for command in sub.choices.values():
        logs.add_arguments(command)
    p.commands = dict(sub.choices)
    return p
