"""The trusted side of a sandboxed run: runs a program's solution and then its tests, and proves it got to the end.

evals/execute.py starts `python -I -B -c <this file's text> VERDICT_FD SOLUTION TESTS PRELUDE PLAN` with the
run's token as the only thing on stdin. Before any untrusted code runs, this reads the token into a local of
`main` and puts /dev/null on stdin. Only after the tests returned normally does it write the token to
VERDICT_FD (a pipe the host reads) and leave with os._exit(0): no early exit, exception, signal or printed
text can produce the token, and it is in no file, argument or environment variable the program could read.

What keeps the program from reaching the token in this process's memory (see the threat model in
evals/execute.py):
- the program runs in a second thread, so no frame of `main` is on its stack, and it cannot install signal
  handlers (they would be handed `main`'s frame);
- an audit hook, which Python code cannot remove, refuses the known routes to frames and to raw memory:
  sys._getframe (as ValueError, which the standard library's callers expect; namedtuple, enum and typing
  may still read their caller's module name), tb_frame/gi_frame/cr_frame/
  ag_frame, sys._current_frames, tracing and profiling, gc's object scans, ctypes, and opening a file
  named `mem` (/proc/self/mem); it also refuses other audit hooks;
- the process is made non-dumpable, so a child process cannot read its memory either (short of
  CAP_SYS_PTRACE, which the sandbox drops);
- everything this file calls after the program started was bound before it started.

What keeps the program from changing what the tests compute:
- the tests run in a namespace of their own (PLAN, from evals/scoring_names.py): the prelude's names (the
  task's own text, run before the program: HumanEval's prompt with its helpers and imports), the builtins as
  they were before the program ran, standard-library modules imported before it ran, and of the program only
  its entry points. A program's own `abs`, `round`, `math` or prompt helper never reaches the tests;
- an entry point reaches the tests wrapped: each result must be a plain value (int, float, complex, str,
  bytes, bool, None, and lists, tuples, sets and dicts of them, of exactly these types, not subclasses),
  else the call fails; so no result compares equal to anything, and `==` is the interpreter's own;
- the modules the tests use (those they import, those the prelude binds, builtins) are put back as they
  were (attributes, class, entry in sys.modules) after the program ran and after every call of an entry
  point, and no thread of the program may still run then. Not put back: objects inside modules (a class's
  methods, a module-level list), and code the program leaves to run later in objects the tests hold
  (finalisers of objects it put into their arguments).
- the price: code that needs frames fails while scoring (traceback.format_exc(), inspect.stack(), a
  debugger); an entry point that returns anything else than a plain value (a generator, a namedtuple, a
  Counter, an instance of its own class) fails; logging, warnings, namedtuple, enum, typing, doctest and
  pickle work.
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
        if event == "sys.addaudithook":  # a hook of the program's would run whenever the tests exec or import;
            raise RuntimeError("no audit hooks while scoring")  # a RuntimeError: silently not added
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


PLAIN_SCALARS = (int, float, complex, str, bytes, bool, type(None))
PLAIN_CONTAINERS = (list, tuple, set, frozenset)


def _plain_values():
    """plain(value, what): `value` as a plain value, or a TypeError naming `what` where it cannot be one.

    A plain value is of a builtin scalar type exactly (int, float, complex, str, bytes, bool, None), or a
    list, tuple, set, frozenset or dict (exactly) of plain values, keys too. Comparing plain values runs only
    the interpreter's own code. An instance of a subclass of these (a namedtuple, a Counter, an IntEnum, a
    str whose __eq__ says yes) becomes the plain value its data holds, read by the base type's own C code
    (int.__int__, list.__iter__, dict.items ...), so what it claims about itself counts for nothing.
    Nothing of the program runs: type() cannot be spoofed, and exact builtins and the base types' slots
    iterate and copy in C."""
    identity, kind_of, new_set, new_list, new_tuple, new_frozenset, new_dict = id, type, set, list, tuple, \
        frozenset, dict
    is_subclass, failure, not_plain = issubclass, (TypeError, RecursionError, MemoryError), TypeError
    type_name = vars(type)["__name__"].__get__
    scalars = frozenset(identity(kind) for kind in PLAIN_SCALARS)
    sequences = frozenset(identity(kind) for kind in PLAIN_CONTAINERS)
    mapping, keys, values, items = identity(dict), dict.keys, dict.values, dict.items
    # a subclass of each base -> the plain value of its data (bool and None have no subclasses)
    scalar_of = ((int, int.__int__), (float, float.__float__), (complex, complex.__complex__),
                 (str, str.__str__), (bytes, bytes.__bytes__))
    list_items, tuple_items, set_items, frozenset_items = list.__iter__, tuple.__iter__, set.__iter__, \
        frozenset.__iter__

    def exact(value) -> bool:
        pending, seen = new_list([value]), new_set()
        while pending:
            item = pending.pop()
            kind = identity(kind_of(item))
            if kind in scalars:
                continue
            if kind not in sequences and kind != mapping:
                return False
            if identity(item) not in seen:
                seen.add(identity(item))
                if kind == mapping:
                    pending.extend(keys(item))
                    pending.extend(values(item))
                else:
                    pending.extend(item)
        return True

    class NotPlain(Exception):
        pass

    def converted(value):
        kind = kind_of(value)
        if identity(kind) in scalars:
            return value
        for base, data in scalar_of:
            if is_subclass(kind, base):
                return data(value)
        if is_subclass(kind, dict):
            return new_dict([(converted(k), converted(v)) for k, v in items(value)])
        if is_subclass(kind, list):
            return [converted(v) for v in list_items(value)]
        if is_subclass(kind, tuple):
            return new_tuple([converted(v) for v in tuple_items(value)])
        if is_subclass(kind, frozenset):
            return new_frozenset([converted(v) for v in frozenset_items(value)])
        if is_subclass(kind, set):
            return new_set([converted(v) for v in set_items(value)])
        raise NotPlain

    def plain(value, what: str):
        if exact(value):
            return value
        try:
            return converted(value)
        except (NotPlain, *failure):
            pass
        raise not_plain(f"{what} a value of type {type_name(kind_of(value))}, not a plain value (int, float, "
                        "complex, str, bytes, bool, None, or a list, tuple, set or dict of them)")
    return plain


def _module_guard(modules: dict):
    """(keep, restore): keep(module) remembers a module's attributes, its class and its place in sys.modules;
    restore() puts back all kept modules as they were, running none of the program's code (what it replaced
    is held, not freed, so no finaliser of the program runs)."""
    kept, held = [], []
    name_of, kind_of, copy, items, identity = vars(type(sys))["__dict__"].__get__, type, dict, dict.items, id
    set_class, length, pair = object.__setattr__, len, zip

    def keep(module) -> None:
        namespace = name_of(module)
        if all(identity(namespace) != identity(k[1]) for k in kept):
            kept.append((module, namespace, kind_of(module), copy(namespace), namespace.get("__name__")))

    def unchanged(namespace: dict, saved: dict) -> bool:
        if length(namespace) != length(saved):
            return False
        for (key, value), (saved_key, saved_value) in pair(items(namespace), items(saved)):
            if key is not saved_key or value is not saved_value:
                return False
        return True

    def restore() -> None:
        for module, namespace, kind, saved, name in kept:
            if kind_of(module) is not kind:
                set_class(module, "__class__", kind)
            if name is not None and modules.get(name) is not module:
                modules[name] = module
            if not unchanged(namespace, saved):
                held.append(copy(namespace))
                namespace.clear()
                namespace.update(saved)
    return keep, restore


def _tests_namespace(spec: dict, prelude, pristine: dict, modules: dict):
    """Build the namespace the tests run in (see evals/scoring_names.py): the prelude's names, the standard-library
    modules they need, and a function that hands them the program's entry points once the program has run.
    Returns (namespace, hand_over, settle)."""
    from time import sleep
    plain, (keep, restore) = _plain_values(), _module_guard(modules)
    copy, kind_of, meta, run_code, is_callable, is_subclass = dict, type, type, exec, callable, issubclass
    count, tries, module_type = _thread._count, range(50), type(sys)
    stuck, missing = RuntimeError, NameError
    free, declared, classes = spec["free"], frozenset(spec["entry_points"]), frozenset(spec["classes"])
    namespace = {"__builtins__": copy(pristine), "__name__": "__main__"}
    run_code(prelude, namespace)
    imported = {}
    for name in spec["modules"]:
        try:
            __import__(name)
            imported[name] = modules[name]
        except Exception:  # noqa: BLE001 - the tests' own import reports it
            pass
    for value in [*imported.values(), *namespace.values(), builtins]:
        if isinstance(value, module_type):
            keep(value)
    baseline = count()  # this thread: the program's must have ended whenever the tests compute

    def settle() -> None:
        """Wait briefly for the program's threads to end (fail if one does not), then restore the modules."""
        for _ in tries:
            if count() <= baseline:
                break
            sleep(0.002)
        else:
            raise stuck("the program left a thread running while its tests run")
        restore()

    def checked(function, name: str):
        def candidate(*args, **kwargs):
            try:
                result = function(*args, **kwargs)
            finally:
                settle()
            return plain(result, f"{name} returned")
        candidate.__name__ = candidate.__qualname__ = name
        return candidate

    def hand_over(program: dict) -> None:
        for name in free:
            if name not in declared and (name in namespace or name in pristine):
                continue                      # the prelude's, or a builtin
            if name not in declared and name in imported:
                namespace[name] = imported[name]
            elif name in program:
                value = program[name]
                if name in classes and is_subclass(kind_of(value), meta):
                    namespace[name] = value
                elif is_callable(value):
                    namespace[name] = checked(value, name)
                else:
                    namespace[name] = plain(value, f"{name} is")
            elif name in declared:
                raise missing(f"the program defines no {name!r}")
    return namespace, hand_over, settle


def main(verdict_fd: int, solution_path: str, tests_path: str, prelude_path: str, spec_text: str) -> None:
    token = os.read(0, 64)
    null = os.open(os.devnull, os.O_RDONLY)
    os.dup2(null, 0)
    os.close(null)
    write, leave, report, run_code, copy = os.write, os._exit, _reporter(), exec, dict
    new_module, modules = type(sys), sys.modules
    try:
        compiled = []
        for path in (solution_path, tests_path, prelude_path):
            with open(path) as f:
                compiled.append(compile(f.read(), path, "exec", dont_inherit=True, optimize=0))
        solution, tests, prelude = compiled
        import json
        spec = json.loads(spec_text)
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
            tests_namespace, hand_over, settle = _tests_namespace(spec, prelude, pristine, modules)
            main_module = new_module("__main__")  # the solution's, as if it had been run as a script (pickle,
            modules["__main__"] = main_module     # doctest and multiprocessing look it up there)
            namespace = main_module.__dict__
            namespace.update(__file__=solution_path, __builtins__=builtins)
            run_code(solution, namespace)
            settle()
            hand_over(namespace)
            run_code(tests, tests_namespace)
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
    main(int(sys.argv[1]), *sys.argv[2:6])
