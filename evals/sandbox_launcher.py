"""Runs between fork and exec of every generated program (evals/execute.py starts it as `python -I -S -c
<this text> CONFIG COMMAND...`): joins the run's cgroups, sets the rlimits, applies the fallback layers it is
asked for (evals/fallback.py), then execs COMMAND. Not a preexec_fn: programs run from many threads at once,
and preexec_fn is not safe in a threaded process. A layer asked for and not applied is an error, never skipped:
which layers are asked for was settled by a probe, and describe() has already claimed them."""

import ctypes
import json
import os
import resource
import sys

CLONE_NEWNS, CLONE_NEWUSER, CLONE_NEWNET = 0x00020000, 0x10000000, 0x40000000
MS_RDONLY, MS_NOSUID, MS_NODEV, MS_REMOUNT, MS_BIND, MS_REC, MS_PRIVATE = 1, 2, 4, 32, 4096, 16384, 1 << 18
PR_SET_PDEATHSIG, PR_SET_NO_NEW_PRIVS = 1, 38
NOBODY = 65534

libc = ctypes.CDLL(None, use_errno=True)


def checked(what, result):
    if result != 0:
        errno = ctypes.get_errno()
        raise OSError(errno, f"sandbox layer: {what}: {os.strerror(errno)}")


def mount(source, target, fstype, flags, data=None):
    encode = lambda s: None if s is None else s.encode()  # noqa: E731
    checked(f"mount {target}", libc.mount(encode(source), encode(target), encode(fstype), ctypes.c_ulong(flags),
                                          encode(data)))


def own_namespaces(layers):
    """New namespaces for the layers asked for: network (only `lo`, and it is down), mount (for `hidden` and
    `tmp`; nothing mounted in it reaches the host's). A normal user needs a user namespace for them, in which
    it stays itself (the same uid and gid, nothing more)."""
    flags = (CLONE_NEWNET if "network" in layers else 0) | (CLONE_NEWNS if {"hidden", "tmp"} & set(layers) else 0)
    what = "+".join(name for name, flag in (("network", CLONE_NEWNET), ("mount", CLONE_NEWNS)) if flags & flag)
    if not flags:
        return
    if os.geteuid() == 0:
        checked(f"unshare {what}", libc.unshare(flags))
    else:
        uid, gid = os.geteuid(), os.getegid()
        checked(f"unshare user+{what}", libc.unshare(CLONE_NEWUSER | flags))
        for name, text in (("setgroups", "deny"), ("uid_map", f"{uid} {uid} 1"), ("gid_map", f"{gid} {gid} 1")):
            with open(f"/proc/self/{name}", "w") as f:
                f.write(text)
    if flags & CLONE_NEWNS:
        mount(None, "/", None, MS_REC | MS_PRIVATE)


def cover(target, keep, options):
    """A fresh tmpfs on `target`, with the directories kept beneath it bound back at their own paths."""
    fds = [os.open(path, os.O_PATH | os.O_DIRECTORY) for path in keep]  # reachable once covered
    mount("tmpfs", target, "tmpfs", MS_NOSUID | MS_NODEV, options)
    for path, fd in zip(keep, fds):
        os.makedirs(path, exist_ok=True)
        mount(f"/proc/self/fd/{fd}", path, None, MS_BIND | MS_REC)
        os.close(fd)


def hide(plan):
    """Each hidden directory an empty read-only tmpfs, except for the directories kept beneath it (the
    interpreter's), bound back at their own paths."""
    for hidden, keep in plan.items():
        cover(hidden, keep, "mode=0755,size=64k")
        mount(None, hidden, None, MS_REMOUNT | MS_RDONLY | MS_NOSUID | MS_NODEV, "mode=0755,size=64k")


def private_tmp(plan, size):
    """/tmp, /var/tmp, /dev/shm, /run/lock: each an empty world-writable (sticky) tmpfs of `size` bytes, the
    work dir bound back where it lies beneath one."""
    for shared, keep in plan.items():
        cover(shared, keep, f"mode=1777,size={size}")


def become_nobody():
    checked("no_new_privs", libc.prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0))
    os.setgroups([])
    os.setgid(NOBODY)
    os.setuid(NOBODY)
    if os.getuid() != NOBODY or os.geteuid() != NOBODY:
        raise OSError("sandbox layer: still root after setuid")


def main():
    config = json.loads(sys.argv[1])
    for path in config["cgroup_procs"]:
        try:
            with open(path, "w") as f:
                f.write(str(os.getpid()))
        except OSError:
            pass  # the rlimits still apply
    for name, value in config["rlimits"].items():
        resource.setrlimit(getattr(resource, name), (value, value))
    layers = config["layers"]
    own_namespaces(layers)
    if "hidden" in layers:
        hide(config["hide"])
    if "tmp" in layers:
        private_tmp(config["tmp"], config["tmp_bytes"])
    if "nobody" in layers:
        become_nobody()
    # Dies with a SIGKILLed sweep. Set last: a change of user clears it; exec keeps it.
    checked("parent-death signal", libc.prctl(PR_SET_PDEATHSIG, 9, 0, 0, 0))
    if os.getppid() != config["parent"]:  # the sweep died before the signal was set: nothing would kill us
        os._exit(1)
    os.execv(sys.argv[2], sys.argv[2:])


if __name__ == "__main__":  # `python -c <this text>` runs it as __main__
    main()
