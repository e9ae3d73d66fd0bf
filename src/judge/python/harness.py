"""Code shared by the trusted reference process (reference.py) and the candidate process (runner.py).

Both sides run a model the same way (`run_call`), so a reference and a candidate are timed by the
same code on inputs of the same sizes. The candidate process may rewrite any of this in its own
memory; nothing the judge relies on is decided there (see docs/judge.md).

Tensor files (the exchange between the two processes, DESIGN §5): b"DICE1\\n", an 8-byte
little-endian header length, a JSON header {"structure", "tensors": [{"dtype", "shape", "offset",
"nbytes"}]}, then the raw bytes. `read_tensors` treats a file as hostile input: every field is
checked before a byte is used.
"""
import ctypes
import errno
import json
import math
import os
import re
import resource
import struct
import sys
import time
import traceback

import torch

MAGIC = b"DICE1\n"
MAX_HEADER_BYTES = 1 << 20
COMPARE_SLICE = 1 << 22
DTYPES = {
    "float32": torch.float32, "float64": torch.float64, "float16": torch.float16, "bfloat16": torch.bfloat16,
    "int64": torch.int64, "int32": torch.int32, "int16": torch.int16, "int8": torch.int8, "uint8": torch.uint8,
    "bool": torch.bool,
}
DTYPE_NAMES = {v: k for k, v in DTYPES.items()}

DEFAULT_TOL = {  # (atol, rtol); KernelBench HEAD: 1e-4 for fp32, 1e-2 for half types
    torch.float32: (1e-4, 1e-4),
    torch.float64: (1e-7, 1e-7),
    torch.float16: (1e-2, 1e-2),
    torch.bfloat16: (1e-2, 1e-2),
}

# ATen ops that move, view or allocate data but compute nothing: a forward may use them freely.
DATA_OPS = {
    "empty", "empty_like", "empty_strided", "zeros", "zeros_like", "ones", "ones_like", "full", "full_like",
    "fill_", "zero_", "view", "reshape", "_reshape_alias", "_unsafe_view", "as_strided", "contiguous", "clone",
    "copy_", "to", "_to_copy", "transpose", "t", "permute", "expand", "expand_as", "squeeze", "unsqueeze",
    "flatten", "unflatten", "select", "slice", "narrow", "split", "chunk", "unbind", "detach", "alias", "lift",
    "lift_fresh", "resize_", "set_", "item", "_local_scalar_dense", "is_nonzero", "result_type", "size",
    "stride", "numel", "dim", "view_as", "reshape_as", "type_as", "record_stream", "_has_compatible_shallow_copy_type",
    "empty_affine_quantized", "new_empty", "new_zeros", "new_empty_strided", "resolve_conj", "resolve_neg",
    "_conj", "conj", "movedim", "swapaxes", "transpose_", "squeeze_", "unsqueeze_", "is_same_size",
}
# Kernel-name fragments of CUDA library kernels (ATen, cuBLAS, cuDNN, CUTLASS, CUB, ...).
LIBRARY_KERNELS = ("at::", "cublas", "cudnn", "cutlass", "cub::", "xmma", "gemm", "gemv", "sm90_", "sm80_",
                   "ampere_", "hopper_", "nvjet", "triton_", "flash", "fmha", "elementwise_kernel",
                   "reduce_kernel", "CatArrayBatched", "Memcpy", "Memset")


class Fail(Exception):
    def __init__(self, status, message):
        super().__init__(message)
        self.status = status
        self.message = message


def tail(s, n=3000):
    return s[-n:]


def classify(exc, default):
    """Maps an exception raised by candidate code to a failure class."""
    text = "%s: %s" % (type(exc).__name__, exc)
    err = getattr(exc, "errno", None)
    if isinstance(exc, MemoryError) or "out of memory" in text or "can't allocate memory" in text:
        return "resource_limit"
    if isinstance(exc, OSError) and err in (27, 28):  # EFBIG, ENOSPC
        return "resource_limit"
    if isinstance(exc, BlockingIOError) or "Resource temporarily unavailable" in text:
        return "resource_limit"
    if isinstance(exc, PermissionError) or (isinstance(exc, OSError) and err in (30, 1, 13)):
        return "sandbox_violation"  # EROFS / EPERM / EACCES: wrote outside scratch etc.
    if isinstance(exc, OSError) and (err in (100, 101, 111, 113) or
                                     type(exc).__name__ in ("gaierror", "timeout", "TimeoutError")):
        return "sandbox_violation"  # network
    return default


def seed_all(seed):
    torch.manual_seed(seed)
    if torch.cuda.is_available():
        torch.cuda.manual_seed_all(seed)


def load_module(name, path):
    module = type(os)(name)
    module.__file__ = path
    with open(path) as fh:
        code = fh.read()
    exec(compile(code, path, "exec"), module.__dict__)
    return module


# --- tensor files ---

def _encode(x, tensors):
    if isinstance(x, torch.Tensor):
        tensors.append(x)
        return {"t": len(tensors) - 1}
    if isinstance(x, tuple):
        return {"u": [_encode(v, tensors) for v in x]}
    if isinstance(x, list):
        return {"l": [_encode(v, tensors) for v in x]}
    if x is None or isinstance(x, (bool, int, float, str)):
        return {"v": x}
    return {"o": type(x).__name__}


def _pack(obj):
    """(header bytes, [(contiguous tensor, nbytes)]) of obj."""
    tensors = []
    structure = _encode(obj, tensors)
    metas, hosts, offset = [], [], 0
    for t in tensors:
        if type(t) is not torch.Tensor:
            raise Fail("wrong_value", "output is a %s, not a plain torch.Tensor" % type(t).__name__)
        if t.dtype not in DTYPE_NAMES:
            raise Fail("wrong_shape", "unsupported dtype %s" % t.dtype)
        h = t.detach().contiguous()  # a GPU tensor stays there: it is written through the staging buffer
        nbytes = h.numel() * h.element_size()
        metas.append({"dtype": DTYPE_NAMES[t.dtype], "shape": list(h.shape), "offset": offset, "nbytes": nbytes})
        hosts.append((h, nbytes))
        offset += nbytes
    header = json.dumps({"structure": structure, "tensors": metas}).encode()
    return MAGIC + struct.pack("<Q", len(header)) + header, hosts


def _bytes_of(t, nbytes):
    """The memory of a contiguous host tensor as a writable buffer (no copy)."""
    return memoryview((ctypes.c_char * nbytes).from_address(t.data_ptr())).cast("B")


# Tensors on a GPU go to and from files through one host buffer per process, reused by every call
# (pinned where the allocator allows), in pieces of its size: no fresh host copy of a GiB tensor
# (its page faults cost more than the copy) and no second copy beside the file's bytes.
STAGE_BYTES = 32 << 20
STAGE_HOST_TENSORS = False  # tests only: host tensors take the GPU tensors' path
_stage = None


def _staging():
    global _stage
    if _stage is None:
        try:
            _stage = torch.empty(STAGE_BYTES, dtype=torch.uint8, pin_memory=True)
        except Exception:  # noqa: BLE001  (no CUDA, or no pinned memory left: a plain host buffer)
            _stage = torch.empty(STAGE_BYTES, dtype=torch.uint8)
    return _stage, _bytes_of(_stage, _stage.numel())


def _staged(device):
    return torch.device(device).type != "cpu" or STAGE_HOST_TENSORS


def _as_bytes(t):
    """A contiguous tensor's memory as a flat uint8 tensor on its device (no copy)."""
    return t.reshape(-1).view(torch.uint8)


def _write_packed(fh, head, hosts):
    fh.write(head)
    for h, nbytes in hosts:
        if not nbytes:
            continue
        if not _staged(h.device):
            fh.write(_bytes_of(h, nbytes))
            continue
        src = _as_bytes(h)
        stage, view = _staging()
        for i in range(0, nbytes, stage.numel()):
            n = min(stage.numel(), nbytes - i)
            stage[:n].copy_(src[i:i + n])  # synchronous: the buffer is free again when it returns
            fh.write(view[:n])
    fh.flush()


def _read_into(fh, dtype, shape, nbytes, device):
    """A fresh tensor on device holding the next nbytes of fh, or None when the file ends first."""
    if not _staged(device):
        t = torch.empty(shape, dtype=dtype)
        view, got = _bytes_of(t, nbytes), 0
        while got < nbytes:
            n = fh.readinto(view[got:])
            if not n:
                return None
            got += n
        return t
    dst = torch.empty(nbytes, dtype=torch.uint8, device=device)
    stage, view = _staging()
    got = 0
    while got < nbytes:
        n = fh.readinto(view[:min(stage.numel(), nbytes - got)])
        if not n:
            return None
        dst[got:got + n].copy_(stage[:n])
        got += n
    return dst.view(dtype).reshape(shape)


def write_tensors(path, obj):
    """Writes obj (tensors, lists, tuples, scalars) to path atomically (a new file beside it)."""
    head, hosts = _pack(obj)
    tmp = path + ".part"
    with open(tmp, "wb") as fh:
        _write_packed(fh, head, hosts)
    os.replace(tmp, path)


def write_tensors_to(fh, obj):
    """As write_tensors, to an open binary file object (e.g. io.BytesIO)."""
    head, hosts = _pack(obj)
    _write_packed(fh, head, hosts)


def write_tensors_in_place(path, obj):
    """As write_tensors, into an existing file (the candidate cannot create files beside it)."""
    head, hosts = _pack(obj)
    total = len(head) + sum(n for _, n in hosts)
    # Candidate code writes under the soft file-size limit (judge.sandbox.file_size_mb); the outputs
    # may take up to the hard one (output_file_mb), for this write only.
    soft, hard = resource.getrlimit(resource.RLIMIT_FSIZE)
    if soft != resource.RLIM_INFINITY and soft < total:
        resource.setrlimit(resource.RLIMIT_FSIZE, (hard if hard == resource.RLIM_INFINITY else min(hard, total), hard))
    try:
        with open(path, "r+b") as fh:
            fh.truncate(0)
            _write_packed(fh, head, hosts)
    except OSError as e:
        if e.errno != errno.EFBIG:
            raise
        raise Fail("resource_limit", "the outputs (%d MiB) exceed the file size limit "
                   "judge.sandbox.output_file_mb (%s MiB)" % (total >> 20, os.environ.get("DICE_OUTPUT_FILE_MB", "?")))
    finally:
        resource.setrlimit(resource.RLIMIT_FSIZE, (soft, hard))


def _decode(s, tensors, depth=0):
    if depth > 32 or not isinstance(s, dict) or len(s) != 1:
        raise Fail("wrong_value", "malformed output structure")
    (k, v), = s.items()
    if k == "t":
        if not isinstance(v, int) or not 0 <= v < len(tensors):
            raise Fail("wrong_value", "malformed output structure")
        return tensors[v]
    if k in ("u", "l"):
        if not isinstance(v, list):
            raise Fail("wrong_value", "malformed output structure")
        items = [_decode(x, tensors, depth + 1) for x in v]
        return tuple(items) if k == "u" else items
    if k == "v":
        return v
    if k == "o":
        raise Fail("wrong_value", "output contains a %s, not tensors" % str(v)[:40])
    raise Fail("wrong_value", "malformed output structure")


def read_tensors(path, device="cpu"):
    """Reads a tensor file; every tensor is a fresh tensor on `device`. Raises Fail on a bad file.
    Each tensor's bytes are read straight into its own memory (one copy: large tasks move GiBs)."""
    with open(path, "rb") as fh:
        size = os.fstat(fh.fileno()).st_size
        lead = fh.read(len(MAGIC) + 8)
        if len(lead) < len(MAGIC) + 8 or lead[:len(MAGIC)] != MAGIC:
            raise Fail("wrong_value", "no output was written (or it is not an output file)")
        (hlen,) = struct.unpack("<Q", lead[len(MAGIC):])
        start = len(MAGIC) + 8
        if hlen > MAX_HEADER_BYTES or start + hlen > size:
            raise Fail("wrong_value", "output file header is malformed")
        try:
            header = json.loads(fh.read(hlen).decode())
            metas = header["tensors"]
            structure = header["structure"]
            assert isinstance(metas, list)
        except Exception:  # noqa: BLE001
            raise Fail("wrong_value", "output file header is malformed")
        body = size - start - hlen
        tensors = []
        for m in metas:
            try:
                dtype = DTYPES[m["dtype"]]
                shape = [int(d) for d in m["shape"]]
                off, nbytes = int(m["offset"]), int(m["nbytes"])
            except Exception:  # noqa: BLE001
                raise Fail("wrong_value", "output file header is malformed")
            if any(d < 0 for d in shape) or len(shape) > 16:
                raise Fail("wrong_value", "output tensor has an invalid shape")
            numel = math.prod(shape)
            esize = torch.empty((), dtype=dtype).element_size()
            if nbytes != numel * esize or off < 0 or off + nbytes > body:
                raise Fail("wrong_value", "output tensor data is incomplete")
            if not numel:
                tensors.append(torch.empty(shape, dtype=dtype, device=device))
                continue
            fh.seek(start + hlen + off)
            t = _read_into(fh, dtype, shape, nbytes, device)
            if t is None:
                raise Fail("wrong_value", "output tensor data is incomplete")
            tensors.append(t)
    return _decode(structure, tensors)


def as_read(obj, device):
    """What read_tensors(path, device) returns after write_tensors(path, obj), without the file:
    every tensor a fresh contiguous copy (same bits) on device, the rest through the same JSON."""
    head, hosts = _pack(obj)
    header = json.loads(head[len(MAGIC) + 8:].decode())
    copies = [h.to(device).clone(memory_format=torch.contiguous_format) for h, _ in hosts]
    return _decode(header["structure"], copies)


def flatten(x):
    if isinstance(x, torch.Tensor):
        return [x]
    if isinstance(x, (list, tuple)):
        out = []
        for v in x:
            out += flatten(v)
        return out
    return []


def same_bits(a, b):
    if a.shape != b.shape or a.dtype != b.dtype:
        return False
    if a.is_floating_point():
        both_nan = torch.isnan(a) & torch.isnan(b)
        return bool(torch.all((a == b) | both_nan))
    return bool(torch.equal(a, b))


def compare(out, ref_out, atol, rtol):
    """Max abs error of out against ref_out; raises Fail (wrong_shape / wrong_value)."""
    if isinstance(ref_out, torch.Tensor) != isinstance(out, torch.Tensor):
        raise Fail("wrong_shape", "output is %s, reference returns %s" % (type(out).__name__, type(ref_out).__name__))
    c, r = flatten(out), flatten(ref_out)
    if len(c) != len(r):
        raise Fail("wrong_shape", "output has %d tensors, reference %d" % (len(c), len(r)))
    worst = 0.0
    for t, r in zip(c, r):
        if tuple(t.shape) != tuple(r.shape):
            raise Fail("wrong_shape", "output shape %s, expected %s" % (tuple(t.shape), tuple(r.shape)))
        if t.dtype != r.dtype:
            raise Fail("wrong_shape", "output dtype %s, expected %s" % (t.dtype, r.dtype))
        if t.device != r.device:
            t = t.to(r.device)
        if not r.is_floating_point():
            if not torch.equal(t, r):
                raise Fail("wrong_value", "integer output differs")
            continue
        a, b = DEFAULT_TOL.get(r.dtype, (1e-4, 1e-4))
        a = atol if atol is not None else a
        b = rtol if rtol is not None else b
        # In slices of 4M elements (a task's output can be GiBs). fp32/fp64: torch.isclose's rule
        # (equal, both NaN, or a finite |t - r| <= atol + rtol |r|) in that dtype; half types: torch.allclose.
        ft, fr = t.reshape(-1), r.reshape(-1)
        close = True
        for i in range(0, ft.numel(), COMPARE_SLICE):
            ct, cr = ft[i:i + COMPARE_SLICE], fr[i:i + COMPARE_SLICE]
            ct_nan, cr_nan = torch.isnan(ct), torch.isnan(cr)
            if bool(torch.any(ct_nan & ~cr_nan)):
                raise Fail("wrong_value", "output has NaN where the reference has none")
            if ct.dtype in (torch.float32, torch.float64):
                diff = (ct - cr).abs()
                ok = (ct == cr) | (ct_nan & cr_nan) | (torch.isfinite(diff) & (diff <= a + b * cr.abs()))
                close = close and bool(ok.all())
            else:
                diff = (ct.float() - cr.float()).abs()
                close = close and torch.allclose(ct, cr, atol=a, rtol=b, equal_nan=True)
            # the largest error where both are finite (an inf or NaN difference is not a number to report)
            diff = torch.where(torch.isfinite(diff), diff, torch.zeros((), dtype=diff.dtype, device=diff.device))
            worst = max(worst, float(diff.max()))
        if not close:
            raise Fail("wrong_value", "max abs error %.3g exceeds atol=%g rtol=%g" % (worst, a, b))
    return worst


# --- running one call ---

_cudart = None


def _persisting_l2_reset():
    """cudaDeviceSetLimit(cudaLimitPersistingL2CacheSize, 0) + cudaCtxResetPersistingL2Cache()."""
    global _cudart
    if _cudart is None:
        _cudart = False
        dirs = ["", os.path.join(os.path.dirname(torch.__file__), "lib")]
        for d in dirs:
            for n in ("libcudart.so", "libcudart.so.13", "libcudart.so.12"):
                try:
                    _cudart = ctypes.CDLL(os.path.join(d, n) if d else n)
                    break
                except OSError:
                    continue
            if _cudart:
                break
    if _cudart:
        _cudart.cudaDeviceSetLimit(ctypes.c_int(0x06), ctypes.c_size_t(0))
        _cudart.cudaCtxResetPersistingL2Cache()


class Caller:
    """Runs model(*inputs) the way every call is run, on both sides: inputs read fresh from the
    exchange file, L2 flushed (CUDA), freed memory poisoned, timed (CUDA events around a
    device-wide synchronize, or the host clock on CPU), optionally under the op recorder."""

    def __init__(self, device, record_ops):
        self.device = device
        self.record_ops = record_ops
        self.cupti = False  # CUDA kernels recorded by the profiler (CUPTI), started on the judge's request
        self.counters = None  # else [(kernel names, launch counts)] of the loaded extensions (counted launches)
        self.own_names = set()  # the kernels the candidate's sources define (own, whatever their names)
        self.flush_buf = None
        if device == "cuda":
            props = torch.cuda.get_device_properties(0)
            l2 = getattr(props, "L2_cache_size", 0) or (64 << 20)
            self.flush_buf = torch.empty(int(2 * l2) // 4 + 1, dtype=torch.float32, device="cuda")

    def _poison(self):
        """NaN into the allocator's free blocks, each one filled by an allocation of its own size
        (largest first, so best fit serves each from a block already there). One allocation of
        all free bytes does not fit a fragmented cache: the allocator made a new segment every
        call, the reserve doubled call after call, and the cudaMalloc's of a growing reserve cost
        an honest candidate hundreds of milliseconds of host time (timing_tampered on the GPU node)."""
        reserved = torch.cuda.memory_reserved()
        if reserved == torch.cuda.memory_allocated():
            return
        blocks = []
        for seg in torch.cuda.memory_snapshot():
            small = seg.get("segment_type") == "small"
            for b in seg.get("blocks", ()):
                # a request goes to the pool of its size (small: up to 1 MiB), so only blocks whose
                # size maps back to their own pool can be refilled without a new segment
                if b.get("state") == "inactive" and b["size"] >= 512 and (b["size"] <= (1 << 20)) == small:
                    blocks.append(b["size"])
        held = []
        try:
            for n in sorted(blocks, reverse=True):
                t = torch.empty(n // 4, dtype=torch.float32, device="cuda")
                t.fill_(float("nan"))
                held.append(t)
        except RuntimeError:
            pass
        del held
        if torch.cuda.memory_reserved() > reserved:  # never let the reserve grow from one call to the next
            torch.cuda.empty_cache()

    def call(self, model, inputs, record=False):
        """(output, ms, evidence) of one call; evidence is the op record (None when not recorded).
        The judge records the correctness trials only: the profiler's cost (on the GPU node a tenth
        of a second per call to stop it, and its per-op overhead inside the timed window) would
        distort the timed calls."""
        cuda = self.device == "cuda"
        if cuda:
            self._poison()
            self.flush_buf.zero_()
            _persisting_l2_reset()
            torch.cuda.synchronize()
        prof = None
        kernels = False
        counted = None
        if self.record_ops and record:
            # recorded calls are the correctness trials: on a GPU the candidate's own kernels are
            # recorded too, by CUPTI or as the launches its extensions counted
            kernels = cuda and self.cupti
            prof = op_recorder(kernels)
            prof.__enter__()
            if cuda and not kernels and self.counters is not None:
                counted = [list(n) for _, n in self.counters]
        try:
            with torch.no_grad():
                if cuda:
                    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
                    start.record()
                    out = model(*inputs)
                    torch.cuda.synchronize()  # device-wide: work on side streams is inside the window
                    end.record()
                    end.synchronize()
                    ms = start.elapsed_time(end)
                else:
                    h0 = time.perf_counter()
                    out = model(*inputs)
                    ms = (time.perf_counter() - h0) * 1e3
        finally:
            if prof is not None:
                prof.__exit__(None, None, None)
        if prof is None:
            return out, ms, None
        ev = evidence(prof, kernels, self.own_names)
        if counted is not None and isinstance(ev, dict):  # (a candidate may have replaced evidence())
            own = {}
            for (names, now), before in zip(self.counters, counted):
                for name, a, b in zip(names, before, now):
                    if b > a:
                        own[name] = own.get(name, 0) + b - a
            ev.update(kernels=True, kernel_record="launches counted", own_kernels=own)
        return out, ms, ev


def op_recorder(kernels):
    """The profiler of one recorded call: ATen ops and record_function scopes on this thread, and CUDA
    kernels through CUPTI when `kernels`. Without kernels, the legacy recorder: Kineto's first use in a
    CUDA process sets CUPTI up even for CPU ops (6 CPU-s per candidate process on the GPU node, against
    0.02 s for the legacy one with the same events: tools/gpu/probe_profiler.py)."""
    if not kernels:
        try:
            return torch.autograd.profiler.profile(use_kineto=False)
        except Exception:  # noqa: BLE001 -- a torch without the legacy recorder: Kineto's
            pass
    from torch.profiler import ProfilerActivity, profile
    return profile(activities=[ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if kernels else []))


def recorded_events(prof):
    """The events of a finished op_recorder (either kind)."""
    return prof.events() if hasattr(prof, "events") else prof.function_events


def _kernel_base(name):
    """A recorded kernel's own name: `void ns::k<float, 2>(float const*, int)` -> ("ns", "k")."""
    n = name.strip()
    if n.startswith("void "):
        n = n[5:]
    n = re.split(r"[(<]", n, 1)[0].strip()
    ns, _, base = n.rpartition("::")
    return ns, base


LIBRARY_NAMESPACES = ("at", "c10", "cub", "thrust", "cutlass", "cute", "flash", "cudnn", "cublas")


def evidence(prof, kernels, own_names=()):
    """What ran inside one call: extension calls, ATen compute ops (inside / outside the extension)
    and CUDA kernels (own: a kernel the candidate's sources define, else one not named like a
    library's; library)."""
    ext_calls, wrapper_calls = 0, 0
    outside, inside = {}, {}
    own_k, lib_k = {}, {}
    events = list(recorded_events(prof))
    ext_events = [e for e in events if e.name.startswith("dice_ext::")]
    ext_ids = set(id(e) for e in ext_events)
    compute_in_ext = {}
    for e in events:
        name = e.name
        dev = str(getattr(e, "device_type", "")).lower()
        if "cuda" in dev and not name.startswith("aten::"):
            ns, base = _kernel_base(name)
            mine = base in own_names and ns.split("::")[0] not in LIBRARY_NAMESPACES
            bucket = own_k if mine or not any(f in name for f in LIBRARY_KERNELS) else lib_k
            bucket[name[:80]] = bucket.get(name[:80], 0) + 1
            continue
        if not name.startswith("aten::"):
            continue
        op = name[6:]
        if op in DATA_OPS:
            continue
        # the outermost ATen compute op only: nested ones are its implementation
        p, nested, owner = e.cpu_parent, False, None
        while p is not None:
            if p.name.startswith("aten::") and p.name[6:] not in DATA_OPS:
                nested = True
            if id(p) in ext_ids:
                owner = p
                break
            p = p.cpu_parent
        if nested:
            continue
        if owner is not None:
            inside[op] = inside.get(op, 0) + 1
            compute_in_ext[id(owner)] = True
        else:
            outside[op] = outside.get(op, 0) + 1
    ext_calls = len(ext_events)
    wrapper_calls = sum(1 for e in ext_events if compute_in_ext.get(id(e)))
    return {"kernels": bool(kernels), "kernel_record": "CUPTI" if kernels else "none", "ext_calls": ext_calls,
            "wrapper_calls": wrapper_calls, "aten_outside": outside, "aten_inside": inside,
            "own_kernels": own_k, "library_kernels": lib_k}


def serve(handlers, error_status):
    """The request loop of both processes: JSON lines on stdin, one answer per request on fd 3
    ({"event": "ready"} first). handlers: cmd -> fn(req) returning the answer. A Fail becomes
    {"event": "failed", "status", "message"}; anything else the failure class error_status."""
    answer = os.fdopen(3, "w", buffering=1)

    def emit(obj):
        answer.write(json.dumps(obj) + "\n")
        answer.flush()

    emit({"event": "ready", "torch": torch.__version__})
    for line in sys.stdin:
        line = line.strip()
        if not line:
            continue
        req = json.loads(line)
        try:
            fn = handlers.get(req.get("cmd"))
            reply = fn(req) if fn else {"event": "failed", "status": "judge_error", "message": "unknown command"}
        except Fail as f:
            reply = {"event": "failed", "status": f.status, "message": f.message}
        except BaseException:  # noqa: BLE001 -- answer whatever happens
            reply = {"event": "failed", "status": error_status, "message": tail(traceback.format_exc())}
        emit(reply)
    os._exit(0)
