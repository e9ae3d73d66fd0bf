"""The judge's tensor exchange on a large task, timed: what every call of an evaluation pays
(inputs drawn and written by the reference, read by the candidate, its output written, read back
and compared). Sizes as the built-in CUDA tasks: two 8192 x 16384 float32 inputs, one such output.

usage: python3 tools/bench_exchange.py [HARNESS_DIR (default src/judge/python)] [DIR (default /dev/shm)]
Compare two harnesses in one session: `git archive REV src/judge/python | tar -x -C /tmp/old` and
run this with /tmp/old/src/judge/python, then with the default.
"""
import os
import sys
import tempfile
import time

ROOT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..")
sys.path.insert(0, sys.argv[1] if len(sys.argv) > 1 else os.path.join(ROOT, "src", "judge", "python"))
import torch  # noqa: E402

import harness  # noqa: E402

torch.set_num_threads(1)  # as the reference and candidate processes run
work = tempfile.mkdtemp(prefix="dice_xchg_", dir=sys.argv[2] if len(sys.argv) > 2 else "/dev/shm")


def timed(label, fn):
    t = time.perf_counter()
    r = fn()
    print("%-44s %6.2f s" % (label, time.perf_counter() - t))
    return r


dev = "cuda" if torch.cuda.is_available() else "cpu"
print("device: %s (on a GPU, tensors are drawn, written from and read into GPU memory)" % dev)


def synced(fn):
    def run():
        r = fn()
        if dev == "cuda":
            torch.cuda.synchronize()
        return r
    return run


def draw():
    if dev == "cpu":
        return [torch.randn(8192, 16384), torch.randn(8192, 16384)]
    with torch.device(dev):
        return [torch.randn(8192, 16384), torch.randn(8192, 16384)]


try:
    torch.manual_seed(0)
    a = timed("inputs drawn (2 x 512 MiB%s)" % (", CPU, one thread" if dev == "cpu" else ""), synced(draw))
    inp, out = os.path.join(work, "in.bin"), os.path.join(work, "out.bin")
    timed("inputs written (1 GiB)", lambda: harness.write_tensors(inp, a))
    b = timed("inputs read (1 GiB)", synced(lambda: harness.read_tensors(inp, dev)))
    assert all(torch.equal(x, y) for x, y in zip(a, b)), "read back differs"
    if hasattr(harness, "as_read"):  # the reference's trials: fresh tensors without reading the file back
        timed("inputs as read, without the file (1 GiB)", synced(lambda: harness.as_read(a, dev)))
    open(out, "wb").close()
    y = b[0] * 2
    timed("output written in place (512 MiB)", lambda: harness.write_tensors_in_place(out, y))
    c = timed("output read (512 MiB)", synced(lambda: harness.read_tensors(out, dev)))
    part = slice(None) if dev == "cuda" else slice(0, 1024)
    err = timed("output compared (%s)" % ("all 128M elements" if dev == "cuda" else "1/8 of it: 16M elements"),
                synced(lambda: harness.compare(c[part], y[part], None, None)))
    assert err == 0.0
finally:
    for f in os.listdir(work):
        os.unlink(os.path.join(work, f))
    os.rmdir(work)
