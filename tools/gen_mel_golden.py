#!/usr/bin/env python3
"""Golden vectors for facecast's Wav2Lip mel spectrogram (src/audio/mel.c, tests/test_mel.c).

Design note
-----------
This is an independent float64 reference for the mel that Wav2Lip's audio.py computes with
librosa: pre-emphasis y[n] = x[n] - 0.97 x[n-1] (scipy lfilter, x[-1] = 0); centred STFT with
n_fft 800, hop 200, periodic Hann 800, the pre-emphasised signal padded by 400 samples on both
sides in numpy 'reflect' mode (np.pad, which for short signals keeps mirroring, i.e. the
2(n-1)-periodic mirror extension; a 1-sample signal repeats its sample); magnitude; 80-band
Slaney mel filter bank 55..7600 Hz with Slaney area normalisation (librosa.filters.mel,
htk=False, norm='slaney'); dB = 20 log10(max(1e-5, m)) - 20; clip(8 (dB + 100)/100 - 4, -4, 4).
librosa is not available here, so the filter bank, the Hz<->mel conversion and the STFT are
written out below from that description, in numpy float64 (scipy only supplies the Hann window
and lfilter, the same primitives librosa and Wav2Lip use). The filter bank is rounded to float32
at the end, as librosa returns it (and as the C code stores it).

It also computes, for every video frame up to a few past the end, which 16 mel columns the
frame's window uses (25 fps: start = int(i * 80 / 25), clamped to the last 16 columns).

To prove the signals exercise the edges, it recomputes each mel with the usual mistakes (no
pre-emphasis, zero / edge / symmetric padding instead of reflect) and asserts each differs from
the correct mel by far more than the C test's tolerance.

Golden file format (tests/data/mel_<name>.bin, all little-endian):
    char    magic[4] = "FCML"
    int32   version  = 1
    int32   pcm_kind:  16 -> int16 samples, value = s / 32768 (exact in float32)
                       32 -> float32 samples
    int32   n_samples
    int32   n_bands    (80)
    int32   n_cols     (1 + n_samples // 200)
    int32   n_windows
    pcm     n_samples samples of pcm_kind
    float32 mel[n_bands][n_cols]                 normalised mel, row-major
    n_windows x { int32 frame; int32 start; }    start = the window's first column, or -1 when
                                                 n_cols < 16 (then the window holds columns
                                                 0..n_cols-1 left-aligned, the rest is -4.0)

Rerunnable: the signals are synthesised from fixed seeds, so rerunning writes identical files.
Run:  python3 tools/gen_mel_golden.py   (needs numpy and scipy; if the python3 first in PATH
lacks them, the script re-executes itself under /usr/bin/python3, where Debian puts them).
"""

import os
import struct
import sys

try:
    import numpy as np
    import scipy.signal
except ImportError:  # e.g. a pyenv shim without numpy: retry with the system interpreter
    if os.path.realpath(sys.executable) != os.path.realpath("/usr/bin/python3") and \
            os.path.exists("/usr/bin/python3"):
        os.execv("/usr/bin/python3", ["/usr/bin/python3"] + sys.argv)
    raise

SR = 16000
N_FFT = 800
HOP = 200
N_MELS = 80
FMIN = 55.0
FMAX = 7600.0
PREEMPH = 0.97
WIN_COLS = 16
FLOOR = -4.0  # the normalised value of silence; fills windows of mels shorter than 16 columns

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
OUT_DIR = os.path.join(ROOT, "tests", "data")


# ---- Slaney mel scale: linear below 1 kHz (200/3 Hz per mel), logarithmic above ----
F_SP = 200.0 / 3.0
MIN_LOG_HZ = 1000.0
MIN_LOG_MEL = MIN_LOG_HZ / F_SP
LOGSTEP = np.log(6.4) / 27.0


def hz_to_mel(f):
    f = np.asarray(f, dtype=np.float64)
    lin = f / F_SP
    logp = MIN_LOG_MEL + np.log(np.maximum(f, 1e-300) / MIN_LOG_HZ) / LOGSTEP
    return np.where(f >= MIN_LOG_HZ, logp, lin)


def mel_to_hz(m):
    m = np.asarray(m, dtype=np.float64)
    lin = F_SP * m
    logp = MIN_LOG_HZ * np.exp(LOGSTEP * (m - MIN_LOG_MEL))
    return np.where(m >= MIN_LOG_MEL, logp, lin)


def mel_filter_bank():
    """[N_MELS][1 + N_FFT/2] triangular filters, Slaney-normalised to unit area in Hz."""
    bins = 1 + N_FFT // 2
    fft_hz = np.linspace(0.0, SR / 2.0, bins)
    # N_MELS + 2 edge frequencies, equally spaced in mel between fmin and fmax.
    edges = mel_to_hz(np.linspace(hz_to_mel(FMIN), hz_to_mel(FMAX), N_MELS + 2))
    w = np.zeros((N_MELS, bins), dtype=np.float64)
    for b in range(N_MELS):
        lo, mid, hi = edges[b], edges[b + 1], edges[b + 2]
        rising = (fft_hz - lo) / (mid - lo)
        falling = (hi - fft_hz) / (hi - mid)
        w[b] = np.maximum(0.0, np.minimum(rising, falling)) * (2.0 / (hi - lo))
    return w.astype(np.float32).astype(np.float64)


MEL_FB = mel_filter_bank()
HANN = scipy.signal.get_window("hann", N_FFT, fftbins=True)  # periodic Hann
assert np.allclose(HANN, 0.5 - 0.5 * np.cos(2 * np.pi * np.arange(N_FFT) / N_FFT))


def mel(x, preemph=True, pad_mode="reflect"):
    """Normalised mel [N_MELS][1 + len(x)//HOP] of float samples x, computed in float64."""
    x = np.asarray(x, dtype=np.float64)
    y = scipy.signal.lfilter([1.0, -PREEMPH], [1.0], x) if preemph else x
    if len(y) == 0:
        padded = np.zeros(N_FFT)  # the C code's definition for n = 0: one silent column
    else:
        padded = np.pad(y, N_FFT // 2, mode=pad_mode)
    ncols = 1 + (len(padded) - N_FFT) // HOP
    assert ncols == 1 + len(x) // HOP
    frames = np.stack([padded[t * HOP:t * HOP + N_FFT] for t in range(ncols)], axis=1)
    spec = np.abs(np.fft.rfft(frames * HANN[:, None], axis=0))  # [401][ncols]
    m = MEL_FB @ spec
    db = 20.0 * np.log10(np.maximum(1e-5, m)) - 20.0
    return np.clip(8.0 * ((db + 100.0) / 100.0) - 4.0, -4.0, 4.0)


def window_start(frame, ncols):
    """First column of video frame `frame`'s 16-column window; -1 when the mel is too short."""
    if ncols < WIN_COLS:
        return -1
    start = int(frame * 80.0 / 25.0)
    if start + WIN_COLS > ncols:
        start = ncols - WIN_COLS
    return start


# ---- test signals (fixed seeds: rerunning gives identical bytes) ----

def sig_mix():
    """1.3 s (+37 samples, so the last hop is partial): chirp 100->6000 Hz, sines at 220 and
    3150 Hz and seeded noise, with an exactly silent stretch; it starts and ends mid-waveform
    (non-zero, sloped), so reflect padding and pre-emphasis both show in the edge columns."""
    n = int(1.3 * SR) + 37
    t = np.arange(n) / SR
    dur = n / SR
    f0, f1 = 100.0, 6000.0
    chirp = np.sin(2 * np.pi * (f0 * t + (f1 - f0) * t * t / (2 * dur)) + 0.7)
    rng = np.random.default_rng(20240601)
    x = (0.25 * chirp + 0.15 * np.sin(2 * np.pi * 220.0 * t + 1.1)
         + 0.08 * np.sin(2 * np.pi * 3150.0 * t + 0.3) + 0.03 * rng.standard_normal(n))
    x += 0.2 * (1.0 - t / dur) ** 3  # a decaying offset: an asymmetric edge at sample 0
    x[int(0.55 * SR):int(0.72 * SR)] = 0.0  # silence: floor columns and their borders
    return x


def sig_short():
    """~0.23 s: fewer columns (19) than a few windows need, so most windows clamp."""
    n = int(0.23 * SR) + 11
    t = np.arange(n) / SR
    rng = np.random.default_rng(7)
    x = 0.4 * np.sin(2 * np.pi * (300.0 * t + 4000.0 * t * t)) + 0.05 * rng.standard_normal(n)
    x += 0.3 * t / t[-1]  # a ramp: reflect, edge and symmetric padding all differ at the end
    return x


def sig_loud():
    """A loud clipped square-ish wave (150 Hz, tanh-saturated, clipped) with 2 kHz and 4.1 kHz
    square-ish components, scaled 24x past full scale (float input is not limited to +-1; at
    full scale Wav2Lip's mel rarely passes +3): drives bands into the +4 clip."""
    n = int(0.25 * SR) + 123
    t = np.arange(n) / SR
    x = (np.tanh(6.0 * np.sin(2 * np.pi * 150.0 * t + 0.4)) * 1.2
         + 0.3 * np.sin(2 * np.pi * 2000 * t) + 0.4 * np.tanh(4.0 * np.sin(2 * np.pi * 4100 * t)))
    return 24.0 * np.clip(x, -1.0, 1.0)


def sig_tiny(n, seed):
    rng = np.random.default_rng(seed)
    return 0.5 * rng.standard_normal(n) + 0.3


def quantise16(x):
    s = np.clip(np.round(x * 32768.0), -32768, 32767).astype("<i2")
    return s, s.astype(np.float64) / 32768.0


def write_case(name, x, kind):
    if kind == 16:
        raw, x = quantise16(x)
        pcm_bytes = raw.tobytes()
    else:
        raw = np.asarray(x, dtype="<f4")
        x = raw.astype(np.float64)
        pcm_bytes = raw.tobytes()
    m = mel(x)
    ncols = m.shape[1]
    last_frame = (ncols * 25) // 80 + 3  # a few frames past the end of the audio
    frames = list(range(0, last_frame + 1)) + [1000]
    wins = [(f, window_start(f, ncols)) for f in frames]
    path = os.path.join(OUT_DIR, "mel_%s.bin" % name)
    with open(path, "wb") as fh:
        fh.write(b"FCML")
        fh.write(struct.pack("<6i", 1, kind, len(x), N_MELS, ncols, len(wins)))
        fh.write(pcm_bytes)
        fh.write(np.ascontiguousarray(m, dtype="<f4").tobytes())
        for f, s in wins:
            fh.write(struct.pack("<2i", f, s))
    size = os.path.getsize(path)
    print("wrote %-28s n=%-6d cols=%-4d windows=%-3d %6d bytes  range [%.3f, %.3f]"
          % (os.path.relpath(path, ROOT), len(x), ncols, len(wins), size, m.min(), m.max()))
    return x, m, size


def check_sensitivity(name, x, m):
    """The golden must catch wrong pre-emphasis and wrong padding (tolerance in C is 1e-3)."""
    if len(x) < 2:
        return
    for label, kw in [("no pre-emphasis", dict(preemph=False)),
                      ("zero padding", dict(pad_mode="constant")),
                      ("edge padding", dict(pad_mode="edge")),
                      ("symmetric padding", dict(pad_mode="symmetric"))]:
        d = np.abs(mel(x, **kw) - m)
        edge = max(d[:, 0].max(), d[:, -1].max())
        print("    %-18s max diff %.3f (first/last column %.3f)" % (label, d.max(), edge))
        assert d.max() > 0.05, (name, label)


def main():
    os.makedirs(OUT_DIR, exist_ok=True)
    cases = [("mix", sig_mix(), 16), ("short", sig_short(), 32), ("loud", sig_loud(), 32),
             ("n1", sig_tiny(1, 1), 32), ("n2", sig_tiny(2, 2), 32), ("n3", sig_tiny(3, 3), 32),
             ("n150", sig_tiny(150, 150), 32), ("n399", sig_tiny(399, 399), 32),
             ("n401", sig_tiny(401, 401), 32), ("n2999", sig_tiny(2999, 2999), 16),
             ("n3001", sig_tiny(3001, 3001), 16)]
    total = 0
    for name, x, kind in cases:
        xq, m, size = write_case(name, x, kind)
        total += size
        if name in ("mix", "short", "loud", "n150"):
            check_sensitivity(name, xq, m)
    print("total %d bytes" % total)


if __name__ == "__main__":
    main()
