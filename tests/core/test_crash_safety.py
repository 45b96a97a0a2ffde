"""Nothing outlives a killed sweep, nothing it writes is ever half-written, SIGTERM stops it like Ctrl-C.

Fast: stand-in processes, no engine (tests/quant/test_kill_resume.py kills a real sweep)."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import textwrap
import threading
import time
from pathlib import Path

import psutil
import pytest

from perf.engines.process import run_tied_streaming, spawn, stop_group
from core.store import Cache, atomic_path, is_leftover, owner_tag, remove_leftovers, write_json
from tests.helpers import REPO


# A "server": maps a shared-memory segment as vLLM's engine does, starts a child that leaves for a session
# of its own (escaping the process group) and one that stays; prints all their pids and the segment.
SERVER = textwrap.dedent("""
    import subprocess, sys, time
    from multiprocessing import resource_tracker, shared_memory
    segment = shared_memory.SharedMemory(create=True, size=1 << 20)
    resource_tracker.unregister(segment._name, "shared_memory")   # as good as SIGKILLed: nobody tidies up
    sleep = [sys.executable, "-c", "import time; time.sleep(300)"]
    kids = [subprocess.Popen(sleep, start_new_session=True), subprocess.Popen(sleep)]
    print(" ".join(str(p) for p in [*(k.pid for k in kids), "/dev/shm/" + segment.name]), flush=True)
    time.sleep(300)
""")


def _owner(body: str, tmp_path: Path) -> subprocess.Popen:
    """A process (the sweep) that starts SERVER through `body`, prints the server tree, and sleeps."""
    script = tmp_path / "owner.py"
    script.write_text(textwrap.dedent(f"""
        import subprocess, sys, threading, time
        sys.path.insert(0, {str(REPO)!r})
        from pathlib import Path
        from perf.engines.process import command_pid, run_tied_streaming, spawn
        SERVER = {SERVER!r}
        log = {str(tmp_path / "server.log")!r}
    """) + textwrap.dedent(body))
    return subprocess.Popen([sys.executable, str(script)], stdout=subprocess.PIPE, text=True)


def _alive(pids: list[int]) -> list[int]:
    alive = []
    for pid in pids:
        try:
            if psutil.Process(pid).status() != psutil.STATUS_ZOMBIE:
                alive.append(pid)
        except psutil.NoSuchProcess:
            pass
    return alive


def _wait_gone(pids: list[int], timeout: float = 20) -> list[int]:
    deadline = time.monotonic() + timeout
    while (alive := _alive(pids)) and time.monotonic() < deadline:
        time.sleep(0.05)
    return alive


def _server_line(log: Path, timeout: float = 30) -> list[str]:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        lines = log.read_text().split("\n") if log.exists() else []
        if len(lines) > 1:
            return lines[0].split()
        time.sleep(0.05)
    raise AssertionError("the stand-in server did not start")


@pytest.mark.parametrize("from_thread", [False, True])
def test_server_tree_and_its_shared_memory_die_with_a_sigkilled_owner(tmp_path, from_thread):
    """The launcher's watchdog polls its parent *process*: spawning from a thread that ends is fine."""
    owner = _owner(f"""
        from pathlib import Path
        def start():
            global proc
            proc = spawn([sys.executable, "-c", SERVER], {{}}, Path(log))
        if {from_thread}:
            t = threading.Thread(target=start); t.start(); t.join()   # the spawning thread is gone
        else:
            start()
        while command_pid(proc) is None:
            time.sleep(0.01)
        print(proc.pid, command_pid(proc), flush=True)
        time.sleep(300)
    """, tmp_path)
    lifeline, server = map(int, owner.stdout.readline().split())
    *kids, segment = _server_line(tmp_path / "server.log")
    tree = [lifeline, server, *map(int, kids)]
    time.sleep(1.5)   # the thread case: a PDEATHSIG tied to the spawning thread would have fired by now
    assert _alive(tree) == tree, "a process of the tree died while its owner lives"
    assert os.path.exists(segment)
    owner.kill()
    owner.wait()
    assert _wait_gone(tree) == [], "the server tree outlived its SIGKILLed owner"
    assert not os.path.exists(segment), "the dead server's shared-memory segment was left behind"


def test_a_stopped_server_gets_sigterm_first_and_every_escaped_child_goes_too(tmp_path):
    script = ("import signal, subprocess, sys, time\n"
              "signal.signal(signal.SIGTERM, lambda *a: (print('graceful', flush=True), sys.exit(3)))\n"
              "kid = subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(300)'], start_new_session=True)\n"
              "print(kid.pid, flush=True)\n"
              "time.sleep(300)\n")
    proc = spawn([sys.executable, "-c", script], {}, tmp_path / "log", grace_s=5)
    kid = int(_server_line(tmp_path / "log")[0])
    stop_group(proc, grace_s=5)
    assert proc.returncode == 3 and "graceful" in (tmp_path / "log").read_text()
    assert _alive([kid]) == []


def test_the_lifeline_exits_as_its_command_did(tmp_path):
    proc = spawn([sys.executable, "-c", "import os; os.kill(os.getpid(), 9)"], {}, tmp_path / "log")
    assert proc.wait(timeout=20) == -signal.SIGKILL
    log = tmp_path / "tied.log"
    assert run_tied_streaming([sys.executable, "-c", "import sys; print('out'); sys.exit(4)"], log).returncode == 4
    assert run_tied_streaming([sys.executable, "-c", "print('out')"], log).stdout == "out\n"


def test_a_tied_command_and_its_children_die_with_a_sigkilled_owner(tmp_path):
    """The quantizer runs this way (streamed to quantize.log): `python -m quantize` and the worker it starts."""
    owner = _owner('run_tied_streaming([sys.executable, "-c", SERVER + "\\n"], Path(log + ".q"), grace_s=5)\n',
                   tmp_path)
    # Killed only once the server has printed: a kill before would break the pipe it prints to, and a server
    # dying of that (unregistered) within a second of mapping its segment is not the case tested here.
    *kids, segment = _server_line(tmp_path / "server.log.q")
    tree = psutil.Process(owner.pid).children(recursive=True)
    assert {*map(int, kids)} < {p.pid for p in tree}
    assert segment in {m.path for p in tree for m in p.memory_maps()}
    owner.kill()
    owner.wait()
    assert _wait_gone([p.pid for p in tree]) == []
    assert not os.path.exists(segment), "the killed tree's shared-memory segment was left behind"


def _cmdline(process: psutil.Process) -> list[str]:
    """Its command line; none for one that is exiting (the fallback's layer probes come and go)."""
    try:
        return process.cmdline()
    except (psutil.ZombieProcess, psutil.NoSuchProcess):
        return []


def test_unisolated_generated_code_dies_with_a_sigkilled_sweep(tmp_path):
    """Without bubblewrap (whose --die-with-parent covers it) a sleeping program would outlive the sweep."""
    owner = subprocess.Popen([sys.executable, "-c", textwrap.dedent(f"""
        import sys
        sys.path.insert(0, {str(REPO)!r})
        import dataclasses
        from evals import execute, fallback, sandbox
        caps = dataclasses.replace(sandbox.capabilities(), bwrap=None, layers=fallback.available_layers())
        execute.capabilities = lambda: caps
        with sandbox.permit_unisolated(True):   # the opted-in fallback, with this machine's layers
            execute.run_program("import time\\ntime.sleep(300)\\n", execute.Limits(timeout_s=300))
    """)])
    try:
        deadline = time.monotonic() + 30
        while not (programs := [p for p in psutil.Process(owner.pid).children(recursive=True)
                                if any(arg.endswith("program.py") for arg in _cmdline(p))]):
            assert time.monotonic() < deadline
            time.sleep(0.05)
    finally:
        owner.kill()   # the SIGKILLed sweep (also when the program was not found: nothing may outlive the test)
        owner.wait()
    assert _wait_gone([p.pid for p in programs]) == []


# --- the run directory and the cache --------------------------------------------------------------------

def _dead_owner_tag() -> str:
    """The tag of a process that existed and is gone."""
    p = subprocess.Popen([sys.executable, "-c", "import sys; sys.path.insert(0, sys.argv[1]);"
                          "from core.store import owner_tag; print(owner_tag())", str(REPO)],
                         stdout=subprocess.PIPE, text=True)
    tag = p.communicate()[0].strip()
    return tag


def test_leftovers_of_a_dead_run_are_removed_and_live_ones_kept(tmp_path):
    cache = Cache(tmp_path / "cache")
    mine = cache.staging("evals", "k1")
    dead = tmp_path / "cache" / "evals" / f".k2.{_dead_owner_tag()}.abcd1234"
    dead.mkdir()
    (dead / "result.json").write_text("{")   # half-written, and no `done`
    run = tmp_path / "run" / "variants" / "v" / "evals"
    run.mkdir(parents=True)
    dead_tmp = run / f".demo_math.jsonl.{_dead_owner_tag()}.abcd1234.tmp"
    dead_tmp.write_text("half")
    foreign = run / f".x.{'0' * 8}-1-1.abcd1234.tmp"    # another host's: not ours to judge
    foreign.write_text("")
    assert is_leftover(dead.name) and not is_leftover(mine.name) and not cache.has("evals", "k2")
    assert cache.remove_leftovers() == [dead] and mine.is_dir()
    assert remove_leftovers(tmp_path / "run", recursive=True) == [dead_tmp] and foreign.exists()


class _Unwritable:
    def __str__(self) -> str:
        raise RuntimeError("fails half-way")


def test_writes_are_atomic_and_leave_no_temporary_files(tmp_path):
    write_json(tmp_path / "a.json", {"x": 1})
    with pytest.raises(RuntimeError):
        with atomic_path(tmp_path / "a.json") as tmp:
            tmp.write_text('{"x": ')
            raise RuntimeError("killed half-way")
    assert json.loads((tmp_path / "a.json").read_text()) == {"x": 1}
    assert sorted(p.name for p in tmp_path.iterdir()) == ["a.json"]
    cache = Cache(tmp_path / "cache")
    with pytest.raises(RuntimeError):
        cache.save_json("evals", "k", {"x": 1}, extra={"samples.jsonl": [{"y": _Unwritable()}]})
    assert not cache.has("evals", "k") and list((tmp_path / "cache" / "evals").iterdir()) == []
    assert owner_tag() in cache.staging("evals", "k").name


def test_a_stage_moved_in_place_but_not_marked_done_is_redone(tmp_path):
    cache = Cache(tmp_path)
    (tmp_path / "evals" / "k").mkdir(parents=True)   # a kill between the move and the `done` marker
    (tmp_path / "evals" / "k" / "result.json").write_text('{"old": 1}')
    assert not cache.has("evals", "k")
    cache.save_json("evals", "k", {"new": 1})
    assert cache.has("evals", "k") and cache.load_json("evals", "k") == {"new": 1}


# --- SIGTERM is Ctrl-C ---------------------------------------------------------------------------------

def test_sigterm_stops_the_sweep_like_ctrl_c(tmp_path):
    """The engine never gets ready; SIGTERM to the sweep stops it (exit 143) and leaves nothing running."""
    engine = tmp_path / "fake_python"
    engine.write_text(f"#!{sys.executable}\n" + textwrap.dedent(f"""
        import os, sys, time
        if "-c" in sys.argv:   # the version probe
            sys.exit(0)
        open({str(tmp_path / "engine.pid")!r}, "w").write(str(os.getpid()))
        time.sleep(300)
    """))
    engine.chmod(0o755)
    recipe = tmp_path / "r.yaml"
    recipe.write_text(f"name: term\nmodel: demo\nengine: {{python: {str(engine)!r}}}\n"
                      "variants: [{name: bf16, baseline: true}]\ntasks: [{name: demo_math, limit: 2}]\n")
    sweep = subprocess.Popen([sys.executable, "-m", "quant.cli", "sweep", str(recipe), "--out", str(tmp_path / "run")],
                             cwd=REPO, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True,
                             env={**os.environ, "PYTHONPATH": str(REPO)})
    deadline = time.monotonic() + 120
    while not (tmp_path / "engine.pid").exists():
        assert sweep.poll() is None and time.monotonic() < deadline, sweep.stderr.read()
        time.sleep(0.05)
    time.sleep(0.2)
    sweep.send_signal(signal.SIGTERM)
    assert sweep.wait(timeout=60) == 143
    assert "terminated: finished stages are cached" in sweep.stderr.read()
    assert _alive([int((tmp_path / "engine.pid").read_text())]) == []
