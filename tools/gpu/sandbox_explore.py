#!/usr/bin/env python3
"""What does CUDA need inside the judge's sandbox on this node? Run as root.

Tries CUDA start-up (cuInit + a context + an allocation, through ctypes; a torch op for some
variants) in child processes that unshare net/mount/pid namespaces like dice's sandbox and then
change the mount table in different ways (read-only remounts of chosen mounts, device nodes
bind-mounted onto themselves, private tmpfs), as uid 60000 or as uid 0 without capabilities.
An LD_PRELOAD shim (built here with cc when available) logs every open() that failed.
Writes one JSON line per variant to $OUT/explore.jsonl and facts to $OUT/facts.txt.
  python3 tools/gpu/sandbox_explore.py            # all variants
  python3 tools/gpu/sandbox_explore.py --variant ro_keepdev   # one, output on stdout
"""
import ctypes
import json
import os
import stat
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor

MS_RDONLY, MS_NOSUID, MS_NODEV, MS_NOEXEC = 1, 2, 4, 8
MS_REMOUNT, MS_BIND, MS_REC, MS_PRIVATE = 32, 4096, 16384, 1 << 18
libc = ctypes.CDLL(None, use_errno=True)
libc.mount.argtypes = [ctypes.c_char_p, ctypes.c_char_p, ctypes.c_char_p, ctypes.c_ulong, ctypes.c_char_p]
OUT = os.environ.get("OUT", "/tmp/sbx_explore")
SHIM = "/tmp/sbx_openlog.so"
KERNEL_FS = {"proc", "sysfs", "devtmpfs", "devpts", "mqueue", "cgroup", "cgroup2", "securityfs", "debugfs",
             "tracefs", "fusectl", "configfs", "bpf", "pstore", "hugetlbfs", "binfmt_misc"}

CUDA_TEST = r'''
import ctypes, json, os, sys
r = {"uid": os.getuid()}
try:
    l = ctypes.CDLL("libcuda.so.1")
    r["cuInit"] = l.cuInit(0)
    d = ctypes.c_int()
    r["devget"] = l.cuDeviceGet(ctypes.byref(d), 0)
    c = ctypes.c_void_p()
    r["ctx"] = l.cuCtxCreate_v2(ctypes.byref(c), 0, d) if r["cuInit"] == 0 else -1
    p = ctypes.c_uint64()
    r["alloc"] = l.cuMemAlloc_v2(ctypes.byref(p), 1 << 20) if r.get("ctx") == 0 else -1
    r["cuda_ok"] = r["alloc"] == 0
except Exception as e:
    r["cuda_ok"] = False
    r["err"] = repr(e)[:300]
if sys.argv[1] == "torch":
    try:
        import torch
        x = torch.ones(1024, device="cuda")
        r["torch_ok"] = float(x.sum().item()) == 1024.0
    except BaseException as e:
        r["torch_ok"] = False
        r["torch_err"] = ("%s: %s" % (type(e).__name__, e))[:400]
# what can this process write?
w = {}
for d in ["/", "/tmp", "/var/tmp", "/dev/shm", "/dev", "/run", "/root", "/etc", "/proc/sys/kernel/hostname"]:
    try:
        if d.startswith("/proc"):
            open(d, "w").write(open(d).read())
        else:
            f = os.path.join(d, ".sbx_probe_%d" % os.getpid())
            open(f, "w").write("x")
            os.unlink(f)
        w[d] = "W"
    except OSError as e:
        w[d] = e.errno
r["writes"] = w
try:
    rc = ctypes.CDLL(None, use_errno=True).mount(None, b"/", None, 32 | 4096, None)  # remount / rw
    r["remount_rw"] = rc == 0 or ctypes.get_errno()
except Exception as e:
    r["remount_rw"] = repr(e)
print("RESULT " + json.dumps(r), flush=True)
'''

SHIM_C = r'''
#define _GNU_SOURCE
#include <dlfcn.h>
#include <errno.h>
#include <fcntl.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>
static void logf_(const char* fn, const char* p, int fl, int e) {
  char b[600]; int n = snprintf(b, sizeof b, "OPENFAIL %s %s flags=%o errno=%d\n", fn, p ? p : "(null)", fl, e);
  if (n > 0) write(2, b, n > (int)sizeof b ? (int)sizeof b : n);
}
#define WRAP(name, ...) 
int open(const char* p, int fl, ...) { va_list a; va_start(a, fl); int m = va_arg(a, int); va_end(a);
  static int (*r)(const char*, int, ...); if (!r) r = dlsym(RTLD_NEXT, "open");
  int fd = r(p, fl, m); if (fd < 0) { int e = errno; logf_("open", p, fl, e); errno = e; } return fd; }
int open64(const char* p, int fl, ...) { va_list a; va_start(a, fl); int m = va_arg(a, int); va_end(a);
  static int (*r)(const char*, int, ...); if (!r) r = dlsym(RTLD_NEXT, "open64");
  int fd = r(p, fl, m); if (fd < 0) { int e = errno; logf_("open64", p, fl, e); errno = e; } return fd; }
int openat(int d, const char* p, int fl, ...) { va_list a; va_start(a, fl); int m = va_arg(a, int); va_end(a);
  static int (*r)(int, const char*, int, ...); if (!r) r = dlsym(RTLD_NEXT, "openat");
  int fd = r(d, p, fl, m); if (fd < 0) { int e = errno; logf_("openat", p, fl, e); errno = e; } return fd; }
int openat64(int d, const char* p, int fl, ...) { va_list a; va_start(a, fl); int m = va_arg(a, int); va_end(a);
  static int (*r)(int, const char*, int, ...); if (!r) r = dlsym(RTLD_NEXT, "openat64");
  int fd = r(d, p, fl, m); if (fd < 0) { int e = errno; logf_("openat64", p, fl, e); errno = e; } return fd; }
'''


def mounts():
    res = []
    for line in open("/proc/self/mountinfo"):
        f = line.split()
        sep = f.index("-")
        res.append({"point": f[4], "opts": f[5], "fstype": f[sep + 1], "src": f[sep + 2], "root": f[3]})
    return res


def mnt(src, tgt, fstype, flags, data=None):
    enc = lambda s: s.encode() if isinstance(s, str) else s
    rc = libc.mount(enc(src), enc(tgt), enc(fstype), flags, enc(data))
    return 0 if rc == 0 else ctypes.get_errno()


def remount_ro(point):
    flags = MS_REMOUNT | MS_BIND | MS_RDONLY
    try:
        sv = os.statvfs(point)
        if sv.f_flag & os.ST_NOSUID: flags |= MS_NOSUID
        if sv.f_flag & os.ST_NODEV: flags |= MS_NODEV
        if sv.f_flag & os.ST_NOEXEC: flags |= MS_NOEXEC
    except OSError:
        pass
    return mnt(None, point, None, flags)


def char_devices(root="/dev", skip=("/dev/pts", "/dev/shm", "/dev/mqueue")):
    out = []
    for dp, dns, fns in os.walk(root):
        if any(dp == s or dp.startswith(s + "/") for s in skip):
            dns[:] = []
            continue
        for n in fns:
            p = os.path.join(dp, n)
            try:
                st = os.lstat(p)
            except OSError:
                continue
            if stat.S_ISCHR(st.st_mode):
                out.append(p)
    return out


def drop_caps():
    """Bounding set, ambient, capset(0), no_new_privs (uid 0 without capabilities)."""
    log = {}
    last = int(open("/proc/sys/kernel/cap_last_cap").read()) if os.path.exists("/proc/sys/kernel/cap_last_cap") else 40
    bad = 0
    for c in range(last + 1):
        if libc.prctl(24, c, 0, 0, 0) != 0:  # PR_CAPBSET_DROP
            bad += 1
    log["bset_drop_failed"] = bad
    log["ambient_clear"] = libc.prctl(47, 4, 0, 0, 0)  # PR_CAP_AMBIENT, CLEAR_ALL
    hdr = (ctypes.c_uint32 * 2)(0x20080522, 0)
    data = (ctypes.c_uint32 * 6)()
    log["capset"] = libc.syscall(126, hdr, data)  # SYS_capset (x86_64)
    log["nnp"] = libc.prctl(38, 1, 0, 0, 0)  # PR_SET_NO_NEW_PRIVS
    return log


def apply_variant(name, log):
    name = name.replace("+torch", "").replace("_root", "") if not name.startswith(("only_ro:", "ro_except:")) else name
    ms = mounts()
    pts = [m["point"] for m in ms]
    if name.startswith("plain"):
        return
    if name == "ro_all":
        for p in pts: log.setdefault("ro_fail", {})[p] = remount_ro(p) or None
        return
    if name == "ro_keepdev" or name == "ro_keepdev_shm":
        if name == "ro_keepdev_shm":
            log["shm_tmpfs"] = mnt("tmpfs", "/dev/shm", "tmpfs", MS_NOSUID | MS_NODEV, "size=64m,mode=1777")
        for p in pts:
            if p != "/dev": remount_ro(p)
        return
    if name.startswith("ro_devbind"):
        devs = char_devices()
        fails = {d: e for d in devs if (e := mnt(d, d, None, MS_BIND))}
        log["devbind_n"] = len(devs)
        log["devbind_fail"] = dict(list(fails.items())[:20])
        if name == "ro_devbind_shm":
            log["shm_tmpfs"] = mnt("tmpfs", "/dev/shm", "tmpfs", MS_NOSUID | MS_NODEV, "size=64m,mode=1777")
        now = mounts()
        for m in now:
            p = m["point"]
            if p in devs: continue  # the device nodes keep rw
            if name == "ro_devbind_shm" and p == "/dev/shm": continue
            e = remount_ro(p)
            if e: log.setdefault("ro_fail", {})[p] = e
        return
    if name == "ro_keepkernel":
        for m in ms:
            if m["fstype"] in KERNEL_FS or m["point"] == "/dev": continue
            remount_ro(m["point"])
        return
    if name.startswith("ro_except:"):
        keep = name.split(":", 1)[1]
        for p in pts:
            if p != "/dev" and p != keep: remount_ro(p)
        return
    if name.startswith("only_ro:"):
        p = name.split(":", 1)[1]
        log["rc"] = remount_ro(p)
        return
    if name == "tmpfs_writables":  # rw root; private tmpfs over the usual writable places
        for p in ["/tmp", "/var/tmp", "/dev/shm", "/run"]:
            if os.path.isdir(p): log.setdefault("tmpfs", {})[p] = mnt("tmpfs", p, "tmpfs", MS_NOSUID | MS_NODEV, "mode=1777")
        return
    raise SystemExit("unknown variant " + name)


def run_variant(name):
    """In this process: unshare, fork pid 1, mounts, uid, exec the CUDA test."""
    log = {"variant": name}
    if libc.unshare(0x40000000 | 0x00020000 | 0x20000000) != 0:  # CLONE_NEWNET | NEWNS | NEWPID
        raise SystemExit("unshare: errno %d" % ctypes.get_errno())
    log["private"] = mnt(None, "/", None, MS_REC | MS_PRIVATE)
    r, w = os.pipe()
    pid = os.fork()
    if pid == 0:
        os.close(r)
        try:
            log["procfs"] = mnt("proc", "/proc", "proc", MS_NOSUID | MS_NODEV | MS_NOEXEC)
            apply_variant(name, log)
            mode = "torch" if "+torch" in name else "cuda"
            root = name.replace("+torch", "").endswith("_root")
            if root:
                log["caps"] = drop_caps()
            else:
                os.setgroups([])
                os.setgid(60000)
                os.setuid(60000)
            os.write(w, json.dumps(log).encode())
            os.close(w)
            os.chdir("/")
            env = {k: v for k, v in os.environ.items() if k in ("PATH", "LD_LIBRARY_PATH", "CUDA_VISIBLE_DEVICES")}
            env["HOME"] = "/nonexistent"
            if os.path.exists(SHIM): env["LD_PRELOAD"] = SHIM
            os.execve(sys.executable, [sys.executable, "-c", CUDA_TEST, mode], env)
        except BaseException as e:
            os.write(w, json.dumps({"variant": name, "setup_error": repr(e)}).encode())
            os._exit(99)
    os.close(w)
    data = b""
    while True:
        b = os.read(r, 65536)
        if not b: break
        data += b
    _, st = os.waitpid(pid, 0)
    sys.stderr.write("SETUP " + data.decode(errors="replace") + "\n")
    os._exit(os.waitstatus_to_exitcode(st) & 0xff)


def main():
    os.makedirs(OUT, exist_ok=True)
    facts = open(os.path.join(OUT, "facts.txt"), "w")
    def sh(cmd):
        p = subprocess.run(cmd, shell=True, capture_output=True, text=True, timeout=120)
        facts.write("== %s (rc %d)\n%s%s\n" % (cmd, p.returncode, p.stdout[-20000:], p.stderr[-3000:]))
        facts.flush()
    sh("uname -a; id; cat /proc/self/status | grep -i cap; " + sys.executable + " -V")
    sh("cat /proc/self/mountinfo")
    sh("ls -la /dev /dev/shm /dev/nvidia-caps 2>&1 | head -120")
    sh("ls -la /tmp /var/tmp /run 2>&1 | head -60")
    t = time.time()
    sh("for m in $(awk '{print $5}' /proc/self/mountinfo | sort -u); do case $m in /proc*|/sys*) continue;; esac; "
       "find $m -xdev \\( -type d -perm -0002 \\) -o \\( -type f -perm -0002 \\) 2>/dev/null | head -50; done | sort -u")
    facts.write("world-writable scan took %.1f s\n" % (time.time() - t))
    cc = subprocess.run("cc -shared -fPIC -O1 -o %s -x c - -ldl" % SHIM, shell=True, input=SHIM_C, text=True,
                        capture_output=True)
    facts.write("shim build rc %d %s\n" % (cc.returncode, cc.stderr[-2000:]))
    facts.flush()
    ms = mounts()
    names = ["plain", "plain_root", "ro_keepdev", "ro_keepdev_root", "ro_all", "ro_devbind", "ro_devbind_root",
             "ro_devbind_shm", "ro_keepdev_shm", "ro_keepkernel", "ro_keepkernel_root", "tmpfs_writables",
             "plain+torch", "ro_keepdev+torch", "ro_devbind+torch", "ro_devbind_shm+torch", "ro_keepkernel+torch",
             "ro_devbind_root+torch"]
    for m in ms:
        if m["point"] not in ("/dev",):
            names.append("only_ro:" + m["point"])
            if m["point"] != "/":
                names.append("ro_except:" + m["point"])

    def one(n):
        t0 = time.time()
        try:
            p = subprocess.run([sys.executable, os.path.abspath(__file__), "--variant", n], capture_output=True,
                               text=True, timeout=150)
            out, err, rc = p.stdout, p.stderr, p.returncode
        except subprocess.TimeoutExpired as e:
            out, err, rc = (e.stdout or b"").decode() if isinstance(e.stdout, bytes) else (e.stdout or ""), "", "timeout"
            err = "timeout"
        res = {"variant": n, "rc": rc, "s": round(time.time() - t0, 1)}
        for line in out.splitlines():
            if line.startswith("RESULT "): res.update(json.loads(line[7:]))
        setup = [l[6:] for l in err.splitlines() if l.startswith("SETUP ")]
        if setup:
            try: res["setup"] = json.loads(setup[0])
            except ValueError: res["setup"] = setup[0][:500]
        fails = [l for l in err.splitlines() if l.startswith("OPENFAIL") and "errno=2 " not in l + " "]
        res["open_failures"] = sorted(set(fails))[:40]
        res["stderr_tail"] = "\n".join(l for l in err.splitlines() if not l.startswith(("OPENFAIL", "SETUP")))[-800:]
        return res

    with ThreadPoolExecutor(8) as ex, open(os.path.join(OUT, "explore.jsonl"), "w") as f:
        for res in ex.map(one, names):
            f.write(json.dumps(res) + "\n")
            f.flush()
            print("%-40s cuda=%s torch=%s writes=%s remount=%s" % (res["variant"], res.get("cuda_ok"), res.get("torch_ok"),
                  res.get("writes"), res.get("remount_rw")), flush=True)


if __name__ == "__main__":
    if len(sys.argv) == 3 and sys.argv[1] == "--variant":
        run_variant(sys.argv[2])
    else:
        main()
