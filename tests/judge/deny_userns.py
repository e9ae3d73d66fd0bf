"""Runs a command where user namespaces are denied, as an unprivileged user (issue 23's refusal).

Enters a user namespace of its own (its uid and gid mapped to themselves), sets that namespace's
user.max_user_namespaces to 0 (the sysctl an administrator turns them off with; it binds this
namespace and everything below it), and execs the command, which loses the namespace's
capabilities on exec like any non-root program.
    python3 deny_userns.py COMMAND ARGS...
"""
import ctypes
import os
import sys

CLONE_NEWUSER = 0x10000000

libc = ctypes.CDLL(None, use_errno=True)
uid, gid = os.getuid(), os.getgid()
if libc.unshare(CLONE_NEWUSER) != 0:
    sys.exit("deny_userns: unshare(CLONE_NEWUSER): " + os.strerror(ctypes.get_errno()))
with open("/proc/self/setgroups", "w") as f:
    f.write("deny")
with open("/proc/self/uid_map", "w") as f:
    f.write(f"{uid} {uid} 1\n")
with open("/proc/self/gid_map", "w") as f:
    f.write(f"{gid} {gid} 1\n")
with open("/proc/sys/user/max_user_namespaces", "w") as f:
    f.write("0\n")
os.execvp(sys.argv[1], sys.argv[1:])
