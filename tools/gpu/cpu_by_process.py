#!/usr/bin/env python3
"""Where a machine's CPU time goes, by kind of process, while a command runs (issue 21).

usage: cpu_by_process.py OUT.json -- COMMAND...   (runs COMMAND; polls /proc every 0.25 s)

Each process is classed by its command line (a compiler, nvcc's parts, the judge's Python
processes by script, dice itself); its CPU time (utime + stime, its own only) is the largest
value seen while it lived, so a process shorter than the poll interval is missed and one that
exits loses at most its last quarter second. Prints the table sorted by CPU seconds, with the
machine's busy seconds from /proc/stat for comparison, and writes it to OUT.json.
"""
import json
import os
import subprocess
import sys
import time

HZ = os.sysconf("SC_CLK_TCK")
KINDS = (("c++-header", "precompiled header (g++)"), ("runner.py", "candidate process (runner.py)"),
         ("reference.py", "reference process"),
         ("compile.py", "compile step (compile.py)"), ("fastbuild", "fast builder (python)"),
         ("ext.py", "ext.py (builder / make-pch)"), ("cc1plus", "g++ (cc1plus)"), ("cicc", "cicc"),
         ("ptxas", "ptxas"), ("cudafe++", "cudafe++"), ("fatbinary", "fatbinary"), ("nvlink", "nvlink"),
         ("/ld", "ld"), ("collect2", "ld"), ("objcopy", "objcopy"), ("nvcc", "nvcc (driver)"),
         ("/as ", "as"), ("dice", "dice"))


def kind(cmd):
    for key, name in KINDS:
        if key in cmd:
            return name
    return cmd.split(" ")[0].rsplit("/", 1)[-1][:40] or "?"


def busy():
    with open("/proc/stat") as f:
        v = [int(x) for x in f.readline().split()[1:]]
    return (v[0] + v[1] + v[2] + v[5] + v[6] + v[7]) / HZ


def main():
    out, cmd = sys.argv[1], sys.argv[sys.argv.index("--") + 1:]
    me = os.getpid()
    seen, base = {}, {}  # (pid, starttime) -> [kind, CPU-s]; base: what was used before the command

    def poll():
        for pid in os.listdir("/proc"):
            if not pid.isdigit() or int(pid) == me:
                continue
            try:
                with open("/proc/%s/stat" % pid) as f:
                    st = f.read()
                with open("/proc/%s/cmdline" % pid, "rb") as f:
                    cl = f.read().replace(b"\0", b" ").decode(errors="replace")
            except OSError:
                continue
            fields = st[st.rindex(")") + 2:].split()
            key = (pid, fields[19])  # starttime tells a reused pid apart
            cpu = (int(fields[11]) + int(fields[12])) / HZ
            rec = seen.setdefault(key, [kind(cl + " ") if cl else "kernel threads", 0.0])
            rec[1] = max(rec[1], cpu - base.get(key, 0.0))

    poll()
    base.update({k: v[1] for k, v in seen.items()})
    seen.clear()
    b0 = busy()
    t0 = time.time()
    proc = subprocess.Popen(cmd)
    while True:
        done = proc.poll() is not None
        poll()
        if done:
            break
        time.sleep(0.25)
    wall, machine = time.time() - t0, busy() - b0
    by = {}
    for k, cpu in seen.values():
        n, s = by.get(k, (0, 0.0))
        by[k] = (n + 1, s + cpu)
    rows = sorted(by.items(), key=lambda kv: -kv[1][1])
    print("cpu by process: wall %.0f s, machine busy %.0f CPU-s, counted %.0f CPU-s" % (
        wall, machine, sum(s for _, s in by.values())))
    for k, (n, s) in rows:
        if s >= 1:
            print("  %-34s %5d processes %8.1f CPU-s" % (k, n, s))
    with open(out, "w") as f:
        json.dump({"wall_s": wall, "machine_busy_s": machine,
                   "by_kind": {k: {"n": n, "cpu_s": s} for k, (n, s) in rows}}, f, indent=1)
    sys.exit(proc.returncode)


if __name__ == "__main__":
    main()
