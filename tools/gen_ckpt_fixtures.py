#!/usr/bin/python3
"""Fixtures for facecast's checkpoint, safetensors and .npy readers (tests/test_checkpoint.c).

Design note
-----------
Run with Debian's /usr/bin/python3 (python3-torch 1.13, numpy 1.24); a pyenv python3 earlier
on PATH has no torch. Writes tests/data/ckpt/ (re-runnable: it replaces the directory's files):

  wav2lip_zip.pth        Wav2Lip-style {"state_dict", "optimizer", "global_step",
                         "global_epoch", "misc"}, torch.save zip format (pickle protocol 2)
  wav2lip_legacy.pth     the same, _use_new_zipfile_serialization=False (torch < 1.6 layout)
  wav2lip_zip_p4.pth     zip format, pickle_protocol=4 (FRAME, SHORT_BINUNICODE, MEMOIZE,
                         STACK_GLOBAL)
  wav2lip_legacy_p4.pth  legacy format, pickle_protocol=4
  zip64.pth              wav2lip_zip.pth re-packed by this script's own ZIP64 writer: every
                         size/offset field saturated (0xFFFFFFFF), ZIP64 extra fields, ZIP64
                         end record and locator, 64-byte aligned data; torch.load reads it back
  flat_sd.pth            a bare nn.Module state dict (no "state_dict" wrapper, no prefix)
  tensors.safetensors    a subset of the tensors, written by this script's own safetensors
                         writer (formats.md §4: descending alignment then name, JSON padded with
                         spaces to a multiple of 8, plus __metadata__)
  npy_*.npy              .npy files of many dtypes, orders, ranks and format versions
  golden.bin / golden.txt  the expected float32 values of every tensor of every fixture

The state dict is that of nn.DataParallel(net) - so names carry "module." and the OrderedDict
carries _metadata (pickled with BUILD) - for a net of Conv2d + BatchNorm2d (trained a few steps,
so running stats and num_batches_tracked, an int64 scalar, are non-trivial) + ConvTranspose2d,
plus extra tensors: f16 (with inf, -0, subnormals, NaN), bf16, f64 (values that round), int64
(values above 2^24 that round), int32, int16, int8, uint8, bool, empty, a 0-d float, a
transposed view, an offset non-contiguous view (base[2:, 1:4]) and an expanded (stride 0) view
sharing storage with their base, an nn.Parameter, a name without "module.", and a non-tensor
value (ignored by the reader).

golden.txt has one line per expected tensor, in the order the reader must list them:
    <fixture file> <name after stripping "module."> <ndim> <dim>... <offset>
where offset counts float32 values into golden.bin (raw little-endian float32). .npy fixtures
use "-" as the name. Lines starting with '#' are comments. Expected values are torch's .float()
(numpy's astype(float32) for .npy), laid out in C order.
"""
import json
import os
import shutil
import struct
import zipfile
import zlib

import numpy as np
import torch
from torch import nn

OUT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "tests", "data", "ckpt")


class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.conv = nn.Conv2d(3, 4, 3, padding=1)
        self.bn = nn.BatchNorm2d(4)
        self.up = nn.ConvTranspose2d(4, 2, 4, stride=2, padding=1)

    def forward(self, x):
        return self.up(torch.relu(self.bn(self.conv(x))))


def build():
    torch.manual_seed(1234)
    net = Net()
    opt = torch.optim.Adam(net.parameters(), lr=1e-3)
    net.train()
    for _ in range(3):  # BN running stats move; num_batches_tracked becomes 3
        x = torch.randn(2, 3, 6, 6)
        loss = net(x).pow(2).mean()
        opt.zero_grad()
        loss.backward()
        opt.step()
    sd = nn.DataParallel(net).state_dict()  # "module." names, OrderedDict with _metadata

    f16 = torch.randn(3, 5).half()
    f16.view(-1)[:6] = torch.tensor([float("inf"), float("-inf"), -0.0, 6e-8, 65504.0, 3e-5],
                                    dtype=torch.float16)
    f16.view(-1)[6] = float("nan")
    sd["module.extra.f16"] = f16
    sd["module.extra.bf16"] = (torch.randn(2, 3, 4) * 100).bfloat16()
    f64 = torch.randn(7, dtype=torch.float64) / 3
    f64[0] = 1e300  # overflows float32 -> inf
    f64[1] = 1e-310  # underflows to 0
    f64[2] = float("nan")
    sd["module.extra.f64"] = f64
    sd["module.extra.i64"] = torch.tensor([0, -1, 2**24 + 1, -(2**40) - 3, 2**62 + 12345, 7],
                                          dtype=torch.int64)
    sd["module.extra.i32"] = torch.randint(-100000, 100000, (4, 4), dtype=torch.int32)
    sd["module.extra.i16"] = torch.tensor([-32768, -1, 0, 1, 32767], dtype=torch.int16)
    sd["module.extra.i8"] = torch.tensor([[-128, -5], [0, 127]], dtype=torch.int8)
    sd["module.extra.u8"] = torch.tensor([0, 1, 128, 255], dtype=torch.uint8)
    sd["module.extra.bool"] = torch.tensor([True, False, True, True, False])
    sd["module.extra.empty"] = torch.zeros(0, 3)
    sd["module.extra.scalar"] = torch.tensor(2.5)
    base = torch.arange(30, dtype=torch.float32).reshape(5, 6) * 0.5 - 3
    sd["module.extra.base"] = base
    sd["module.extra.base_t"] = base.t()
    sd["module.extra.base_view"] = base[2:, 1:4]
    sd["module.extra.expanded"] = torch.randn(1, 4).expand(3, 4)
    sd["module.extra.param"] = nn.Parameter(torch.randn(2, 2))
    sd["plain.tensor"] = torch.randn(3)
    sd["module.extra.note"] = "not a tensor"

    ckpt = {
        "state_dict": sd,
        "optimizer": opt.state_dict(),
        "global_step": 7,
        "global_epoch": 1,
        "misc": {"neg": -3, "big": 2**40, "huge": 2**70, "f": 1.5, "s": "text", "l": [1, 2.0, None],
                 "t": (True, False)},
    }
    return net, sd, ckpt


def expected(sd):
    """(name, float32 C-order array) for each tensor entry, names with "module." stripped."""
    out = []
    for k, v in sd.items():
        if not isinstance(v, torch.Tensor):
            continue
        name = k[len("module."):] if k.startswith("module.") else k
        out.append((name, v.detach().float().contiguous().numpy().astype("<f4")))
    return out


# ---- ZIP64 writer (independent of zipfile's writer; every field saturated) ----

def write_zip64(path, entries):
    """entries: list of (name, bytes). STORED, data 64-byte aligned via local-extra padding."""
    out = bytearray()
    central = bytearray()
    for name, data in entries:
        nb = name.encode()
        crc = zlib.crc32(data) & 0xFFFFFFFF
        offset = len(out)
        z64_local = struct.pack("<HHQQ", 0x0001, 16, len(data), len(data))
        base = offset + 30 + len(nb) + len(z64_local)
        pad = (-(base + 4)) % 64  # a padding extra block: 4-byte header + pad bytes
        extra = z64_local + struct.pack("<HH", 0xFACE, pad) + b"\0" * pad
        out += struct.pack("<IHHHHHIIIHH", 0x04034B50, 45, 0, 0, 0, 0, crc, 0xFFFFFFFF,
                           0xFFFFFFFF, len(nb), len(extra))
        out += nb + extra
        assert len(out) % 64 == 0
        out += data
        z64_central = struct.pack("<HHQQQ", 0x0001, 24, len(data), len(data), offset)
        central += struct.pack("<IHHHHHHIIIHHHHHII", 0x02014B50, 45, 45, 0, 0, 0, 0, crc,
                               0xFFFFFFFF, 0xFFFFFFFF, len(nb), len(z64_central), 0, 0, 0, 0,
                               0xFFFFFFFF)
        central += nb + z64_central
    cd_offset = len(out)
    out += central
    z64_end = len(out)
    out += struct.pack("<IQHHIIQQQQ", 0x06064B50, 44, 45, 45, 0, 0, len(entries), len(entries),
                       len(central), cd_offset)
    out += struct.pack("<IIQI", 0x07064B50, 0, z64_end, 1)
    out += struct.pack("<IHHHHIIH", 0x06054B50, 0xFFFF, 0xFFFF, 0xFFFF, 0xFFFF, 0xFFFFFFFF,
                       0xFFFFFFFF, 0)
    with open(path, "wb") as f:
        f.write(out)


# ---- safetensors writer (formats.md §4) ----

ST_DTYPES = {torch.float32: "F32", torch.float16: "F16", torch.bfloat16: "BF16",
             torch.float64: "F64", torch.int64: "I64", torch.int32: "I32", torch.int16: "I16",
             torch.int8: "I8", torch.uint8: "U8", torch.bool: "BOOL"}


def tensor_bytes(t):
    t = t.detach().contiguous()
    if t.dtype == torch.bfloat16:
        return t.view(torch.int16).numpy().astype("<i2").tobytes()
    a = t.numpy()
    return a.astype(a.dtype.newbyteorder("<")).tobytes()


def write_safetensors(path, tensors, metadata):
    order = sorted(tensors, key=lambda kv: (-kv[1].element_size(), kv[0]))
    header, blobs, pos = {}, [], 0
    for name, t in order:
        b = tensor_bytes(t)
        header[name] = {"dtype": ST_DTYPES[t.dtype], "shape": list(t.shape),
                        "data_offsets": [pos, pos + len(b)]}
        blobs.append(b)
        pos += len(b)
    header["__metadata__"] = metadata
    js = json.dumps(header, separators=(",", ":")).encode()
    js += b" " * ((-len(js)) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(js)) + js + b"".join(blobs))


def main():
    if os.path.isdir(OUT):
        shutil.rmtree(OUT)
    os.makedirs(OUT)
    net, sd, ckpt = build()
    golden = []  # (file, name, array)

    torch_files = [("wav2lip_zip.pth", True, 2), ("wav2lip_legacy.pth", False, 2),
                   ("wav2lip_zip_p4.pth", True, 4), ("wav2lip_legacy_p4.pth", False, 4)]
    exp = expected(sd)
    for fname, zipfmt, proto in torch_files:
        path = os.path.join(OUT, fname)
        torch.save(ckpt, path, _use_new_zipfile_serialization=zipfmt, pickle_protocol=proto)
        golden += [(fname, n, a) for n, a in exp]

    # ZIP64 re-pack of the zip checkpoint, checked with torch.load.
    with zipfile.ZipFile(os.path.join(OUT, "wav2lip_zip.pth")) as z:
        entries = [(i.filename, z.read(i.filename)) for i in z.infolist()]
    write_zip64(os.path.join(OUT, "zip64.pth"), entries)
    golden += [("zip64.pth", n, a) for n, a in exp]

    flat = net.state_dict()
    torch.save(flat, os.path.join(OUT, "flat_sd.pth"))
    golden += [("flat_sd.pth", n, a) for n, a in expected(flat)]

    # safetensors: contiguous tensors only (the format has no strides).
    st = [(k, v) for k, v in sd.items()
          if isinstance(v, torch.Tensor) and v.is_contiguous() and v.storage_offset() == 0
          and v.numel() == v.storage().size()]
    write_safetensors(os.path.join(OUT, "tensors.safetensors"), st,
                      {"format": "pt", "note": "facecast fixture \u00e9"})
    # Header order (the reader keeps it): the writer's order, metadata last.
    for k, v in sorted(st, key=lambda kv: (-kv[1].element_size(), kv[0])):
        name = k[len("module."):] if k.startswith("module.") else k
        golden.append(("tensors.safetensors", name, v.detach().float().contiguous().numpy()))

    # .npy files.
    rng = np.random.default_rng(7)
    npys = [
        ("npy_f4.npy", rng.standard_normal((3, 4)).astype("<f4"), None),
        ("npy_f4_1d.npy", rng.standard_normal(5).astype("<f4"), None),
        ("npy_4d.npy", rng.standard_normal((2, 3, 2, 2)).astype("<f4"), None),
        ("npy_0d.npy", np.array(1.25, dtype="<f4"), None),
        ("npy_empty.npy", np.zeros((0, 3), dtype="<f4"), None),
        ("npy_f8_fortran.npy", np.asfortranarray(rng.standard_normal((3, 5))), None),
        ("npy_f2.npy", np.array([1.5, -0.0, np.inf, 6e-8, 65504, 0.1, -2], dtype="<f2"), None),
        ("npy_f4_be.npy", rng.standard_normal((2, 3)).astype(">f4"), None),
        ("npy_f8_be.npy", rng.standard_normal(4).astype(">f8"), None),
        ("npy_i8.npy", np.array([0, -1, 2**24 + 1, -(2**40), 2**62 + 9], dtype="<i8"), None),
        ("npy_i4.npy", np.array([[5, -7], [2**31 - 1, -(2**31)]], dtype="<i4"), None),
        ("npy_i2_fortran.npy", np.asfortranarray(np.arange(24, dtype="<i2").reshape(2, 3, 4) - 9),
         None),
        ("npy_i1.npy", np.array([-128, 0, 127], dtype="i1"), None),
        ("npy_u1.npy", np.arange(8, dtype="u1").reshape(2, 2, 2) * 37, None),
        ("npy_u2.npy", np.array([0, 65535, 300], dtype="<u2"), None),
        ("npy_u8.npy", np.array([0, 2**64 - 1, 2**24 + 1], dtype="<u8"), None),
        ("npy_b1.npy", np.array([True, False, True, False, False]), None),
        ("npy_v2.npy", rng.standard_normal((2, 3)).astype("<f4"), (2, 0)),
        ("npy_v3.npy", np.asfortranarray(rng.standard_normal((3, 2))).astype("<f4"), (3, 0)),
    ]
    for fname, arr, version in npys:
        path = os.path.join(OUT, fname)
        if version is None:
            np.save(path, arr)
        else:
            with open(path, "wb") as f:
                np.lib.format.write_array(f, arr, version=version)
        back = np.load(path)
        assert back.dtype == arr.dtype and back.shape == arr.shape
        golden.append((fname, "-", arr.astype("<f4")))

    # Goldens, and a self-check that torch reads back what the goldens say.
    blob, lines, off = bytearray(), [], 0
    for fname, name, a in golden:
        a = np.asarray(a, dtype="<f4").copy(order="C")  # (ascontiguousarray would make 0-d 1-d)
        lines.append(" ".join([fname, name, str(a.ndim)] + [str(d) for d in a.shape] + [str(off)]))
        blob += a.tobytes()
        off += a.size
    with open(os.path.join(OUT, "golden.bin"), "wb") as f:
        f.write(blob)
    with open(os.path.join(OUT, "golden.txt"), "w") as f:
        f.write("# file name ndim dims... offset(floats into golden.bin); see "
                "tools/gen_ckpt_fixtures.py\n")
        f.write("\n".join(lines) + "\n")

    for fname, _, _ in torch_files + [("zip64.pth", 0, 0)]:
        back = torch.load(os.path.join(OUT, fname))
        want = dict(exp)
        got = {(k[7:] if k.startswith("module.") else k): v for k, v in back["state_dict"].items()
               if isinstance(v, torch.Tensor)}
        assert list(got) == [n for n, _ in exp], fname
        for k, v in got.items():
            assert v.detach().float().contiguous().numpy().tobytes() == want[k].tobytes(), (fname, k)
    total = 0
    for f in sorted(os.listdir(OUT)):
        size = os.path.getsize(os.path.join(OUT, f))
        total += size
        print("%-24s %7d" % (f, size))
    print("%-24s %7d bytes, %d golden tensors" % ("total", total, len(golden)))


if __name__ == "__main__":
    main()
