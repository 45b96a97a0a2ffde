"""Generated code is confined: every hostile program fails and leaves the host untouched; a pass proves the tests
ran to the end (every scoring cheat scores 0); without bubblewrap nothing runs unless the user opted in."""

import contextlib
import dataclasses
import os
import shutil
import subprocess
import tempfile
import uuid

import pytest

from evals import code_scoring, fallback, hostile, integrity, sandbox
from evals.execute import Limits, run_program
from evals.hostile import check, corpus
from evals.sandbox import IsolationRequired, capabilities, describe, permit_unisolated
from evals.validate import check_code_isolation
from quant.cli import main
from core.recipe import Task, load_recipe
from tests.evals.sandbox_modes import act_without_bubblewrap, fallback_here

BARE = sandbox.Capabilities(bwrap=None, cgroup_v2=None, cgroup_v1={})
# The hostile programs each fallback layer contains (evals/fallback.py).
CONTAINED_BY = {"network": ["socket_to_host", "network_interfaces"], "tmp": ["write_shared_tmp"],
                "nobody": ["write_outside", "delete_outside", "read_host_files", "spawn_shell"]}


@pytest.fixture
def no_bubblewrap(monkeypatch):
    act_without_bubblewrap(monkeypatch, fallback_here())


def test_the_sandbox_is_in_force_here():
    # make setup installs bubblewrap; without it the corpus cannot be contained and this says why.
    assert capabilities().isolated, describe()
    assert capabilities().process_cap, describe()


@pytest.fixture(scope="module")
def outcomes():
    return {o.name: o for o in check()}


@pytest.mark.parametrize("name", sorted(corpus("/v", "/v/f", 1)))
def test_hostile_program_is_contained_and_scored_as_failure(outcomes, name):
    o = outcomes[name]
    assert not o.result.passed, o.result
    assert not o.harm, o.harm


def test_expected_failure_modes(outcomes):
    assert outcomes["infinite_loop"].result.reason == "timeout"
    assert "MemoryError" in outcomes["memory_bomb"].result.reason
    assert "interfaces: ['lo']" in outcomes["network_interfaces"].result.reason
    assert "no secret in reach" in outcomes["read_secrets"].result.reason


def test_honest_programs_still_pass_and_can_use_their_work_dir():
    program = ("import json, math, subprocess\n"
               "open('scratch.json', 'w').write(json.dumps([math.factorial(5)]))\n"
               "assert json.load(open('scratch.json')) == [120]\n"
               "assert subprocess.run(['true']).returncode == 0\n")
    assert run_program(program).passed


def test_the_standard_library_still_works_without_frames():
    # namedtuple, typing, enum, logging and doctest ask for frames; they cope with the refusal.
    program = ('import collections, doctest, enum, logging, typing, warnings\n'
               'def double(x):\n    """\n    >>> double(2)\n    4\n    """\n    return 2 * x\n'
               'Point = collections.namedtuple("Point", "x y")\nT = typing.TypeVar("T")\n'
               'Color = enum.Enum("Color", "RED GREEN")\nlogging.warning("to stderr")\nwarnings.warn("too")\n'
               'assert doctest.testmod() == (0, 1) and Point(1, 2).y == 2\n'
               'import pickle\nassert pickle.loads(pickle.dumps(Point(3, 4))) == (3, 4)\n')
    assert run_program(program).passed


def test_limits_are_configurable():
    assert run_program("import time\ntime.sleep(2)", Limits(timeout_s=0.5)).reason == "timeout"
    assert not run_program("open('f', 'wb').write(b'x' * 65536)", Limits(file_bytes=16384)).passed


def test_without_bubblewrap_nothing_runs_unless_opted_in(no_bubblewrap):
    opt_in = "apt-get install bubblewrap.*--allow-unisolated-code.*allow_unisolated_code"
    with pytest.raises(IsolationRequired, match=opt_in):
        run_program("assert sum([1, 2]) == 3")
    with permit_unisolated(True):
        assert run_program("assert sum([1, 2]) == 3").passed
    assert "not run" in hostile._unsafe_here("kill_everything")


@pytest.fixture(scope="module")
def fallback_outcomes():
    with pytest.MonkeyPatch.context() as monkeypatch, permit_unisolated(True):
        act_without_bubblewrap(monkeypatch, fallback_here())
        return {o.name: o for o in check()}


@pytest.mark.parametrize("layer,name", [(layer, name) for layer, names in CONTAINED_BY.items() for name in names])
def test_the_fallback_layers_contain_what_they_claim(fallback_outcomes, layer, name):
    if layer not in fallback.available_layers():
        pytest.skip(f"the {layer} layer does not work on this machine: {fallback.describe_layers(())}")
    if layer == "nobody" and os.geteuid() != 0:
        pytest.skip("the nobody layer is for root; a normal user's own files stay reachable")
    o = fallback_outcomes[name]
    assert not o.result.passed and not o.harm, (o.result, o.harm)


def test_the_fallback_describes_only_the_layers_in_force():
    bare = describe(BARE)
    assert "NO bubblewrap isolation" in bare and "NO network namespace" in bare and "NO private /tmp" in bare
    assert "own network namespace" not in bare and "user nobody" not in bare
    here = describe(fallback_here())
    for layer, text in fallback.DESCRIPTIONS.items():
        assert (text in here) == (layer in fallback.available_layers()), here


@pytest.mark.parametrize("refused", ["network", "tmp"])
def test_a_layer_the_kernel_refuses_is_skipped_and_the_run_still_works(monkeypatch, refused):
    monkeypatch.setattr(fallback, "_works", lambda layers: refused not in layers)  # injected refusal
    fallback.available_layers.cache_clear()
    try:
        layers = fallback.available_layers()
        assert refused not in layers and layers
        assert fallback.DESCRIPTIONS[refused] not in describe(dataclasses.replace(BARE, layers=layers))
    finally:
        fallback.available_layers.cache_clear()
    act_without_bubblewrap(monkeypatch, BARE)  # no layer at all
    with permit_unisolated(True):
        assert run_program("import socket\nassert socket.if_nameindex()").passed


def test_a_layer_in_force_that_fails_at_run_time_fails_the_run_never_runs_without_it(monkeypatch):
    if "hidden" not in fallback.available_layers():
        pytest.skip(f"the hidden layer does not work on this machine: {describe(fallback_here())}")
    monkeypatch.setattr(fallback, "hide_plan", lambda work_dir: {"/nonexistent-quant-dir": []})  # injected
    act_without_bubblewrap(monkeypatch, fallback_here())
    with permit_unisolated(True):
        result = run_program("assert True")
    assert not result.passed and "sandbox layer: mount /nonexistent-quant-dir" in result.reason, result


def test_as_root_the_fallback_hides_home_and_runs_as_nobody(no_bubblewrap):
    if os.geteuid() != 0 or not {"hidden", "nobody"} <= set(fallback.available_layers()):
        pytest.skip(f"not root, or the layers do not work here: {describe()}")
    home = tempfile.mkdtemp(dir=os.path.expanduser("~"))  # a world-readable file in the user's home
    try:
        os.chmod(home, 0o755)
        with open(os.path.join(home, "notes.txt"), "w") as f:
            f.write("private")
        os.chmod(os.path.join(home, "notes.txt"), 0o644)
        program = ("import os\n"
                   f"assert not os.path.exists({home!r}), 'home visible'\n"
                   "assert (os.getuid(), os.getgid(), os.getgroups()) == (65534, 65534, [])\n")
        with permit_unisolated(True):
            assert run_program(program).passed
    finally:
        shutil.rmtree(home)


def test_the_opted_in_fallback_runs_in_a_private_home_and_tmpdir(no_bubblewrap):
    program = ("import os, tempfile\n"
               "work = os.getcwd()\n"
               "assert os.path.basename(os.path.dirname(work)).startswith('quant-exec-'), work\n"
               "assert os.environ['HOME'] == work and tempfile.gettempdir() == os.path.join(work, 'tmp')\n"
               "assert os.path.expanduser('~') == work\n"
               "open(os.path.join(tempfile.gettempdir(), 'scratch'), 'w').write('x')\n")
    with permit_unisolated(True):
        result = run_program(program)
    assert result.passed, result


def _mount_namespaces_work() -> bool:
    """Whether this kernel lets this user make a mount namespace (as root, or in a user namespace)."""
    argv = ["unshare", "--mount", "true"] if os.geteuid() == 0 else ["unshare", "--map-root-user", "--mount", "true"]
    return shutil.which("unshare") is not None and subprocess.run(argv, capture_output=True).returncode == 0


def test_the_opted_in_fallback_has_its_own_tmp_var_tmp_and_dev_shm(no_bubblewrap):
    if "tmp" not in fallback.available_layers() and not _mount_namespaces_work():
        pytest.skip(f"this kernel refuses mount namespaces here: {describe(fallback_here())}")
    marker = f"quant-marker-{uuid.uuid4().hex}"
    shared = [d for d in ("/tmp", "/var/tmp", "/dev/shm") if os.path.isdir(d)]
    program = (f"for d in {shared!r}:\n"
               f"    open(d + '/{marker}', 'w').write('x')\n"
               f"    assert open(d + '/{marker}').read() == 'x'\n")
    try:
        with permit_unisolated(True):
            result = run_program(program)
        reached = [d for d in shared if os.path.exists(os.path.join(d, marker))]
        assert result.passed and not reached, (result, reached)
        assert fallback.DESCRIPTIONS["tmp"] in describe(fallback_here())
    finally:
        for d in shared:
            with contextlib.suppress(FileNotFoundError):
                os.remove(os.path.join(d, marker))


@pytest.mark.parametrize("name", list(integrity.corpus()))
@pytest.mark.parametrize("isolated", [True, False], ids=["bubblewrap", "opted-in-fallback"])
def test_a_pass_proves_the_tests_ran_to_the_end(request, name, isolated):
    if not isolated:
        request.getfixturevalue("no_bubblewrap")
    if reason := integrity.not_run_here(name):
        pytest.skip(reason)
    program, should_pass = integrity.corpus()[name]
    with permit_unisolated(not isolated):
        result = code_scoring.run(program)
    assert result.passed == should_pass, result


def test_sandbox_check_refuses_without_isolation_in_one_line(no_bubblewrap, capsys):
    assert main(["sandbox-check"]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "--allow-unisolated-code" in err and "apt-get install bubblewrap" in err


def test_a_sweep_with_code_tasks_is_refused_before_any_work(no_bubblewrap, monkeypatch, tmp_path, capsys):
    import quant.sweep

    def no_work(*args, **kwargs):
        raise AssertionError("work started")
    monkeypatch.setattr(quant.sweep, "resolve_model", no_work)
    assert main(["sweep", "recipes/demo.yaml", "--out", str(tmp_path / "run")]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "task demo_code" in err and "allow_unisolated_code" in err
    assert not (tmp_path / "run").exists()
    # Opted in (flag or recipe field), or no code task: the check lets it through to the work.
    recipe = load_recipe("recipes/demo.yaml")
    field = tmp_path / "opted-in.yaml"
    field.write_text(open("recipes/demo.yaml").read() + "\nallow_unisolated_code: true\n")
    for allowed, opted in ((True, recipe), (False, load_recipe(str(field))),
                           (False, recipe.model_copy(update={"tasks": [Task(name="demo_math")], "gates": recipe.gates.model_copy(
                               update={"per_task": {}})}))):
        with pytest.raises(AssertionError, match="work started"):
            quant.sweep.run_sweep(opted, tmp_path / "run", allow_unisolated_code=allowed)


def test_lm_evals_own_code_tasks_need_the_opt_in_even_with_bubblewrap():
    # mbpp_plus is lm-eval's (unsafe_code, its executor); mbpp_instruct is ours (evals/tasks, our sandbox).
    with pytest.raises(IsolationRequired, match="mbpp_plus runs model-generated code through lm-eval's own"):
        check_code_isolation([Task(name="mbpp_plus")])
    with permit_unisolated(True):
        assert check_code_isolation([Task(name="mbpp_plus"), Task(name="mbpp_instruct"), Task(name="demo_math")]) \
            == {"mbpp_plus": "host", "mbpp_instruct": "sandbox"}


def test_no_cgroup_is_left_behind(monkeypatch):
    # Only the cgroups these runs made: other sandboxed runs on this machine may be under way.
    made, make = [], sandbox.CgroupLimit._make
    monkeypatch.setattr(sandbox.CgroupLimit, "_make", lambda self, path, settings: (made.append(path),
                                                                                    make(self, path, settings)))
    for source in (corpus("/v", "/v/f", 1)["fork_bomb"], "assert True"):
        run_program(source)
    caps = capabilities()
    assert made or not (caps.cgroup_v2 or caps.cgroup_v1)
    assert not [path for path in made if path.exists()]
