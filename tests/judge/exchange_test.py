"""The judge's tensor files (harness.py): every structure and dtype a task may exchange comes back
with the same bits, on the host path and on the staged path GPU tensors take (forced here on host
tensors, in pieces smaller than one tensor and not a multiple of its element size); `as_read` (the
reference's trials, which skip reading the file back) gives what reading the file gives; a cut file
is refused.  usage: python3 exchange_test.py"""
import os
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "..", "src", "judge", "python"))
import torch  # noqa: E402

import harness  # noqa: E402

failures = []


def check(cond, what):
    if not cond:
        failures.append(what)
        print("FAIL:", what)


def bits(t):
    t = t.contiguous().reshape(-1)
    return t.view(torch.uint8) if t.numel() else t


def same(a, b, where):
    """Same structure (tuple vs list included), same values; tensors equal bit for bit, fresh and contiguous."""
    if isinstance(a, torch.Tensor):
        check(isinstance(b, torch.Tensor), where + ": a tensor came back as %s" % type(b).__name__)
        if isinstance(b, torch.Tensor):
            check(a.dtype == b.dtype and tuple(a.shape) == tuple(b.shape), where + ": dtype/shape %s %s -> %s %s"
                  % (a.dtype, tuple(a.shape), b.dtype, tuple(b.shape)))
            check(b.is_contiguous(), where + ": not contiguous")
            check(b.numel() == 0 or b.data_ptr() != a.data_ptr(), where + ": not a fresh tensor")
            check(a.dtype != b.dtype or torch.equal(bits(a), bits(b)), where + ": bits differ")
        return
    check(type(a) is type(b), where + ": %s came back as %s" % (type(a).__name__, type(b).__name__))
    if isinstance(a, (list, tuple)) and type(a) is type(b):
        check(len(a) == len(b), where + ": length")
        for i, (x, y) in enumerate(zip(a, b)):
            same(x, y, "%s[%d]" % (where, i))
    elif not isinstance(a, (list, tuple)):
        check(a == b or (a != a and b != b), where + ": %r -> %r" % (a, b))


def samples():
    g = torch.Generator().manual_seed(1)
    out = {}
    for name, dt in harness.DTYPES.items():
        if dt.is_floating_point:
            t = torch.randn(37, 29, generator=g).to(dt)
            t[0, 0], t[1, 1], t[2, 2] = float("nan"), float("inf"), -0.0
        elif dt == torch.bool:
            t = torch.rand(37, 29, generator=g) > 0.5
        else:
            t = torch.randint(-100 if dt != torch.uint8 else 0, 100, (37, 29), generator=g).to(dt)
        out[name] = t
    return out


def run(tmp, label):
    ts = samples()
    cases = {
        "one tensor": ts["float32"],
        "every dtype": list(ts.values()),
        "nested": (ts["float16"], [ts["int64"], (ts["bool"], 3)], None, 2.5, True, "s", float("inf")),
        "0-dim and empty": [torch.tensor(3.25), torch.empty(0, 5), torch.tensor(7, dtype=torch.int8)],
        "non-contiguous": [ts["float32"].t(), ts["bfloat16"][:, ::3], ts["int32"].expand(2, 37, 29)],
        "multi-piece": torch.arange(100003, dtype=torch.float64),
    }
    for name, obj in cases.items():
        path = os.path.join(tmp, "t.bin")
        harness.write_tensors(path, obj)
        same(obj, harness.read_tensors(path, "cpu"), "%s, %s: read" % (label, name))
        same(obj, harness.as_read(obj, "cpu"), "%s, %s: as_read" % (label, name))
        open(path, "wb").close()
        harness.write_tensors_in_place(path, obj)
        same(obj, harness.read_tensors(path, "cpu"), "%s, %s: written in place" % (label, name))
    # a file cut short is refused, whichever path reads it
    path = os.path.join(tmp, "cut.bin")
    harness.write_tensors(path, cases["multi-piece"])
    os.truncate(path, os.path.getsize(path) - 9)
    try:
        harness.read_tensors(path, "cpu")
        check(False, label + ": a cut file was read")
    except harness.Fail as f:
        check(f.status == "wrong_value" and "incomplete" in f.message, label + ": cut file: " + f.message)


with tempfile.TemporaryDirectory() as tmp:
    run(tmp, "host path")
    harness.STAGE_HOST_TENSORS = True
    for size in (1001, 4096, 1 << 20):  # pieces smaller than a tensor, not a multiple of 8 or 4 bytes
        harness.STAGE_BYTES, harness._stage = size, None
        run(tmp, "staged path, %d-byte buffer" % size)
        check(harness._stage is not None and harness._stage.numel() == size, "the staging buffer was not used")

print("exchange_test: %s" % ("FAILED: %d" % len(failures) if failures else "ok"))
sys.exit(1 if failures else 0)
