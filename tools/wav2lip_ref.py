#!/usr/bin/python3
"""PyTorch reference of the Wav2Lip generator (96x96, and the 256x256 "wav2lip256") for facecast's
C port parity tests.

Written from the architecture description in shared/REFERENCE.md ("Wav2Lip data contract" ->
"Network" and the input/output bullets); no code was taken from the Wav2Lip repository.

Also here: randomize_() / build() (seeded weights with calibrated, perturbed BatchNorm
statistics), random_inputs() (synthetic mel windows and masked face pairs), count_flops(),
key_list(), and Wav2Lip-style checkpoint save/load helpers (legacy and zip formats). Test data:
tools/gen_wav2lip_golden.py -> tests/data/wav2lip/. CLI: wav2lip_ref.py [--width W] [--flops].

Contract
--------
forward(audio [B,1,80,16] normalised mel window, face [B,6,96,96] = [masked crop (rows 48..95
of channels 0..2 zero), reference crop], BGR, values uint8/255) -> [B,3,96,96] in (0,1)
(sigmoid). Inference semantics: call .eval() so BatchNorm uses its running statistics.

Block = Conv2d + BatchNorm2d (eps 1e-5) + ReLU; a residual block adds its input to the BN output
before the ReLU:  y = relu(bn(conv(x)) + x).  Transposed block = ConvTranspose2d + BN + ReLU.
Every conv (also the transposed ones and the final 32->3) has a bias.

Face encoder (skips f0..f6, all k3 p1 unless said):
  face_encoder_blocks.0: 6->16 k7 s1 p3                                   f0 16 @96
  face_encoder_blocks.1: 16->32 s2, 2x res32                              f1 32 @48
  face_encoder_blocks.2: 32->64 s2, 3x res64                              f2 64 @24
  face_encoder_blocks.3: 64->128 s2, 2x res128                            f3 128 @12
  face_encoder_blocks.4: 128->256 s2, 2x res256                           f4 256 @6
  face_encoder_blocks.5: 256->512 s2, 1x res512                           f5 512 @3
  face_encoder_blocks.6: 512->512 k3 s1 p0, 512->512 k1 p0                f6 512 @1
Audio encoder (one flat nn.Sequential, indices 0..12), 80x16 input:
  0: 1->32   1,2: res32   3: 32->64 s(3,1)   4,5: res64   6: 64->128 s3   7,8: res128
  9: 128->256 s(3,2)   10: res256   11: 256->512 k3 p0   12: 512->512 k1 p0      -> 512x1x1
  (80x16 -> 80x16 -> 27x16 -> 9x6 -> 3x3 -> 1x1)
Decoder, starting from the audio embedding; after each block the matching face skip is
concatenated along channels, DECODER OUTPUT FIRST, THEN THE SKIP: x = cat((x, f_k), dim=1).
(REFERENCE.md writes each block as "... || f_k", i.e. block output then skip, matching Wav2Lip's
torch.cat((x, feat), dim=1). The channel counts alone cannot tell the order -- 512 + 256 = 768
either way -- and a swapped order still loads the same weight shapes, so it only shows up as
wrong numbers: in the next block's weight, input channels [0, C_dec) act on the decoder output
and [C_dec, C_dec + C_skip) on the skip.)
  face_decoder_blocks.0: 512->512 k1 p0                         || f6 -> 1024 @1
  face_decoder_blocks.1: ConvT 1024->512 k3 s1 p0, res512       || f5 -> 1024 @3
  face_decoder_blocks.2: ConvT 1024->512 k3 s2 p1 op1, 2x res512 || f4 -> 768 @6
  face_decoder_blocks.3: ConvT 768->384 (same), 2x res384       || f3 -> 512 @12
  face_decoder_blocks.4: ConvT 512->256, 2x res256              || f2 -> 320 @24
  face_decoder_blocks.5: ConvT 320->128, 2x res128              || f1 -> 160 @48
  face_decoder_blocks.6: ConvT 160->64, 2x res64                || f0 -> 80 @96
Output: output_block.0 = Conv 80->32 k3 p1 + BN + ReLU; output_block.1 = plain nn.Conv2d 32->3 k1
(weight, bias; no BN); output_block.2 = Sigmoid (no parameters).

State-dict keys (as in the official checkpoint layout; "module." prefixed in saved checkpoints):
  face_encoder_blocks.{i}.{j}.conv_block.0.{weight,bias}            Conv2d / ConvTranspose2d
  face_encoder_blocks.{i}.{j}.conv_block.1.{weight,bias,running_mean,running_var,
                                            num_batches_tracked}    BatchNorm2d
  audio_encoder.{i}.conv_block.{0,1}.*, face_decoder_blocks.{i}.{j}.conv_block.{0,1}.*,
  output_block.0.conv_block.{0,1}.*, output_block.1.{weight,bias}
  Conv2d weight [Cout,Cin,kh,kw]; ConvTranspose2d weight [Cin,Cout,kh,kw] (PyTorch layout).
  The full list with shapes: tests/data/wav2lip/keys_width1.txt.

Width divisor (for small CI fixtures): width=w turns every internal channel count c into
max(2, c // w); the 6 face channels, 1 mel channel and 3 output channels stay. Concatenated
widths are the sums of the scaled parts (so with w=16 the output conv sees 4+2 = 6 channels, not
80//16 = 5). width=1 is the real network.

wav2lip256 (Wav2Lip(size=256)): the 256x256 network LiveTalking serves as models/wav2lip.pth
(its wav2lip_v2). Written here from the layer table in facecast's research notes (no code taken
from LiveTalking); same blocks, audio encoder and output block, one more level each side:
  face_encoder_blocks.0: 6->16 k7 s1 p3                                   f0 16 @256
  face_encoder_blocks.1: 16->32 s2, 2x res32                              f1 32 @128
  face_encoder_blocks.2: 32->64 s2, 3x res64                              f2 64 @64
  face_encoder_blocks.3: 64->128 s2, 2x res128                            f3 128 @32
  face_encoder_blocks.4: 128->256 s2, 2x res256                           f4 256 @16
  face_encoder_blocks.5: 256->512 s2, 1x res512                           f5 512 @8
  face_encoder_blocks.6: 512->512 s2, 1x res512                           f6 512 @4
  face_encoder_blocks.7: 512->512 k4 s1 p0, 512->512 k1 p0                f7 512 @1
  face_decoder_blocks.0: 512->512 k1 p0                         || f7 -> 1024 @1
  face_decoder_blocks.1: ConvT 1024->512 k4 s1 p0, res512       || f6 -> 1024 @4
  face_decoder_blocks.2: ConvT 1024->512 k3 s2 p1 op1, res512   || f5 -> 1024 @8
  face_decoder_blocks.3: ConvT 1024->512 (same), 2x res512      || f4 -> 768 @16
  face_decoder_blocks.4: ConvT 768->384, 2x res384              || f3 -> 512 @32
  face_decoder_blocks.5: ConvT 512->256, 2x res256              || f2 -> 320 @64
  face_decoder_blocks.6: ConvT 320->128, 2x res128              || f1 -> 160 @128
  face_decoder_blocks.7: ConvT 160->64, 2x res64                || f0 -> 80 @256
Inputs face [B,6,256,256] (rows 128..255 of channels 0..2 zero), output [B,3,256,256]. A
checkpoint is this model's state dict (keys as above, "module." prefixed), wrapped in
{"state_dict": ...}. Parameters (width 1): 53,605,683 (FULL_PARAM_COUNT_256); 380 state-dict
tensors.

Parameter count (asserted in Wav2Lip.__init__ for width=1): 36,298,035 = conv weights + conv
biases + BatchNorm weight (gamma) + BatchNorm bias (beta), i.e. sum(p.numel() for p in
model.parameters()) -- this is the count that matches REFERENCE.md. Running mean/var and
num_batches_tracked are buffers and are NOT counted: adding running_mean + running_var would give
36,320,787 (+2 x 11,376 BN channels), and conv weights + biases alone are 36,275,283.
width=16: 144,423 parameters.

FLOPs per frame, width=1, measured with count_flops() below (multiply-accumulates of each of the
51 Conv2d/ConvTranspose2d layers from the actual shapes, x 2; bias, BN, ReLU, residual adds and
sigmoid not counted; a transposed conv counted as Cin*Hin*Win*Cout*kh*kw):
    3,966,984,192 MACs = 7,933,968,384 FLOP = 7.934 GFLOP  -> matches REFERENCE.md's 7.93 GFLOP.
  (face encoder 0.623 GFLOP, audio encoder 0.186, decoder blocks 6.699, output block 0.426; the
  96x96 tail -- decoder block 6 + output block -- is 2.210). `tools/wav2lip_ref.py --flops`
  prints the per-layer table.
  width=16: 42,052,992 FLOP.
"""

import math
import os
import sys

try:
    import torch
    import torch.nn as nn
except ImportError:  # a pyenv python3 without torch first in PATH: use Debian's interpreter
    if os.path.realpath(sys.executable) != os.path.realpath("/usr/bin/python3") and \
            os.path.exists("/usr/bin/python3"):
        os.execv("/usr/bin/python3", ["/usr/bin/python3"] + sys.argv)
    raise

FULL_PARAM_COUNT = 36298035
FULL_PARAM_COUNT_256 = 53605683
SIZES = (96, 256)


class Conv2d(nn.Module):
    """Conv2d + BatchNorm2d + ReLU, optionally residual (input added before the ReLU)."""

    def __init__(self, cin, cout, kernel_size, stride, padding, residual=False, device=None):
        super().__init__()
        if residual:
            assert cin == cout, "residual block needs cin == cout"
        self.conv_block = nn.Sequential(
            nn.Conv2d(cin, cout, kernel_size, stride, padding, device=device),
            nn.BatchNorm2d(cout, device=device))
        self.act = nn.ReLU()
        self.residual = residual

    def forward(self, x):
        y = self.conv_block(x)
        if self.residual:
            y = y + x
        return self.act(y)


class Conv2dTranspose(nn.Module):
    """ConvTranspose2d + BatchNorm2d + ReLU."""

    def __init__(self, cin, cout, kernel_size, stride, padding, output_padding=0, device=None):
        super().__init__()
        self.conv_block = nn.Sequential(
            nn.ConvTranspose2d(cin, cout, kernel_size, stride, padding, output_padding,
                               device=device),
            nn.BatchNorm2d(cout, device=device))
        self.act = nn.ReLU()

    def forward(self, x):
        return self.act(self.conv_block(x))


class Wav2Lip(nn.Module):
    def __init__(self, width=1, device=None, size=96):
        super().__init__()
        assert size in SIZES, size
        self.width = width
        self.size = size
        big = size == 256  # one more encoder and decoder level

        def c(n):
            return max(2, n // width)

        d = dict(device=device)

        def C(cin, cout, k, s, p, res=False):
            return Conv2d(cin, cout, k, s, p, residual=res, **d)

        def R(ch):
            return Conv2d(ch, ch, 3, 1, 1, residual=True, **d)

        def T(cin, cout, k, s, p, op=0):
            return Conv2dTranspose(cin, cout, k, s, p, op, **d)

        # face encoder; f[k] = channels of skip k. Blocks 1..: a stride-2 conv and residuals;
        # the last block takes the remaining 3x3 (96) or 4x4 (256) to 1x1 with a k3/k4 p0 conv
        f = [c(16), c(32), c(64), c(128), c(256), c(512), c(512)] + ([c(512)] if big else [])
        nres = [0, 2, 3, 2, 2, 1, 1]
        enc = [nn.Sequential(C(6, f[0], 7, 1, 3))]
        for i in range(1, len(f) - 1):
            enc.append(nn.Sequential(C(f[i - 1], f[i], 3, 2, 1), *[R(f[i]) for _ in range(nres[i])]))
        last = len(f) - 1
        enc.append(nn.Sequential(C(f[last - 1], f[last], 4 if big else 3, 1, 0),
                                 C(f[last], f[last], 1, 1, 0)))
        self.face_encoder_blocks = nn.ModuleList(enc)

        a32, a64, a128, a256, a512 = c(32), c(64), c(128), c(256), c(512)
        self.audio_encoder = nn.Sequential(
            C(1, a32, 3, 1, 1), R(a32), R(a32),
            C(a32, a64, 3, (3, 1), 1), R(a64), R(a64),
            C(a64, a128, 3, 3, 1), R(a128), R(a128),
            C(a128, a256, 3, (3, 2), 1), R(a256),
            C(a256, a512, 3, 1, 0),
            C(a512, a512, 1, 1, 0),
        )

        # decoder; out channels of each block, and the input = previous out + previous skip
        # (block i consumes skip f[n-1-i]). 256: block 1 is a k4 ConvT (1 -> 4) and an extra
        # 512-channel level with one residual (4 -> 8) follows it.
        n = len(f)
        dout = [c(512), c(512)] + ([c(512)] if big else []) + [c(512), c(384), c(256), c(128), c(64)]
        din = [a512] + [dout[i - 1] + f[n - i] for i in range(1, n)]
        blocks = [nn.Sequential(C(din[0], dout[0], 1, 1, 0)),
                  nn.Sequential(T(din[1], dout[1], 4 if big else 3, 1, 0), R(dout[1]))]
        for i in range(2, n):
            nr = 1 if big and i == 2 else 2
            blocks.append(nn.Sequential(T(din[i], dout[i], 3, 2, 1, 1),
                                        *[R(dout[i]) for _ in range(nr)]))
        self.face_decoder_blocks = nn.ModuleList(blocks)

        out_in = dout[-1] + f[0]
        self.output_block = nn.Sequential(
            C(out_in, c(32), 3, 1, 1),
            nn.Conv2d(c(32), 3, 1, 1, 0, device=device),
            nn.Sigmoid())

        if width == 1:
            want = FULL_PARAM_COUNT_256 if big else FULL_PARAM_COUNT
            n = self.num_params()
            assert n == want, f"size {size} width=1 has {n} parameters, expected {want}"

    def num_params(self):
        # conv weight + bias, BN weight + bias; running stats are buffers, not counted
        return sum(p.numel() for p in self.parameters())

    def forward(self, audio, face, taps=None):
        """audio [B,1,80,16], face [B,6,S,S] -> [B,3,S,S] (S = self.size).
        If taps is a dict, intermediate activations are stored in it (see TAP_NAMES)."""
        assert audio.dim() == 4 and face.dim() == 4 and audio.shape[0] == face.shape[0]

        def tap(name, t):
            if taps is not None:
                taps[name] = t

        emb = self.audio_encoder(audio)                      # [B,512,1,1]
        tap("audio_emb", emb)
        feats = []
        x = face
        for i, blk in enumerate(self.face_encoder_blocks):
            x = blk(x)
            tap(f"face_f{i}", x)
            feats.append(x)
        x = emb
        for i, blk in enumerate(self.face_decoder_blocks):
            x = blk(x)
            tap(f"dec{i}_out", x)
            x = torch.cat((x, feats.pop()), dim=1)           # decoder output first, then skip
            tap(f"dec{i}_cat", x)
        x = self.output_block[0](x)
        tap("out_conv0", x)
        x = self.output_block[1](x)
        tap("logits", x)                                     # before the sigmoid
        return self.output_block[2](x)


# Names forward(..., taps=dict) fills, in forward order: audio_emb [B,512,1,1]; face_f0..face_f6
# (face encoder block outputs = the skips); dec{i}_out (decoder block i output) and dec{i}_cat
# (after concatenating the skip); out_conv0 (output_block.0, after its ReLU); logits (output of
# the 32->3 conv, before the sigmoid).
def tap_names(size=96):
    n = 8 if size == 256 else 7
    return (["audio_emb"] + [f"face_f{i}" for i in range(n)] +
            [f"dec{i}_{s}" for i in range(n) for s in ("out", "cat")] + ["out_conv0", "logits"])


TAP_NAMES = tap_names(96)


def random_inputs(batch, seed, size=96):
    """Synthetic inputs that follow the data contract: mel [B,1,80,16] in [-4,4] (a smooth
    random spectrogram-like field plus noise, clipped), faces [B,6,S,S] in [0,1] with rows
    S/2.. of channels 0..2 zero (masked) and channels 3..5 a different crop (the reference).
    float64 CPU tensors (exactly representable in float32). S = size (96 or 256); blob radii
    scale with it."""
    S = size
    k = S / 96.0
    g = torch.Generator().manual_seed(seed)
    f = torch.float64
    # mel: per-band level + slow time variation + noise, like a normalised log-mel
    band = torch.linspace(1.0, -1.0, 80, dtype=f).view(1, 1, 80, 1)
    lvl = -1.0 + 2.0 * torch.rand(batch, 1, 1, 1, generator=g, dtype=f)
    tvar = torch.randn(batch, 1, 1, 16, generator=g, dtype=f).cumsum(-1) * 0.4
    mel = band * 2.0 + lvl + tvar + 0.8 * torch.randn(batch, 1, 80, 16, generator=g, dtype=f)
    mel = mel.clamp(-4.0, 4.0)

    # faces: smooth colour gradients + blobs + pixel noise, quantised to uint8/255 like frames
    def crop():
        yy = torch.linspace(0, 1, S, dtype=f).view(1, S, 1)
        xx = torch.linspace(0, 1, S, dtype=f).view(1, 1, S)
        a = torch.rand(3, 1, 1, generator=g, dtype=f)
        b = torch.rand(3, 1, 1, generator=g, dtype=f) - 0.5
        c = torch.rand(3, 1, 1, generator=g, dtype=f) - 0.5
        img = a + b * yy + c * xx
        for _ in range(4):
            cy, cx = torch.rand(2, generator=g, dtype=f) * S
            r = (8 + 20 * torch.rand(1, generator=g, dtype=f)) * k
            amp = torch.rand(3, 1, 1, generator=g, dtype=f) - 0.5
            d2 = ((torch.arange(S, dtype=f).view(S, 1) - cy) ** 2 +
                  (torch.arange(S, dtype=f).view(1, S) - cx) ** 2)
            img = img + amp * torch.exp(-d2 / (2 * r * r))
        img = img + 0.05 * torch.randn(3, S, S, generator=g, dtype=f)
        return torch.round(img.clamp(0, 1) * 255) / 255

    faces = torch.empty(batch, 6, S, S, dtype=f)
    for i in range(batch):
        faces[i, :3] = crop()
        faces[i, 3:] = crop()
        faces[i, :3, S // 2:, :] = 0.0
    return mel, faces


def randomize_(model, seed, calibrate=True, calib_device=None):
    """Deterministic random init (CPU, float32 values).

    Convs: PyTorch's default init (weight and bias ~ U(-1/sqrt(fan_in), 1/sqrt(fan_in)), which
    is what kaiming_uniform(a=sqrt(5)) gives), drawn from a generator seeded with `seed`.
    BatchNorm: weight ~ U(0.8, 1.2), bias ~ U(-0.2, 0.2), num_batches_tracked = tensor(0, int64),
    running_mean ~ U(-0.1, 0.1) and running_var ~ U(0.5, 1.5) when calibrate=False.

    calibrate=True (the default, used for all test data): with those plain ranges the activations
    of a randomly initialised net shrink layer after layer (at width 16 the output conv's
    activations were 99.5 % zero and the output was 0.5 +- 0.01 whatever the input), which makes
    a weak parity test. So the running statistics are instead set, layer by layer in forward
    order, from the per-channel mean / variance of the pre-BN activation on a calibration batch
    (8 samples from random_inputs(seed + 1000), float64) and then perturbed:
    running_mean = mean + std * U(-0.25, 0.25), running_var = max(var, 1e-4) * U(0.5, 1.5).
    They are still arbitrary per-channel values (means of either sign, variances from ~1e-3 to
    ~1e2), so BN folding is exercised, and every layer's eval-mode output is O(1).
    calib_device: where the float64 calibration forward runs (default the CPU; "cuda" makes the
    full-width 256 model's calibration take seconds instead of minutes, with values that may
    differ from a CPU run in the last bits)."""
    g = torch.Generator().manual_seed(seed)
    bns = []
    with torch.no_grad():
        for m in model.modules():
            if isinstance(m, (nn.Conv2d, nn.ConvTranspose2d)):
                # fan_in from weight dim 1 (for ConvTranspose2d that is Cout, exactly as
                # nn.ConvTranspose2d.reset_parameters computes it)
                fan_in = m.weight.shape[1] * m.weight.shape[2] * m.weight.shape[3]
                bound = 1.0 / math.sqrt(fan_in)
                m.weight.copy_(torch.rand(m.weight.shape, generator=g) * 2 * bound - bound)
                m.bias.copy_(torch.rand(m.bias.shape, generator=g) * 2 * bound - bound)
            elif isinstance(m, nn.BatchNorm2d):
                n = m.num_features
                m.weight.copy_(0.8 + 0.4 * torch.rand(n, generator=g))
                m.bias.copy_(-0.2 + 0.4 * torch.rand(n, generator=g))
                m.running_mean.copy_(-0.1 + 0.2 * torch.rand(n, generator=g))
                m.running_var.copy_(0.5 + torch.rand(n, generator=g))
                m.num_batches_tracked = torch.tensor(0, dtype=torch.int64)
                bns.append(m)
    if not calibrate:
        return model.eval()

    # Layer-by-layer calibration in float64 on a copy: a forward pre-hook on each BN replaces
    # its running stats from its actual input before it normalises (eval mode throughout, so
    # every later layer sees exactly what it will see at inference with the final stats).
    import copy
    m64 = copy.deepcopy(model).double().eval().to(calib_device or "cpu")
    bn64 = [m for m in m64.modules() if isinstance(m, nn.BatchNorm2d)]
    assert len(bn64) == len(bns)
    idx = {id(b): i for i, b in enumerate(bn64)}
    pert = {}
    for i, b in enumerate(bns):  # perturbations drawn in module order, independent of forward order
        n = b.num_features
        pert[i] = (-0.25 + 0.5 * torch.rand(n, generator=g, dtype=torch.float64),
                   0.5 + torch.rand(n, generator=g, dtype=torch.float64))

    def pre_hook(mod, inp):
        x = inp[0]
        mean = x.mean(dim=(0, 2, 3))
        var = x.var(dim=(0, 2, 3), unbiased=False)
        dm, sv = (t.to(x.device) for t in pert[idx[id(mod)]])
        # round to float32 now so the float64 calibration forward sees the stored values
        mod.running_mean.copy_((mean + var.sqrt() * dm).float().double())
        mod.running_var.copy_((var.clamp_min(1e-4) * sv).float().double())

    hs = [b.register_forward_pre_hook(pre_hook) for b in bn64]
    mel, faces = random_inputs(8, seed + 1000, model.size)
    with torch.no_grad():
        m64(mel.to(calib_device or "cpu"), faces.to(calib_device or "cpu"))
    for h in hs:
        h.remove()
    with torch.no_grad():
        for b32, b64 in zip(bns, bn64):
            b32.running_mean.copy_(b64.running_mean.float().cpu())
            b32.running_var.copy_(b64.running_var.float().cpu())
    return model.eval()


def build(width=1, seed=0, size=96, calib_device=None):
    return randomize_(Wav2Lip(width, size=size), seed, calib_device=calib_device).eval()


def count_flops(model, audio_hw=(80, 16), face_hw=None):
    """Multiply-accumulates of every Conv2d / ConvTranspose2d for one frame, from the actual
    shapes (hooks on a batch-1 forward). Returns (macs, per-layer list)."""
    layers = []

    def hook(mod, inp, out):
        x = inp[0]
        kh, kw = mod.kernel_size
        if isinstance(mod, nn.ConvTranspose2d):
            macs = x.shape[1] * x.shape[2] * x.shape[3] * mod.out_channels * kh * kw // mod.groups
        else:
            macs = out.shape[1] * out.shape[2] * out.shape[3] * (mod.in_channels // mod.groups) * kh * kw
        layers.append((mod._fc_name, tuple(x.shape[1:]), tuple(out.shape[1:]), macs))

    hs = []
    for name, m in model.named_modules():
        if isinstance(m, (nn.Conv2d, nn.ConvTranspose2d)):
            m._fc_name = name
            hs.append(m.register_forward_hook(hook))
    p = next(model.parameters())
    face_hw = face_hw or (model.size, model.size)
    was_training = model.training
    model.eval()
    with torch.no_grad():
        model(torch.zeros(1, 1, *audio_hw, dtype=p.dtype, device=p.device),
              torch.zeros(1, 6, *face_hw, dtype=p.dtype, device=p.device))
    model.train(was_training)
    for h in hs:
        h.remove()
    return sum(l[3] for l in layers), layers


def wav2lip_state_dict(model):
    """State dict with the "module." prefix (as saved from nn.DataParallel in the originals);
    float32 CPU tensors, num_batches_tracked as 0-d int64."""
    from collections import OrderedDict
    sd = OrderedDict()
    for k, v in model.state_dict().items():
        sd["module." + k] = v.detach().to("cpu").clone()
    return sd


def dummy_optimizer():
    """A small Adam-like optimizer state, so a loader must skip tensors it does not need."""
    return {
        "state": {0: {"step": 7, "exp_avg": torch.full((4,), 0.25),
                      "exp_avg_sq": torch.arange(4, dtype=torch.float32)}},
        "param_groups": [{"lr": 1e-4, "betas": (0.9, 0.999), "eps": 1e-8, "weight_decay": 0,
                          "amsgrad": False, "params": [0]}],
    }


def checkpoint_dict(model):
    return {"state_dict": wav2lip_state_dict(model), "optimizer": dummy_optimizer(),
            "global_step": 123, "global_epoch": 4}


def save_checkpoint_legacy(model, path):
    """Legacy (pre-1.6, pickles + raw storages) format, like the 2020 Wav2Lip checkpoints."""
    torch.save(checkpoint_dict(model), path, _use_new_zipfile_serialization=False)


def save_checkpoint_zip(model, path):
    """Zip format (torch >= 1.6 default)."""
    torch.save(checkpoint_dict(model), path, _use_new_zipfile_serialization=True)


def load_checkpoint(path, width=1, size=None):
    """Load a Wav2Lip-style checkpoint (either format, "module." prefix optional) into a model;
    size None: 256 when the file has face_encoder_blocks.7 (as facecast decides), else 96."""
    ck = torch.load(path, map_location="cpu")
    sd = ck["state_dict"] if "state_dict" in ck else ck
    sd = {(k[len("module."):] if k.startswith("module.") else k): v for k, v in sd.items()}
    if size is None:
        size = 256 if KEY_256 in sd else 96
    m = Wav2Lip(width, size=size)
    m.load_state_dict(sd, strict=True)
    return m.eval()


KEY_256 = "face_encoder_blocks.7.0.conv_block.0.weight"  # present only in the 256 model


def key_list(width=1, size=96):
    """[(key, shape, dtype)] of the state dict (no "module." prefix), built on the meta device
    so no weights are allocated."""
    try:
        m = Wav2Lip(width, device="meta", size=size)
    except (TypeError, RuntimeError, NotImplementedError):
        m = Wav2Lip(width, size=size)
    return [(k, tuple(v.shape), str(v.dtype).replace("torch.", "")) for k, v in m.state_dict().items()]


def _main():
    import argparse
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--width", type=int, default=1)
    ap.add_argument("--size", type=int, default=96, choices=SIZES, help="96, or 256 (wav2lip256)")
    ap.add_argument("--flops", action="store_true", help="print per-layer conv MACs")
    a = ap.parse_args()
    m = Wav2Lip(a.width, size=a.size).eval()
    macs, layers = count_flops(m)
    if a.flops:
        for name, ishape, oshape, mc in layers:
            print(f"{name:50s} {str(ishape):18s} -> {str(oshape):18s} {mc * 2 / 1e6:10.2f} MFLOP")
    print(f"size={a.size} width={a.width}: state-dict tensors {len(m.state_dict())}, params {m.num_params():,}, convs {len(layers)}, "
          f"MACs/frame {macs:,}, FLOP/frame {2 * macs:,} ({2 * macs / 1e9:.3f} GFLOP)")


if __name__ == "__main__":
    _main()
