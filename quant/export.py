"""`quant export RUN:VARIANT DIR`: the variant as a self-contained folder to hand to whoever serves it: the
checkpoint's files copied (no link into any cache), quant_manifest.json, the run's recipe (quant_recipe.yaml) and
a model card (README.md, reports/model_card.py). The folder is built under a temporary name beside DIR and
renamed into place at the end: a disk that fills, a kill or a crash mid-export leaves no DIR that looks complete
(only a hidden, owner-tagged staging directory, removed by the next export into the same parent)."""

from __future__ import annotations

import errno
import os
import shutil
import tempfile
from dataclasses import dataclass
from pathlib import Path

import yaml

from core import exit_codes
from core.hub import is_hub_id
from core.results import Results
from core.store import owner_tag, remove_leftovers, write_json, write_text
from reports.gate import GateInputError, load_side
from reports.model_card import CardFolder, folder_serve_command, render_card
from reports.model_card_gate import card_verdict, gate_command

CARD, MANIFEST, RECIPE = "README.md", "quant_manifest.json", "quant_recipe.yaml"
RECIPE_OPENING = "# the recipe of run "    # how an export's recipe file opens: what marks a folder as an export
WEIGHTS = {".safetensors", ".bin", ".gguf", ".pt", ".pth"}
OWN_FILES = {CARD, MANIFEST}            # the checkpoint's own copies are replaced by the export's
DISK_FULL = (errno.ENOSPC, errno.EDQUOT)
copy_file = shutil.copyfile             # follows links: what is copied is the file, never a link into a cache


class ExportError(Exception):
    """One line for the user, and the exit code: 2 bad input, 1 the disk filled up (nothing left behind)."""

    def __init__(self, message: str, exit_code: int = exit_codes.BAD_INPUT) -> None:
        super().__init__(message)
        self.exit_code = exit_code


@dataclass
class Exported:
    folder: Path
    variant: str
    files: list[str]
    outcome: str | None          # the gate's verdict on it; None for the baseline or where it could not decide
    undeployable: str | None
    serve: str                   # the command that serves the folder, from the directory that holds it


@dataclass
class Target:
    results: Results
    run_dir: Path
    name: str


def locate(spec: str) -> Target:
    """RUN:VARIANT -> the run's typed results, its directory and the variant; ExportError for anything else."""
    try:
        data, variant = load_side(spec)
    except GateInputError as exc:
        raise ExportError(str(exc)) from None
    if data.get("_run_dir") is None:
        raise ExportError(f"{spec}: an lm-eval output directory has no checkpoints; export a `quant sweep` run")
    results = Results.of({k: v for k, v in data.items() if not k.startswith("_")})
    names = ", ".join(results.variants)
    if variant is None:
        raise ExportError(f"{spec}: name the variant to export as RUN:VARIANT (one of {names})")
    if variant not in results.variants:
        raise ExportError(f"{data['_path']}: no variant {variant!r} (have {names})")
    return Target(results, Path(data["_run_dir"]), variant)


def undeployable(target: Target) -> str | None:
    record = target.results.variants[target.name]
    if record.ok:
        return None
    return f"variant {target.name} is recorded {record.status} ({record.reason or 'no reason recorded'})"


def hub_model_id(results: Results) -> str | None:
    """The run's model as a hub repo id, where it is one (not the demo model, a local directory or a GGUF file)."""
    model = str(results.model or "")
    return model if is_hub_id(model) and not Path(model).exists() else None


def hub_weights(target: Target) -> str | None:
    """The hub id where the variant's weights are the run's hub model itself (the unquantized baseline)."""
    original = (target.results.variants[target.name].manifest or {}).get("source") == "original model"
    return hub_model_id(target.results) if original else None


def _base_license(results: Results) -> str | None:
    """The base model's license: its card's metadata where it has one; the demo model is quant-suite's own."""
    if results.model == "demo":
        return "apache-2.0"
    base = results.baseline_record.checkpoint
    card = Path(base) / "README.md" if base else None
    try:
        text = card.read_text() if card and card.is_file() else ""
        meta = yaml.safe_load(text.split("---", 2)[1]) if text.startswith("---") else None
    except (OSError, yaml.YAMLError, IndexError, UnicodeDecodeError):
        return None
    return str(meta["license"]) if isinstance(meta, dict) and meta.get("license") else None


def _checkpoint_files(target: Target) -> tuple[Path | None, list[str]]:
    record = target.results.variants[target.name]
    if not record.checkpoint:
        return None, []
    source = Path(record.checkpoint)
    if not source.is_dir():
        raise ExportError(f"{source}: the checkpoint of {target.name} is not there (the stage cache was removed, or "
                          f"the run was made on another machine); re-run `quant sweep` on the run's recipe here to "
                          f"rebuild it, then export")
    if not (source / "config.json").is_file() or not any(p.suffix in WEIGHTS for p in source.iterdir()):
        raise ExportError(f"{source}: the checkpoint recorded for {target.name} is not a model folder (no "
                          "config.json and weights); export only copies a checkpoint")
    return source, [name for name in _regular_files(source) if name not in OWN_FILES]


def _regular_files(source: Path) -> list[str]:
    """The checkpoint's regular files (relative names); ExportError for a symbolic link that leads outside it or
    anything that is neither a file nor a folder."""
    root, files = source.resolve(), []
    for path in sorted(source.rglob("*")):
        name = path.relative_to(source).as_posix()
        real = path.resolve()
        if root not in real.parents:
            raise ExportError(f"{path}: a symbolic link leading outside the checkpoint ({real}); nothing exported")
        if real.is_file():
            files.append(name)
        elif not real.is_dir():
            raise ExportError(f"{path}: not a regular file; nothing exported")
    return files


def _is_export(folder: Path) -> bool:
    """A folder an earlier `quant export` wrote: its recipe file opens with the line export writes."""
    try:
        return (folder / MANIFEST).is_file() and (folder / RECIPE).read_text()[:200].startswith(RECIPE_OPENING)
    except (OSError, UnicodeDecodeError):
        return False


def _caches(target: Target) -> set[Path]:
    """The stage caches the run's checkpoints are in, and the sweep's default one beside the run."""
    caches = {target.run_dir.parent / ".cache"}
    for record in target.results.variants.values():
        path = Path(record.checkpoint) if record.checkpoint else None
        if path is not None and len(path.parents) > 2 and path.parents[1].name == "checkpoints":
            caches.add(path.parents[2])
    return caches


def check_destination(dest: Path, force: bool, target: Target | None = None) -> None:
    """Nothing the user did not ask for is replaced: DEST may not be, hold or lie inside the run or a stage cache,
    be or hold the current directory or a version-controlled tree; --force replaces only an earlier export."""
    if dest.is_file() or dest.is_symlink():
        raise ExportError(f"{dest}: a file is there, not a folder; remove it or export elsewhere")
    real = dest.resolve()
    guarded = [("the run", target.run_dir, True)] if target else []
    guarded += [("the stage cache", cache, True) for cache in (_caches(target) if target else ())]
    guarded += [("the current directory", Path.cwd(), False)]
    for what, path, nor_inside in guarded:
        path = path.resolve()
        if real == path or real in path.parents or (nor_inside and path in real.parents):
            raise ExportError(f"{dest}: {'is' if real == path else 'holds' if real in path.parents else 'is inside'} "
                              f"{what} ({path}); export elsewhere")
    if any((real / vcs).exists() for vcs in (".git", ".hg", ".svn")):
        raise ExportError(f"{dest}: the root of a version-controlled tree; export elsewhere")
    if dest.is_dir() and any(dest.iterdir()):
        if not force:
            raise ExportError(f"{dest}: not empty; --force replaces it with the export")
        if not _is_export(dest):
            raise ExportError(f"{dest}: not an earlier export (no {RECIPE} written by `quant export`); --force "
                              "replaces only an export: remove it yourself or export elsewhere")


def _build(target: Target, build: Path, folder: CardFolder, files: list[str], source: Path | None,
           policy: str | None, allow_undeployable: bool) -> str | None:
    for name in files:
        (build / name).parent.mkdir(parents=True, exist_ok=True)
        copy_file(source / name, build / name)
    results, record = target.results, target.results.variants[target.name]
    write_json(build / MANIFEST, record.manifest or {})
    write_text(build / RECIPE, f"{RECIPE_OPENING}{results.recipe_name} (recipe hash {results.recipe_hash}), "
                               f"as the run recorded it; {target.name} is one of its variants\n"
                               + yaml.safe_dump(results.recipe, sort_keys=False))
    verdict = None
    if target.name != results.baseline:
        verdict = card_verdict(target.run_dir, results.baseline, target.name, policy, allow_undeployable)
        folder.gate_command = gate_command(target.run_dir, results.baseline, target.name, policy, allow_undeployable)
    write_text(build / CARD, render_card(results, target.name, folder, verdict, target.run_dir))
    return verdict.outcome if verdict else None


def _finish(root: Path) -> None:
    """Modes as the user's umask gives new files (the staging names are private), everything on disk."""
    mask = os.umask(0)
    os.umask(mask)
    for path in [*sorted(root.rglob("*")), root]:
        os.chmod(path, (0o777 if path.is_dir() else 0o666) & ~mask)
        fd = os.open(path, os.O_RDONLY | (os.O_DIRECTORY if path.is_dir() else 0))
        try:
            os.fsync(fd)
        finally:
            os.close(fd)


def _put_in_place(build: Path, dest: Path) -> None:
    """The finished folder onto DEST in one rename; a folder there before (--force) is moved aside first."""
    old = None
    if dest.exists():
        old = Path(tempfile.mkdtemp(dir=dest.parent, prefix=f".{dest.name}.{owner_tag()}."))
        os.replace(dest, old / "replaced")
    os.replace(build, dest)
    if old is not None:
        shutil.rmtree(old, ignore_errors=True)


def export(spec: str, dest: Path, suite_version: str, *, force: bool = False, allow_undeployable: bool = False,
           policy: str | None = None, push_repo: str | None = None) -> Exported:
    """Export variant RUN:VARIANT of a run into dest (see the module docstring). ExportError for what stops it."""
    target = locate(spec)
    why = undeployable(target)
    if why and not allow_undeployable:
        raise ExportError(f"{target.run_dir}: {why}: it cannot be deployed (--allow-undeployable exports it anyway, "
                          "and its card says so first)")
    dest = Path(dest).absolute()
    check_destination(dest, force, target)
    hub_model = hub_weights(target)
    source, files = (None, []) if hub_model else _checkpoint_files(target)
    folder = CardFolder(name=dest.name, suite_version=suite_version, files=files, hub_model=hub_model,
                        base_model=hub_model_id(target.results),
                        hub_revision=target.results.recipe.get("revision") if hub_model else None,
                        license=_base_license(target.results), push_repo=push_repo, undeployable=why)
    dest.parent.mkdir(parents=True, exist_ok=True)
    remove_leftovers(dest.parent)   # staging directories of exports that were killed
    build = Path(tempfile.mkdtemp(dir=dest.parent, prefix=f".{dest.name}.{owner_tag()}."))
    try:
        outcome = _build(target, build, folder, files, source, policy, allow_undeployable)
        _finish(build)
        _put_in_place(build, dest)
    except OSError as exc:
        shutil.rmtree(build, ignore_errors=True)
        if exc.errno in DISK_FULL:
            raise ExportError(f"{dest}: {exc.strerror} while exporting; nothing was left there (free space and "
                              "re-run)", exit_codes.FAILED) from None
        raise ExportError(f"{exc.filename or dest}: cannot write ({exc.strerror})", exit_codes.FAILED) from None
    except BaseException:
        shutil.rmtree(build, ignore_errors=True)
        raise
    return Exported(dest, target.name, files, outcome, why,
                    folder_serve_command(target.results, target.name, folder))



def summary(done: Exported) -> list[str]:
    """What `quant export` prints: where the folder is, what it holds, the verdict its card states."""
    size = sum(p.stat().st_size for p in done.folder.rglob("*") if p.is_file())
    verdict = {None: "", "pass": "; gate: PASS", "regression": "; gate: REGRESSION (the card says so)",
               "inconclusive": "; gate: INCONCLUSIVE (the card says so)"}[done.outcome]
    lines = [f"exported {done.variant} to {done.folder} ({len(done.files)} checkpoint files, {size / 1e6:.1f} MB in "
             f"all){verdict}"]
    if done.undeployable:
        lines.append(f"warning: {done.undeployable}: its card says it is not deployable")
    lines.append(f"model card: {done.folder / CARD}")
    lines.append(f"serve (from {done.folder.parent}): {done.serve}")
    return lines
