#!/usr/bin/python3
"""A full-size Wav2Lip checkpoint for serving benchmarks whose output looks like a face.

No trained weights exist here, and a network with random weights paints high-frequency noise
over the mouth, which an H.264 encoder spends two to three times the bits and much more time
on than on a real Wav2Lip mouth (a smooth, slightly blurred face). That would measure the
encoder on content no user sends. This checkpoint keeps the full network and all its work
(random, calibrated weights everywhere, as tools/wav2lip_ref.build makes them) but routes the
reference face through: face_encoder_blocks.0 copies the reference crop's three channels into
its first three outputs (identity BatchNorm; the crop is >= 0, so the ReLU passes it), and
output_block maps those skip channels back to the picture (sigmoid(6 x - 3), a mild S-curve)
plus 3 % of the decoder's random, audio-dependent activations, so the mouth region changes
from frame to frame with the sound like a generated one does.

    make_bench_wav2lip.py OUT.pth [--seed N] [--size 96|256]

--size 256 makes the same for wav2lip256 (LiveTalking's 256x256 network; the same blocks at
either end, so the same routing applies).
"""
import argparse
import os
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import wav2lip_ref as W  # noqa: E402
import torch  # noqa: E402

DECODER_SHARE = 0.03
GAIN = 6.0


def identity_bn(bn, channels):
    with torch.no_grad():
        bn.weight[channels] = 1.0
        bn.bias[channels] = 0.0
        bn.running_mean[channels] = 0.0
        bn.running_var[channels] = 1.0 - bn.eps  # (x - 0) / sqrt(var + eps) = x


def make(seed, size=96):
    model = W.build(1, seed, size=size,
                    calib_device="cuda" if size == 256 and torch.cuda.is_available() else None)
    rgb = [0, 1, 2]
    with torch.no_grad():
        first = model.face_encoder_blocks[0][0]
        conv = first.conv_block[0]
        k = conv.kernel_size[0] // 2
        conv.weight[rgb] = 0.0
        conv.bias[rgb] = 0.0
        for c in rgb:
            conv.weight[c, 3 + c, k, k] = 1.0  # input channels 3..5: the reference crop
        identity_bn(first.conv_block[1], rgb)

        out0 = model.output_block[0]
        conv = out0.conv_block[0]
        skip0 = conv.in_channels - first.conv_block[0].out_channels  # face_f0 comes last
        conv.weight[rgb] *= DECODER_SHARE
        conv.weight[rgb, skip0:] = 0.0
        conv.bias[rgb] = 0.0
        for c in rgb:
            conv.weight[c, skip0 + c, 1, 1] = 1.0
        conv.weight[3:] = 0.0  # the other channels do not reach the output
        conv.bias[3:] = 0.0
        identity_bn(out0.conv_block[1], rgb)

        last = model.output_block[1]
        last.weight.zero_()
        last.bias.fill_(-GAIN / 2)
        for c in rgb:
            last.weight[c, c, 0, 0] = GAIN
    return model


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("out")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--size", type=int, default=96, choices=W.SIZES)
    a = ap.parse_args()
    model = make(a.seed, a.size)
    W.save_checkpoint_zip(model, a.out)
    with torch.no_grad():  # a look at what it makes: a flat grey face stays grey
        face = torch.full((1, 6, a.size, a.size), 0.5)
        out = model(torch.zeros(1, 1, 80, 16), face)
    print(f"{a.out}: output of a grey face: mean {out.mean().item():.3f}, "
          f"std {out.std().item():.4f}")


if __name__ == "__main__":
    main()
