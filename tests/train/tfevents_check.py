"""Reads a run's TensorBoard event files with a reader of our own that shares no code with dice's
writer (src/util/tensorboard.cpp), and checks them against the run's metrics.jsonl.

usage: tfevents_check.py RUN_DIR KEY [KEY ...]

The reader follows the documented formats: TFRecord framing (uint64 length, masked CRC-32C of the
length, data, masked CRC-32C of the data) and protocol buffer wire encoding of tensorflow's Event
{wall_time=1 double, step=2 int64, file_version=3 string, summary=5 Summary}, Summary {value=1},
Summary.Value {tag=1 string, simple_value=2 float}. CRC-32C is computed bit by bit here.
Checks: every record's checksums, the first event's file_version, and that each KEY's scalar at each
step equals the step's metrics.jsonl value (as a float32) -- the last file wins for a step written
twice (a resumed run). Prints a summary line; exits 1 with a message on any mismatch.
"""
import glob
import json
import os
import struct
import sys


def crc32c(data):
    crc = 0xFFFFFFFF
    for byte in data:
        crc ^= byte
        for _ in range(8):
            crc = (crc >> 1) ^ (0x82F63B78 if crc & 1 else 0)
    return crc ^ 0xFFFFFFFF


def masked(data):
    c = crc32c(data)
    return (((c >> 15) | (c << 17)) + 0xA282EAD8) & 0xFFFFFFFF


def fields(buf):
    """(field number, wire type, value) of one protocol buffer message."""
    i = 0
    while i < len(buf):
        key, i = varint(buf, i)
        num, wt = key >> 3, key & 7
        if wt == 0:
            v, i = varint(buf, i)
        elif wt == 1:
            v, i = buf[i:i + 8], i + 8
        elif wt == 2:
            n, i = varint(buf, i)
            v, i = buf[i:i + n], i + n
        elif wt == 5:
            v, i = buf[i:i + 4], i + 4
        else:
            raise ValueError("wire type %d" % wt)
        yield num, wt, v


def varint(buf, i):
    shift = out = 0
    while True:
        b = buf[i]
        i += 1
        out |= (b & 0x7F) << shift
        shift += 7
        if not b & 0x80:
            return out, i


def records(path):
    data = open(path, "rb").read()
    i = 0
    while i < len(data):
        head = data[i:i + 8]
        (n,) = struct.unpack("<Q", head)
        (hc,) = struct.unpack("<I", data[i + 8:i + 12])
        assert hc == masked(head), "%s: bad length checksum at byte %d" % (path, i)
        body = data[i + 12:i + 12 + n]
        (bc,) = struct.unpack("<I", data[i + 12 + n:i + 16 + n])
        assert len(body) == n and bc == masked(body), "%s: bad data checksum at byte %d" % (path, i)
        yield body
        i += 16 + n


def events(path):
    for body in records(path):
        ev = {"scalars": {}}
        for num, wt, v in fields(body):
            if num == 1 and wt == 1:
                ev["wall_time"] = struct.unpack("<d", v)[0]
            elif num == 2 and wt == 0:
                ev["step"] = v
            elif num == 3 and wt == 2:
                ev["file_version"] = v.decode()
            elif num == 5 and wt == 2:
                for snum, _, sv in fields(v):
                    if snum != 1:
                        continue
                    tag, val = None, None
                    for vnum, vwt, vv in fields(sv):
                        if vnum == 1:
                            tag = vv.decode()
                        elif vnum == 2 and vwt == 5:
                            val = struct.unpack("<f", vv)[0]
                    ev["scalars"][tag] = val
        yield ev


def main():
    run, keys = sys.argv[1], sys.argv[2:]
    files = sorted(glob.glob(os.path.join(run, "events.out.tfevents.*")), key=os.path.getmtime)
    assert files, "no events.out.tfevents.* in %s" % run
    by_step, n_events = {}, 0
    for f in files:
        evs = list(events(f))
        assert evs and evs[0].get("file_version") == "brain.Event:2", "%s: no file_version event first" % f
        for ev in evs[1:]:
            by_step.setdefault(ev["step"], {}).update(ev["scalars"])
            assert ev.get("wall_time", 0) > 1.5e9, "%s: step %s has no wall time" % (f, ev.get("step"))
            n_events += 1
    recs = [json.loads(line) for line in open(os.path.join(run, "metrics.jsonl")) if line.strip()]
    for rec in recs:
        step = rec["step"]
        assert step in by_step, "step %d of metrics.jsonl has no event" % step
        for k in keys:
            want = struct.unpack("<f", struct.pack("<f", float(rec[k])))[0]
            got = by_step[step].get(k)
            assert got == want, "step %d %s: event %r, metrics.jsonl %r" % (step, k, got, rec[k])
    assert sorted(by_step) == [r["step"] for r in recs], (sorted(by_step), [r["step"] for r in recs])
    print("tfevents: %d file(s), %d events, steps %s agree with metrics.jsonl on %s" % (
        len(files), n_events, sorted(by_step), ", ".join(keys)))


if __name__ == "__main__":
    try:
        main()
    except AssertionError as e:
        print("tfevents_check: %s" % e, file=sys.stderr)
        sys.exit(1)
