#!/usr/bin/python3
"""Golden vectors for facecast's C Wav2Lip on the 256x256 variant ("wav2lip256", LiveTalking's
wav2lip_v2 network), from the PyTorch reference tools/wav2lip_ref.py (Wav2Lip(size=256)).

Design note
-----------
The 96 fixture (tools/gen_wav2lip_golden.py) stores its inputs and float32 outputs whole; at
256x256 that would be 1.5 MB of faces and 0.8 MB of output per sample, so this set is built to
stay small (about 0.3 MB) while still pinning every layer:
  * the inputs are not stored but computed from integer formulas that tests/test_wav2lip.c
    repeats exactly (fixture_inputs below): RGB face crops as bytes, the network input made
    from them as fc_w2l_infer_u8 makes it (BGR/255, the same crop as the reference and, rows
    128.. zeroed, as the masked half, as LiveTalking feeds it), and mel values k/8 - 4 (exact in
    float32);
  * out_sub.npy holds the output of sample 0 on the odd rows and columns only (1, 3, .., 255:
    the last row and column included), quantised to uint16 (out * 65535, rounded; <= 7.7e-6
    off, well inside the test's 1e-4); the whole output is compared between the C devices;
  * act_<tap>.npy: sample 0's small intermediate activations (float32, [1,C,H,W]) - the audio
    embedding, the face encoder from 16x16 down (face_f4..face_f7) and the decoder's first
    four blocks - so a wrong level shows by name;
  * the network is width 64 (every internal channel count c -> max(2, c // 64): 14,979
    parameters, the full 55-conv topology), in both torch formats as LiveTalking's file is
    stored: {"state_dict": {"module." + key: tensor}, "optimizer", "global_step",
    "global_epoch"}.

Written to tests/data/wav2lip256/: ckpt_zip.pth, ckpt_legacy.pth, mel.npy ([2,1,80,16],
stored too since it is small), out_sub.npy, act_*.npy, meta.json. Rerunnable: everything
derives from fixed seeds, and a checkpoint whose content is unchanged is kept as it is (the
legacy format's bytes differ on every save).

Full-width set for the GPU machine (not committed):
    gen_wav2lip256_golden.py --width 1 --batch 4 --out DIR
writes DIR/ckpt_zip.pth (214 MB), mel.npy, faces.npy [B,6,256,256] float32 and out.npy
[B,3,256,256] float32 (the float64 forward), as `facecast wav2lip infer` takes them.

Needs torch and numpy (Debian's python3-torch, python3-numpy; re-executes under /usr/bin/python3
when the first python3 on PATH lacks them).
"""

import argparse
import json
import os
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import wav2lip_ref as W  # noqa: E402  (re-executes under /usr/bin/python3 if torch is missing)
import gen_wav2lip_golden as G  # noqa: E402
import numpy as np  # noqa: E402
import torch  # noqa: E402

REPO = os.path.dirname(HERE)
DEFAULT_OUT = os.path.join(REPO, "tests", "data", "wav2lip256")
S = 256
WIDTH = 64
BATCH = 2
TAPS = ["audio_emb", "face_f4", "face_f5", "face_f6", "face_f7"] + [f"dec{i}_out" for i in range(4)]


def fixture_crops(batch, size=S):
    """RGB crops [B,S,S,3] uint8: a slow ramp per channel plus 4 bits of hashed noise.
    tests/test_wav2lip.c (fixture_crop) computes the same bytes."""
    n, y, x, c = np.meshgrid(np.arange(batch), np.arange(size), np.arange(size), np.arange(3),
                             indexing="ij")
    h = ((x * 73 + y * 151 + c * 199 + n * 37) * 2654435761) & 0xFFFFFFFF
    v = (x // 2 + y // 3 + 70 * c + 23 * n + (h >> 28)) & 255
    return v.astype(np.uint8)


def fixture_mel(batch):
    """mel [B,1,80,16] float32, values k/8 - 4 with k in 0..64 (exact).
    tests/test_wav2lip.c (fixture_mel) computes the same values."""
    n, y, x = np.meshgrid(np.arange(batch), np.arange(80), np.arange(16), indexing="ij")
    k = (y * y + 3 * x * y + 5 * x + 11 * n) % 65
    return (k.astype(np.float32) / np.float32(8) - np.float32(4)).reshape(batch, 1, 80, 16)


def faces_from_crops(crops):
    """The network input fc_w2l_infer_u8 builds: [B,6,S,S] float32, channels 3..5 = the crop as
    BGR/255, channels 0..2 = the same with rows S/2.. zero."""
    bgr = crops[..., ::-1].astype(np.float32) / np.float32(255)  # [B,S,S,3] BGR
    ref = np.ascontiguousarray(bgr.transpose(0, 3, 1, 2))
    masked = ref.copy()
    masked[:, :, crops.shape[1] // 2:, :] = 0
    return np.concatenate([masked, ref], axis=1)


def fixture_inputs(batch):
    return fixture_mel(batch), faces_from_crops(fixture_crops(batch))


def generate_ci(out, seed):
    os.makedirs(out, exist_ok=True)
    for fn in os.listdir(out):
        if fn.startswith("act_") and fn.endswith(".npy"):
            os.remove(os.path.join(out, fn))
    model = W.build(WIDTH, seed, size=S)
    G.save_if_changed(W.save_checkpoint_legacy, model, os.path.join(out, "ckpt_legacy.pth"))
    G.save_if_changed(W.save_checkpoint_zip, model, os.path.join(out, "ckpt_zip.pth"))
    mel, faces = fixture_inputs(BATCH)
    taps = {}
    out64 = G.forward64(model, torch.from_numpy(mel), torch.from_numpy(faces), taps).numpy()
    np.save(os.path.join(out, "mel.npy"), mel)
    sub = out64[0:1, :, 1::2, 1::2]
    np.save(os.path.join(out, "out_sub.npy"), np.round(sub * 65535).astype(np.uint16))
    for name in TAPS:
        np.save(os.path.join(out, f"act_{name}.npy"), taps[name][0:1].float().numpy())
    with torch.no_grad():
        o32 = model.eval()(torch.from_numpy(mel), torch.from_numpy(faces)).double().numpy()
    mel_sens = float(np.abs(G.forward64(model, torch.from_numpy(mel[::-1].copy()),
                                        torch.from_numpy(faces)).numpy() - out64).max())
    meta = {
        "variant": "wav2lip256", "size": S, "width": WIDTH, "weight_seed": seed, "batch": BATCH,
        "params": model.num_params(), "macs_per_frame": W.count_flops(model)[0],
        "state_dict_tensors": len(model.state_dict()), "torch": torch.__version__,
        "taps": {n: list(taps[n][0:1].shape) for n in TAPS},
        "out_stats": G.stats(out64), "out_sub": "sample 0, rows and columns 1,3,..,255, uint16 = "
                                              "round(out * 65535)",
        "max_abs_torch_f32_vs_f64": float(np.abs(o32 - out64).max()),
        "max_abs_out_change_when_mel_swapped": mel_sens,
        "inputs": "tools/gen_wav2lip256_golden.py fixture_inputs (not stored but mel.npy)",
    }
    with open(os.path.join(out, "meta.json"), "w") as f:
        json.dump(meta, f, indent=1)
        f.write("\n")
    doc = __doc__.split("\nFull-width set")[0].strip()
    with open(os.path.join(out, "README.md"), "w") as f:
        f.write("# wav2lip256 golden vectors\n\nGenerated by `tools/gen_wav2lip256_golden.py` from "
                "the PyTorch reference `tools/wav2lip_ref.py` (`Wav2Lip(size=256)`; its header has "
                "the layer table). Do not edit; rerun the generator.\n\n```\n" + doc + "\n```\n\n")
        s = meta["out_stats"]
        f.write(f"This set: width {WIDTH}, batch {BATCH}, weight seed {seed}, {meta['params']:,} "
                f"parameters, {meta['macs_per_frame']:,} MACs/frame, torch {meta['torch']}; out min "
                f"{s['min']:.4f}, max {s['max']:.4f}, mean {s['mean']:.4f}; PyTorch float32 vs the "
                f"float64 golden {meta['max_abs_torch_f32_vs_f64']:.2e}.\n")
    return meta


def generate_full(out, seed, batch):
    """The full-width set for the GPU machine's parity run (not committed)."""
    os.makedirs(out, exist_ok=True)
    model = W.build(1, seed, size=S, calib_device="cuda" if torch.cuda.is_available() else None)
    W.save_checkpoint_zip(model, os.path.join(out, "ckpt_zip.pth"))
    mel, faces = W.random_inputs(batch, 1, size=S)
    mel, faces = mel.float(), faces.float()
    out64 = G.forward64(model, mel, faces)
    np.save(os.path.join(out, "mel.npy"), mel.numpy())
    np.save(os.path.join(out, "faces.npy"), faces.numpy())
    np.save(os.path.join(out, "out.npy"), out64.float().numpy())
    return {"width": 1, "batch": batch, "params": model.num_params(), "out_stats": G.stats(out64.numpy())}


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--width", type=int, default=WIDTH)
    ap.add_argument("--batch", type=int, default=4, help="full-width set only")
    ap.add_argument("--seed", type=int, default=0, help="weight seed")
    ap.add_argument("--out", default=None, help=f"output directory (default {DEFAULT_OUT})")
    a = ap.parse_args()
    if a.width == WIDTH and a.out is None:
        meta = generate_ci(DEFAULT_OUT, a.seed)
        out = DEFAULT_OUT
    elif a.width == 1 and a.out:
        meta = generate_full(a.out, a.seed, a.batch)
        out = a.out
    else:
        ap.error(f"either no options (the width-{WIDTH} CI set) or --width 1 --out DIR")
    print(json.dumps(meta, indent=1))
    G.list_files(out)


if __name__ == "__main__":
    main()
