#!/usr/bin/python3
"""wav2lip256 on the GPU machine: a full-width random checkpoint, parity of facecast's "cuda"
backend with PyTorch, and PyTorch's own timing beside `facecast bench model`.

Design note
-----------
No trained wav2lip256 weights exist here, and none are needed to compare two implementations
of the same network: both load the same file. The PyTorch network is tools/wav2lip_ref.py's
Wav2Lip(size=256), written for facecast from the layer table of LiveTalking's wav2lip_v2 (no
code taken from it); its state dict has exactly LiveTalking's key names and shapes, so the file
this script writes has the same layout as LiveTalking's models/wav2lip.pth: {"state_dict":
{"module." + key: tensor}, ...}.

    bench_wav2lip256.py make OUT.pth [--seed N]
        full-width (53.6 M parameters, 214 MB) random weights with calibrated BatchNorm
        statistics (wav2lip_ref.randomize_; the calibration forward on the GPU when there is
        one), zip format.
    bench_wav2lip256.py parity --checkpoint F --facecast BIN [--batch 4] [--dir DIR]
        random inputs (wav2lip_ref.random_inputs at 256) -> PyTorch on CUDA in fp32 (TF32 off)
        -> DIR/torch_out.npy; then `BIN wav2lip infer --device cuda --dtype fp32|fp16` on the
        same tensors. Passes when max|facecast - torch| <= 1e-3 (fp32) and <= 2e-2 (fp16).
        Exit 1 on a failure. One JSON line per dtype.
    bench_wav2lip256.py bench --checkpoint F [--batches 1,16,256] [--dtypes fp16,fp32]
                              [--compile] [--seconds S]
        PyTorch timing of the model alone on tensors already on the GPU (as `facecast bench
        model` times its "model" column): eager (channels_last), and with --compile also
        torch.compile(mode="reduce-overhead", CUDA graphs). One JSON line per
        (mode, dtype, batch): ms_per_batch, frames_per_s, peak_mib.

scripts/w2l-cuda-device.sh v256 runs all three with facecast's side in one device call.
W2L_REF_SIZE=96 makes every command work on the original 96x96 network instead (its checkpoints,
e.g. tools/gen_wav2lip_golden.py --width 1's): scripts/serve-device.sh kernel times it so.
Needs torch (the GPU machine's python3) and numpy.
"""

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import wav2lip_ref as W  # noqa: E402
import numpy as np  # noqa: E402
import torch  # noqa: E402

S = int(os.environ.get("W2L_REF_SIZE", "256"))  # 96: the original network (bench only)
TOL = {"fp32": 1e-3, "fp16": 2e-2}


def cmd_make(a):
    t = time.time()
    model = W.build(1, a.seed, size=S, calib_device="cuda" if torch.cuda.is_available() else None)
    W.save_checkpoint_zip(model, a.out)
    print(json.dumps({"made": a.out, "bytes": os.path.getsize(a.out), "params": model.num_params(),
                      "seconds": round(time.time() - t, 1)}))


def load(path, dev, dtype=torch.float32):
    m = W.load_checkpoint(path, 1, size=S)
    assert m.size == S, "not a wav2lip256 checkpoint"
    return m.to(dev, dtype).eval()


def cmd_parity(a):
    a.dir = a.dir or tempfile.mkdtemp(prefix="w2l256_parity_")
    os.makedirs(a.dir, exist_ok=True)
    torch.backends.cudnn.allow_tf32 = False
    torch.backends.cuda.matmul.allow_tf32 = False
    dev = torch.device("cuda")
    mel, faces = W.random_inputs(a.batch, 1, size=S)
    mel, faces = mel.float(), faces.float()
    model = load(a.checkpoint, dev)
    with torch.no_grad():
        ref = model(mel.to(dev), faces.to(dev)).float().cpu().numpy()
    p = {k: os.path.join(a.dir, k + ".npy") for k in ("mel", "faces", "torch_out", "fc_out")}
    np.save(p["mel"], mel.numpy())
    np.save(p["faces"], faces.numpy())
    np.save(p["torch_out"], ref)
    ok = True
    for dt in ("fp32", "fp16"):
        r = subprocess.run([a.facecast, "wav2lip", "infer", "--checkpoint", a.checkpoint,
                            "--mel", p["mel"], "--faces", p["faces"], "--out", p["fc_out"],
                            "--device", "cuda", "--dtype", dt, "--repeat", "3"],
                           capture_output=True, text=True)
        if r.returncode != 0:
            print(json.dumps({"parity": dt, "ok": False, "error": r.stderr.strip()}))
            ok = False
            continue
        d = np.abs(np.load(p["fc_out"]) - ref)
        good = bool(d.max() <= TOL[dt])
        ok &= good
        print(json.dumps({"parity": dt, "batch": a.batch, "max_abs_vs_torch_cuda_fp32": float(d.max()),
                          "mean_abs": float(d.mean()), "tol": TOL[dt], "ok": good,
                          "facecast": r.stdout.strip()}))
    sys.exit(0 if ok else 1)


def time_model(fn, mel, faces, seconds):
    for _ in range(3):  # warm-up (and compilation / graph capture)
        fn(mel, faces)
    torch.cuda.synchronize()
    n, t0 = 0, time.perf_counter()
    while True:
        fn(mel, faces)
        n += 1
        if n >= 3 and n % 2 == 0:
            torch.cuda.synchronize()
            if time.perf_counter() - t0 >= seconds:
                break
    return (time.perf_counter() - t0) * 1000 / n


def cmd_bench(a):
    dev = torch.device("cuda")
    torch.backends.cudnn.benchmark = True
    batches = [int(b) for b in a.batches.split(",")]
    for dt in a.dtypes.split(","):
        tdt = {"fp16": torch.float16, "fp32": torch.float32, "bf16": torch.bfloat16}[dt]
        model = load(a.checkpoint, dev, tdt).to(memory_format=torch.channels_last)
        modes = [("eager", model)]
        if a.compile:
            modes.append(("compile", torch.compile(model, mode="reduce-overhead")))
        for mode, net in modes:
            for b in batches:
                mel = torch.randn(b, 1, 80, 16, device=dev, dtype=tdt).clamp(-4, 4)
                faces = torch.rand(b, 6, S, S, device=dev, dtype=tdt).contiguous(
                    memory_format=torch.channels_last)
                torch.cuda.reset_peak_memory_stats()
                try:
                    with torch.inference_mode():
                        ms = time_model(lambda x, y: net(x, y), mel, faces, a.seconds)
                except torch.cuda.OutOfMemoryError:
                    print(json.dumps({"bench": "torch", "mode": mode, "dtype": dt, "batch": b,
                                      "error": "out of memory"}))
                    torch.cuda.empty_cache()
                    continue
                print(json.dumps({"bench": "torch", "mode": mode, "face": S, "dtype": dt, "batch": b,
                                  "ms_per_batch": round(ms, 4), "frames_per_s": round(b * 1000 / ms, 1),
                                  "peak_mib": round(torch.cuda.max_memory_allocated() / 2**20, 1),
                                  "torch": torch.__version__}), flush=True)
                del mel, faces
        del model, modes
        torch.cuda.empty_cache()


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    sub = ap.add_subparsers(dest="cmd", required=True)
    p = sub.add_parser("make")
    p.add_argument("out")
    p.add_argument("--seed", type=int, default=0)
    p = sub.add_parser("parity")
    p.add_argument("--checkpoint", required=True)
    p.add_argument("--facecast", required=True)
    p.add_argument("--batch", type=int, default=4)
    p.add_argument("--dir", default=None, help="where the tensors go (default: a new temporary dir)")
    p = sub.add_parser("bench")
    p.add_argument("--checkpoint", required=True)
    p.add_argument("--batches", default="1,16,256")
    p.add_argument("--dtypes", default="fp16,fp32")
    p.add_argument("--compile", action="store_true")
    p.add_argument("--seconds", type=float, default=1.0)
    a = ap.parse_args()
    {"make": cmd_make, "parity": cmd_parity, "bench": cmd_bench}[a.cmd](a)


if __name__ == "__main__":
    main()
