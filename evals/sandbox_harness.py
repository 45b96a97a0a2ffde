"""The trusted side of a sandboxed run: runs a program's solution and then its tests, and proves it got to the end.

evals/execute.py starts `python -I -B -c <this file's text> VERDICT_FD SOLUTION TESTS` with the run's token as
the only thing on stdin. Before any untrusted code runs, this reads the token into a local of `main` and
puts /dev/null on stdin. Only after the tests returned normally does it write the token to VERDICT_FD (a
pipe the host reads) and leave with os._exit(0): no early exit, exception, signal or printed text can
produce the token, and it is in no file, argument or environment variable the program could read.

What keeps the program from reaching the token in this process's memory (see the threat model in
evals/execute.py):
- the program runs in a second thread, so no frame of `main` is on its stack, and it cannot install signal
  handlers (they would be handed `main`'s frame);
- an audit hook, which Python code cannot remove, refuses the known routes to frames and to raw memory:
  sys._getframe (as ValueError, which the standard library's callers expect; namedtuple, enum and typing
  may still read their caller's module name), tb_frame/gi_frame/cr_frame/
  ag_frame, sys._current_frames, tracing and profiling, gc's object scans, ctypes, and opening a file
  named `mem` (/proc/self/mem);
- the process is made non-dumpable, so a child process cannot read its memory either (short of
  CAP_SYS_PTRACE, which the sandbox drops);
- the tests run in their own namespace with a copy of the builtins taken before the program started, so
  replacing `abs` or `isinstance` in `builtins` does not change what the tests compute;
- the price: code that needs frames fails while scoring (traceback.format_exc(), inspect.stack(), a
  debugger); logging, warnings, namedtuple, enum, typing, doctest and pickle work.
- everything this file calls after the program started was bound before it started.
"""

import _thread
import builtins
import os
import sys

REFUSED_EVENTS = frozenset({"sys._current_frames", "sys._current_exceptions", "sys.settrace",
                            "sys.setprofile", "gc.get_objects", "gc.get_referrers", "gc.get_referents"})
FRAME_ATTRIBUTES = frozenset({"tb_frame", "gi_frame", "cr_frame", "ag_frame"})
REFUSED_MODULES = frozenset({"ctypes", "_ctypes", "_testcapi", "_testinternalcapi"})


def _module_name_readers() -> frozenset:
    """The standard library's callers of sys._getframe that only read the caller's module name (so that
    namedtuples, enums and TypeVars made by the solution are its own and pickle); the frame never leaves them."""
    import collections
    import enum
    import typing
    return frozenset(id(code) for code in (collections.namedtuple.__code__, typing._caller.__code__,
                                           enum.EnumType._create_.__code__))


def _install_guard() -> None:
    refused, frame_attributes, modules = REFUSED_EVENTS, FRAME_ATTRIBUTES, REFUSED_MODULES
    fspath, realpath, is_a, text, raw = os.fspath, os.path.realpath, isinstance, str, bytes
    first, last, identity = str.partition, str.rpartition, id
    readers, getframe, thread, looking = _module_name_readers(), sys._getframe, _thread.get_ident, set()

    def trusted_caller() -> bool:
        """Whether sys._getframe was called by one of `readers` (the guard's own call is let through)."""
        me = thread()
        if me in looking:
            return True
        looking.add(me)
        try:
            return identity(getframe(2).f_code) in readers  # 0: here, 1: guard, 2: the caller
        finally:
            looking.discard(me)

    def is_memory_file(path) -> bool:
        try:
            path = fspath(path)
        except TypeError:
            return False  # a file descriptor
        name = path.decode(errors="replace") if is_a(path, raw) else text.__str__(path)
        return last(name, "/")[2] == "mem" or last(realpath(name), "/")[2] == "mem"

    def guard(event, args) -> None:
        if event == "sys._getframe" and not trusted_caller():
            raise ValueError("sys._getframe is refused while scoring")
        if event in refused:
            raise ValueError(f"{event} is refused while scoring")
        if event == "object.__getattr__" and args[1] in frame_attributes:
            raise AttributeError(f"{args[1]} is refused while scoring")
        if event.startswith("ctypes.") or (event == "import" and first(text.__str__(args[0]), ".")[0] in modules):
            raise ImportError(f"{event} is refused while scoring")
        if event == "open" and is_memory_file(args[0]):
            raise PermissionError(f"opening {args[0]!r} is refused while scoring")

    sys.addaudithook(guard)
    for name in ("settrace", "setprofile"):  # clearing the (never set) hook stays allowed: doctest does it
        setattr(sys, name, lambda function, original=getattr(sys, name): function is None or original(function))


def _make_undumpable() -> None:
    try:
        import ctypes
        ctypes.CDLL(None).prctl(4, 0, 0, 0, 0)  # PR_SET_DUMPABLE = 4
    except (ImportError, OSError, AttributeError):
        pass
    for name in [m for m in sys.modules if m.partition(".")[0] in REFUSED_MODULES]:
        del sys.modules[name]


def _reporter():
    write, name_of, text = os.write, type, str

    def report(exc) -> None:
        """The exception's last line, as Python would print it (the host keeps it as the reason)."""
        try:
            message = text(exc)
        except BaseException:  # noqa: BLE001 - a program's __str__ can raise anything
            message = ""
        try:
            kind = name_of(exc)
            name = kind.__qualname__ if kind.__module__ in ("builtins", "__main__") else \
                f"{kind.__module__}.{kind.__qualname__}"
            line = name + (f": {message}" if message else "")
            write(2, ("\n" + line + "\n").encode(errors="replace"))
        except BaseException:  # noqa: BLE001
            pass
    return report


def main(verdict_fd: int, solution_path: str, tests_path: str) -> None:
    token = os.read(0, 64)
    null = os.open(os.devnull, os.O_RDONLY)
    os.dup2(null, 0)
    os.close(null)
    write, leave, report, run_code, copy = os.write, os._exit, _reporter(), exec, dict
    new_module, modules = type(sys), sys.modules
    try:
        with open(solution_path) as f:
            solution = compile(f.read(), solution_path, "exec", dont_inherit=True, optimize=0)
        with open(tests_path) as f:
            tests = compile(f.read(), tests_path, "exec", dont_inherit=True, optimize=0)
    except (SyntaxError, ValueError, OSError) as exc:
        report(exc)
        leave(1)
    pristine = copy(builtins.__dict__)
    sys.argv[:] = [solution_path]
    _make_undumpable()
    _install_guard()
    ran_to_the_end = []
    finished = _thread.allocate_lock()
    finished.acquire()

    def run(anything=BaseException) -> None:
        try:
            main_module = new_module("__main__")  # the solution's, as if it had been run as a script (pickle,
            modules["__main__"] = main_module     # doctest and multiprocessing look it up there)
            namespace = main_module.__dict__
            namespace.update(__file__=solution_path, __builtins__=builtins)
            run_code(solution, namespace)
            run_code(tests, {**namespace, "__builtins__": copy(pristine)})
            ran_to_the_end.append(True)
        except anything as exc:
            report(exc)
        finally:
            finished.release()

    _thread.start_new_thread(run, ())
    finished.acquire()
    if ran_to_the_end:
        write(verdict_fd, token)
        leave(0)
    leave(1)


if __name__ == "__main__":
    main(int(sys.argv[1]), sys.argv[2], sys.argv[3])
