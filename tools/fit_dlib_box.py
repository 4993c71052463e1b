#!/usr/bin/env python3
"""Fits the Haar-to-HOG face box mapping used by fc_dlib_box_from_haar (src/avatar/landmarks.c).

Input: the pairs file written by tools/dlib_golden.cpp `pairs` (one line per face: image,
Haar box x y w h, dlib HOG box l t r b with inclusive corners; see tools/haar_augment.c).

Model, relative to the Haar box (x, y, w; Haar boxes are square):
    side      = k  * w            (HOG width, r - l + 1)
    centre x  = x + cx * w        ((l + r) / 2)
    centre y  = y + cy * w        ((t + b) / 2)
Each parameter is the least-squares fit of the residuals measured in units of the Haar side,
so every face weighs the same whatever its size. Prints the constants and the residual of the
mapping as implemented in C (whole-pixel corners).

Usage: python3 tools/fit_dlib_box.py tests/data/landmarks/haar_hog_pairs.txt
"""
import math
import sys


def mapped(x, y, w, k, cx, cy):
    """The box as the C code computes it (floor(v + 0.5) rounding, inclusive corners)."""
    side = math.floor(k * w + 0.5)
    left = math.floor(x + cx * w - (side - 1) / 2 + 0.5)
    top = math.floor(y + cy * w - (side - 1) / 2 + 0.5)
    return left, top, left + side - 1, top + side - 1


def main(path):
    rows, images = [], set()
    with open(path) as f:
        for line in f:
            if line.startswith("#") or not line.strip():
                continue
            fields = line.split()
            images.add(fields[0])
            rows.append([float(t) for t in fields[1:]])
    n = len(rows)
    # Least squares of a constant on normalised residuals is their mean.
    k = sum((r - l + 1) / w for x, y, w, h, l, t, r, b in rows) / n
    cx = sum(((l + r) / 2 - x) / w for x, y, w, h, l, t, r, b in rows) / n
    cy = sum(((t + b) / 2 - y) / w for x, y, w, h, l, t, r, b in rows) / n

    def rms(vals):
        return math.sqrt(sum(v * v for v in vals) / len(vals))

    side_res = [(r - l + 1) / w - k for x, y, w, h, l, t, r, b in rows]
    cx_res = [((l + r) / 2 - x) / w - cx for x, y, w, h, l, t, r, b in rows]
    cy_res = [((t + b) / 2 - y) / w - cy for x, y, w, h, l, t, r, b in rows]
    corner_px, corner_rel = [], []
    for x, y, w, h, l, t, r, b in rows:
        ml, mt, mr, mb = mapped(x, y, w, k, cx, cy)
        e = (abs(ml - l) + abs(mt - t) + abs(mr - r) + abs(mb - b)) / 4
        corner_px.append(e)
        corner_rel.append(e / (r - l + 1))
    print(f"{n} pairs from {len(images)} images")
    print(f"k  = {k:.4f}  (rms residual {rms(side_res):.4f} of the Haar side)")
    print(f"cx = {cx:.4f}  (rms residual {rms(cx_res):.4f})")
    print(f"cy = {cy:.4f}  (rms residual {rms(cy_res):.4f})")
    print(f"corners as the C code rounds them: mean {sum(corner_px) / n:.2f} px, "
          f"{100 * sum(corner_rel) / n:.1f}% of the HOG side (max {100 * max(corner_rel):.1f}%)")


if __name__ == "__main__":
    if len(sys.argv) != 2:
        sys.exit(__doc__)
    main(sys.argv[1])
