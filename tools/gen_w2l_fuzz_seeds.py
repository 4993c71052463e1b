#!/usr/bin/python3
"""Seeds for the Wav2Lip loader's fuzz target (tests/fuzz/fuzz_w2l.c):
tests/fuzz/corpus/w2l/.

Design note
-----------
The test fixtures (tests/data/wav2lip, tests/data/wav2lip256) are 0.13-0.7 MB each: far past
what a fuzzer mutates well, and the CI's 8-second run must load its corpus in seconds. So the
seeds here are the same two topologies (tools/wav2lip_ref.py, Wav2Lip(size=96) and
Wav2Lip(size=256)) at width 1024: every internal channel count becomes 2 (max(2, c // 1024)),
the full layer list stays, and what is left is mostly key names. Both variants are written in
the three formats facecast reads:
  w2l96_legacy.pth, w2l256_legacy.pth    torch.save without the zip container (the 2020 files)
  w2l96_zip.pth, w2l256_zip.pth          torch.save's zip format, pickle protocol 4 (smaller)
  w2l96.safetensors, w2l256.safetensors  this repository's safetensors writer
                                         (tools/gen_ckpt_fixtures.py), no "module." prefix, F16
                                         weights (the loader converts; halves the data)
The torch files are wrapped as LiveTalking's and the original checkpoints are
({"state_dict": {"module." + key}, ...}, tools/wav2lip_ref.py's checkpoint_dict).

Also tests/data/wav2lip/wide_views.pth, for the loader's sanity bounds (tests/test_wav2lip.c):
the 96 network at twice the real width (every channel count but the 6 face, 1 mel and 3 output
channels doubled: 145 M weights, past the loader's 134 M bound) where every tensor is a
broadcast view (stride 0) of a one-element storage, as torch.save keeps views: 68 KB that
claim 580 MB of weights. A loader must refuse it before reading them.

Rerunnable; the legacy format's bytes change on every save (storage keys are addresses), so
rerun only when the topology changes. Needs torch (Debian's python3-torch).
"""
import os
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import wav2lip_ref as W  # noqa: E402  (re-executes under /usr/bin/python3 if torch is missing)
import gen_ckpt_fixtures as F  # noqa: E402
import torch  # noqa: E402

OUT = os.path.join(os.path.dirname(HERE), "tests", "fuzz", "corpus", "w2l")
WIDTH = 1024


def wide_views(path):
    meta = W.Wav2Lip(1, device="meta").state_dict()

    def wide(n):
        return n if n in (1, 3, 6) else 2 * n

    sd = {}
    for k, v in meta.items():
        if not v.is_floating_point():
            sd["module." + k] = torch.zeros((), dtype=v.dtype)
            continue
        shape = [wide(n) if d < 2 else n for d, n in enumerate(v.shape)]
        sd["module." + k] = torch.ones(1).expand(shape)
    torch.save({"state_dict": sd}, path, _use_new_zipfile_serialization=False)
    print("%-24s %7d bytes, %d weights" % (os.path.basename(path), os.path.getsize(path),
                                           sum(t.numel() for t in sd.values())))


def main():
    os.makedirs(OUT, exist_ok=True)
    for size in (96, 256):
        model = W.build(WIDTH, seed=size, size=size)
        base = os.path.join(OUT, f"w2l{size}")
        torch.save(W.checkpoint_dict(model), base + "_legacy.pth",
                   _use_new_zipfile_serialization=False)
        torch.save(W.checkpoint_dict(model), base + "_zip.pth",
                   _use_new_zipfile_serialization=True, pickle_protocol=4)
        st = [(k, v.half() if v.is_floating_point() else v) for k, v in model.state_dict().items()]
        F.write_safetensors(base + ".safetensors", st, {"format": "pt"})
    for name in sorted(os.listdir(OUT)):
        print("%-24s %7d bytes" % (name, os.path.getsize(os.path.join(OUT, name))))
    wide_views(os.path.join(os.path.dirname(HERE), "tests", "data", "wav2lip", "wide_views.pth"))


if __name__ == "__main__":
    main()
