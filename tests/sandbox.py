"""Run a command under the kernel-side restrictions a systemd unit file asks for, without
systemd (the test machine has no systemd as PID 1).

    python -m tests.sandbox UNIT_FILE -- COMMAND ARGS...

Read from the unit, so the test and conf/imapserver.service cannot drift:

* ``SystemCallFilter=`` (allow lists and ``~`` deny lists of names and ``@groups``, expanded
  with ``systemd-analyze syscall-filter``) and ``SystemCallArchitectures=native``: one seccomp
  filter; a system call outside it kills the process (stricter than the unit's
  ``SystemCallErrorNumber=EPERM``, so a call the server needs cannot go unnoticed);
* ``MemoryDenyWriteExecute=yes``: systemd 252's own seccomp rules (mmap of memory both writable
  and executable, mprotect/pkey_mprotect adding PROT_EXEC, shmat with SHM_EXEC fail EPERM);
* ``RestrictAddressFamilies=``: socket() of any other family fails EAFNOSUPPORT, as systemd
  does it;
* ``NoNewPrivileges=yes`` (libseccomp sets it before loading).

``CapabilityBoundingSet=`` and the user are applied by ``setpriv`` in front of this (see
tests/test_deploy_unit.py).  Mount namespaces (``ProtectSystem``, ``PrivateTmp``) are not
reproduced: they limit which paths are writable, which the server's own tests cover (it writes
only its data directory and temporary files).
"""

from __future__ import annotations

import ctypes
import errno
import os
import socket
import subprocess
import sys

SCMP_ACT_KILL_PROCESS = 0x80000000
SCMP_ACT_ALLOW = 0x7FFF0000
SCMP_CMP_EQ = 4
SCMP_CMP_MASKED_EQ = 7
PROT_WRITE, PROT_EXEC = 0x2, 0x4
SHM_EXEC = 0o100000


def scmp_act_errno(code: int) -> int:
    return 0x00050000 | (code & 0xFFFF)


class ArgCmp(ctypes.Structure):
    """libseccomp's ``struct scmp_arg_cmp``."""

    _fields_ = [("arg", ctypes.c_uint), ("op", ctypes.c_int),
                ("datum_a", ctypes.c_uint64), ("datum_b", ctypes.c_uint64)]


def unit_settings(path: str) -> dict[str, list[str]]:
    """``[Service]`` settings of a unit file, each key with its values in order."""
    found: dict[str, list[str]] = {}
    section = None
    with open(path) as f:
        for line in f:
            line = line.strip()
            if not line or line.startswith(("#", ";")):
                continue
            if line.startswith("["):
                section = line
            elif section == "[Service]" and "=" in line:
                key, _, value = line.partition("=")
                found.setdefault(key.strip(), []).append(value.strip())
    return found


def syscall_groups() -> dict[str, list[str]]:
    """``@group`` -> member names (names and nested groups), from systemd itself."""
    text = subprocess.run(["systemd-analyze", "syscall-filter"], capture_output=True, text=True,
                          check=True).stdout
    groups: dict[str, list[str]] = {}
    current = None
    for line in text.splitlines():
        if line.startswith("@"):
            current = groups.setdefault(line.strip(), [])
        elif current is not None and line.strip() and not line.strip().startswith("#"):
            current.append(line.strip())
        elif not line.strip():
            current = None
    return groups


def expand(names: list[str], groups: dict[str, list[str]]) -> set[str]:
    out: set[str] = set()
    for name in names:
        if name.startswith("@"):
            out |= expand(groups[name], groups)
        else:
            out.add(name)
    return out


def allowed_syscalls(filters: list[str]) -> set[str]:
    """The system calls a unit's ``SystemCallFilter=`` lines allow, as systemd combines them:
    the first allow list sets the base, each further one adds, each ``~`` list removes."""
    groups = syscall_groups()
    allowed: set[str] = set()
    for value in filters:
        deny = value.startswith("~")
        names = expand(value.lstrip("~").split(), groups)
        if deny:
            allowed -= names
        else:
            allowed |= names
    # systemd always allows the calls it needs to start the service ("@default" is in every
    # allow list it builds).
    return allowed | expand(["@default"], groups)


def _lib() -> ctypes.CDLL:
    lib = ctypes.CDLL("libseccomp.so.2", use_errno=True)
    lib.seccomp_init.restype = ctypes.c_void_p
    lib.seccomp_init.argtypes = [ctypes.c_uint32]
    lib.seccomp_syscall_resolve_name.argtypes = [ctypes.c_char_p]
    lib.seccomp_rule_add_array.argtypes = [ctypes.c_void_p, ctypes.c_uint32, ctypes.c_int,
                                           ctypes.c_uint, ctypes.POINTER(ArgCmp)]
    lib.seccomp_load.argtypes = [ctypes.c_void_p]
    lib.seccomp_release.argtypes = [ctypes.c_void_p]
    return lib


def _rule(lib, ctx, action: int, name: str, *cmps: ArgCmp) -> None:
    nr = lib.seccomp_syscall_resolve_name(name.encode())
    if nr < 0:
        return  # not a system call of this architecture (mmap2, socketcall, ...)
    array = (ArgCmp * len(cmps))(*cmps) if cmps else None
    rc = lib.seccomp_rule_add_array(ctx, action, nr, len(cmps), array)
    if rc < 0:
        raise OSError(-rc, f"seccomp_rule_add {name}: {os.strerror(-rc)}")


def _load(lib, ctx) -> None:
    rc = lib.seccomp_load(ctx)
    lib.seccomp_release(ctx)
    if rc < 0:
        raise OSError(-rc, f"seccomp_load: {os.strerror(-rc)}")


def apply(unit: str) -> None:
    settings = unit_settings(unit)
    lib = _lib()
    # Each filter is its own BPF program, as systemd loads them; the kernel applies the most
    # restrictive answer of all.  The system call filter goes last, as in systemd: seccomp()
    # itself is not in @system-service.
    if settings.get("MemoryDenyWriteExecute", ["no"])[-1] == "yes":
        ctx = lib.seccomp_init(SCMP_ACT_ALLOW)
        eperm = scmp_act_errno(errno.EPERM)
        wx = PROT_WRITE | PROT_EXEC
        for name in ("mmap", "mmap2"):
            _rule(lib, ctx, eperm, name, ArgCmp(2, SCMP_CMP_MASKED_EQ, wx, wx))
        for name in ("mprotect", "pkey_mprotect"):
            _rule(lib, ctx, eperm, name, ArgCmp(2, SCMP_CMP_MASKED_EQ, PROT_EXEC, PROT_EXEC))
        _rule(lib, ctx, eperm, "shmat", ArgCmp(2, SCMP_CMP_MASKED_EQ, SHM_EXEC, SHM_EXEC))
        _load(lib, ctx)
    if settings.get("RestrictAddressFamilies"):
        names = " ".join(settings["RestrictAddressFamilies"]).split()
        keep = {getattr(socket, name) for name in names}
        ctx = lib.seccomp_init(SCMP_ACT_ALLOW)
        refuse = scmp_act_errno(errno.EAFNOSUPPORT)
        for family in range(0, 64):
            if family not in keep:
                _rule(lib, ctx, refuse, "socket", ArgCmp(0, SCMP_CMP_EQ, family, 0))
        _load(lib, ctx)
    if settings.get("SystemCallFilter"):
        ctx = lib.seccomp_init(SCMP_ACT_KILL_PROCESS)  # native architecture only
        for name in sorted(allowed_syscalls(settings["SystemCallFilter"])):
            _rule(lib, ctx, SCMP_ACT_ALLOW, name)
        _load(lib, ctx)


def main(argv: list[str]) -> None:
    if "--" not in argv or argv.index("--") != 1:
        raise SystemExit("usage: python -m tests.sandbox UNIT_FILE -- COMMAND ARGS...")
    split = argv.index("--")
    unit, command = argv[0], argv[split + 1:]
    apply(unit)
    os.execvp(command[0], command)


if __name__ == "__main__":
    main(sys.argv[1:])
