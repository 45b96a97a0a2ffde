"""python -m quantize --model DIR --variant-json JSON --calibration-json JSON --out DIR [--timeout S]

JSON arguments are inline JSON or paths to JSON files. The work runs in a child process (the same
command with --in-process) so that even a hard crash (segfault, OOM kill) ends with a non-zero exit and,
as the last line on stderr, `QUANTIZE-ERROR: <reason>`. On success the manifest is printed on stdout.
"""

from __future__ import annotations

import argparse
import json
import signal
import subprocess
import sys
import tempfile
import traceback
from pathlib import Path

from perf.engines.process import keep_low_priority_across_sessions
from quantize.child_process import ERROR_PREFIX, child_env


def _parser() -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(prog="python -m quantize", description="Quantize one variant of a model.")
    ap.add_argument("--model", type=Path, required=True)
    ap.add_argument("--variant-json", required=True)
    ap.add_argument("--calibration-json", default="{}")
    ap.add_argument("--out", type=Path, required=True)
    ap.add_argument("--backend", default=None)
    ap.add_argument("--dense", action="store_true",
                    help="write a fake-quantized dense 16-bit checkpoint (weight-only schemes an engine cannot serve)")
    ap.add_argument("--timeout", type=float, default=None, help="seconds before the child is killed")
    ap.add_argument("--in-process", action="store_true", help=argparse.SUPPRESS)
    ap.add_argument("--error-file", type=Path, default=None, help=argparse.SUPPRESS)
    return ap


def _load_json(text: str, what: str) -> dict:
    if not text.lstrip().startswith("{"):
        path = Path(text)
        if not path.is_file():
            raise ValueError(f"{what}: neither inline JSON nor an existing file: {text!r}")
        text = path.read_text()
    try:
        return json.loads(text)
    except json.JSONDecodeError as exc:
        raise ValueError(f"{what}: not valid JSON: {exc}") from None


def _one_line(exc: BaseException) -> str:
    text = f"{type(exc).__name__}: {exc}".replace("\r", " ").replace("\n", " | ")
    return text[:2000]


def _fail(reason: str) -> int:
    sys.stdout.flush()
    print(ERROR_PREFIX + reason, file=sys.stderr, flush=True)
    return 1


def _parse(args: argparse.Namespace):
    from pydantic import ValidationError

    from core.recipe import Calibration, Variant

    from quantize import schemes

    parsed = []
    for model, text, flag in ((Variant, args.variant_json, "--variant-json"),
                              (Calibration, args.calibration_json, "--calibration-json")):
        try:
            parsed.append(model.model_validate(_load_json(text, flag)))
        except ValidationError as err:
            e = err.errors()[0]
            field = ".".join(str(p) for p in e["loc"]) or "(top level)"
            raise ValueError(f"{flag}: {field}: {e['msg'].removeprefix('Value error, ')}") from None
    try:
        schemes.check(parsed[0])
    except ValueError as exc:
        raise ValueError(f"--variant-json: {exc}") from None
    return tuple(parsed)


def _work(args: argparse.Namespace) -> int:
    """The child: quantize in this process; the reason for a failure goes to --error-file."""
    try:
        from quantize import quantize_variant

        variant, calibration = _parse(args)
        manifest = quantize_variant(args.model, variant, calibration, args.out, backend=args.backend,
                                    dense=args.dense)
    except BaseException as exc:  # noqa: BLE001 - every failure must be reported, KeyboardInterrupt too
        traceback.print_exc()
        if args.error_file:
            args.error_file.write_text(_one_line(exc))
        return 1
    print(json.dumps(manifest, indent=2), flush=True)
    return 0


def _check_out(out: Path) -> None:
    """--out is replaced by the checkpoint: only an empty directory or one this command wrote before."""
    from quantize.manifest import MANIFEST_NAME

    if out.is_symlink() or (out.exists() and not out.is_dir()):
        raise ValueError(f"--out {out}: not a directory")
    if out.is_dir() and any(out.iterdir()) and not (out / MANIFEST_NAME).is_file():
        raise ValueError(f"--out {out}: not empty and not a checkpoint this command wrote (no {MANIFEST_NAME}); "
                         "give a new or empty directory")


def _supervise(args: argparse.Namespace, argv: list[str]) -> int:
    """The parent: validate the arguments, run the child, turn any way it can die into one reason line."""
    try:
        _parse(args)
        _check_out(args.out)
    except Exception as exc:  # noqa: BLE001
        return _fail(_one_line(exc))
    with tempfile.TemporaryDirectory(prefix="quantize-") as tmp:
        error_file = Path(tmp) / "error.txt"
        cmd = [sys.executable, "-m", "quantize", *argv, "--in-process", "--error-file", str(error_file)]
        child = subprocess.Popen(cmd, env=child_env())
        try:
            rc = child.wait(timeout=args.timeout)
        except subprocess.TimeoutExpired:
            child.kill()
            child.wait()
            return _fail(f"timed out after {args.timeout:g} s")
        except KeyboardInterrupt:
            child.send_signal(signal.SIGINT)
            child.wait()
            return _fail("interrupted")
        if rc == 0:
            return 0
        if error_file.is_file() and error_file.read_text().strip():
            return _fail(error_file.read_text().strip())
        if rc < 0:
            name = signal.Signals(-rc).name
            hint = " (out of memory?)" if -rc == signal.SIGKILL else ""
            return _fail(f"quantization process killed by {name}{hint}")
        return _fail(f"quantization process exited with status {rc}")


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    args = _parser().parse_args(argv)
    if args.in_process:
        return _work(args)
    keep_low_priority_across_sessions()   # built ahead at nice 19: yield to the served model (and its child with it)
    return _supervise(args, argv)


if __name__ == "__main__":
    sys.exit(main())
