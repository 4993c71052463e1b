#!/usr/bin/env python3
"""Writes a LiveTalking coords.pkl for the tests (tests/test_ltimport.c): a list of
(y1, y2, x1, x2) boxes pickled by Python's pickle module.

usage: lt_coords.py OUT PROTOCOL KIND Y1,Y2,X1,X2 ...
KIND: tuples (genavatar.py today: Python ints), lists, numpy (2024's genavatar: numpy int64
scalars from an array's rows), dict (not a list: must be refused), triples (3 values a box).

numpy: with numpy installed, its own scalars; without, stand-ins that pickle to the same bytes
(numpy.core.multiarray.scalar(numpy.dtype('i8') + its state, 8 little-endian bytes)); where
numpy is installed the two are compared, so the stand-in cannot drift from what numpy writes."""
import pickle
import struct
import sys
import types


def stand_in_int64():
    """numpy.int64 as numpy 1.x pickles it, without numpy (modules registered for pickle's
    lookup only, in this process)."""
    np, core, ma = (types.ModuleType(n) for n in ("numpy", "numpy.core", "numpy.core.multiarray"))

    class dtype:
        def __init__(self, code):
            self.code = code

        def __reduce__(self):
            return (dtype, (self.code, False, True), (3, "<", None, None, None, -1, -1, 0))

    def scalar(dt, data):
        raise RuntimeError("stand-in only pickles")

    dtype.__module__, dtype.__qualname__ = "numpy", "dtype"
    scalar.__module__, scalar.__qualname__ = "numpy.core.multiarray", "scalar"
    np.dtype, np.core, core.multiarray, ma.scalar = dtype, core, ma, scalar
    saved = {n: sys.modules.get(n) for n in ("numpy", "numpy.core", "numpy.core.multiarray")}
    sys.modules.update({"numpy": np, "numpy.core": core, "numpy.core.multiarray": ma})
    i8 = dtype("i8")

    class int64:
        def __init__(self, v):
            self.v = v

        def __reduce__(self):
            return (scalar, (i8, struct.pack("<q", self.v)))

    return int64, saved


def numpy_boxes(boxes, protocol):
    try:
        import numpy
    except ImportError:
        numpy = None
    if numpy is not None and numpy.int64(0).__reduce__()[0].__module__ != "numpy.core.multiarray":
        numpy = None  # numpy 2 writes numpy._core: the reader takes both, the stand-in is 1.x's
    int64, saved = stand_in_int64()
    stand_in = pickle.dumps([tuple(int64(v) for v in b) for b in boxes], protocol=protocol)
    for n, m in saved.items():
        if m is None:
            sys.modules.pop(n, None)
        else:
            sys.modules[n] = m
    if numpy is None:
        return stand_in
    rows = numpy.array([[b[2], b[0], b[3], b[1]] for b in boxes], dtype=numpy.int64)
    real = pickle.dumps([(y1, y2, x1, x2) for (x1, y1, x2, y2) in rows], protocol=protocol)
    assert real == stand_in, "the numpy stand-in no longer pickles as numpy does"
    return real


def main():
    out, protocol, kind = sys.argv[1], int(sys.argv[2]), sys.argv[3]
    boxes = [tuple(int(v) for v in a.split(",")) for a in sys.argv[4:]]
    if kind == "tuples":
        data = pickle.dumps(boxes, protocol=protocol)
    elif kind == "lists":
        data = pickle.dumps([list(b) for b in boxes], protocol=protocol)
    elif kind == "numpy":
        data = numpy_boxes(boxes, protocol)
    elif kind == "dict":
        data = pickle.dumps({"coords": boxes}, protocol=protocol)
    elif kind == "triples":
        data = pickle.dumps([b[:3] for b in boxes], protocol=protocol)
    else:
        sys.exit(f"lt_coords.py: unknown kind {kind}")
    with open(out, "wb") as f:
        f.write(data)


if __name__ == "__main__":
    main()
