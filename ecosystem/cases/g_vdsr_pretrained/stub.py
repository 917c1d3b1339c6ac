# Stub for twtygqyy/pytorch-vdsr main_vdsr.py with --pretrained (run by the probe in every process before the
# script). Same h5py stand-in as g_vdsr_sr, plus:
#   * the pretrained weights file given by --pretrained (the repository's own model/model_epoch_50.pth is a
#     2018 pickle with CUDA storages that cannot be loaded on a CPU-only machine without map_location): for the
#     exact path PRETRAINED below, os.path.isfile answers True and torch.load returns what the repository's
#     save_checkpoint writes, {"epoch": 50, "model": vdsr.Net()} with the Net built under a fixed seed inside
#     torch.random.fork_rng() (the script's own random stream is untouched). Every other path goes to the real
#     functions. Nothing is read from or written to disk.
#
# Replaces only what comes from outside the repository's code:
#   * the third-party package h5py (not installed in the realrun venv) and the training file data/train.h5
#     (a large HDF5 file made by the repository's MATLAB scripts; it is not in the stored snapshot): a stand-in
#     module "h5py" whose File(path[, mode]) opens a seeded synthetic file with .get('data') / .get('label'):
#     float32 numpy arrays of shape (48, 1, 24, 24), values in [0, 1] as MATLAB's im2double writes them
#     (label = a smooth sine pattern plus noise, data = the label blurred by a 3x3 box average plus noise, i.e.
#     a bicubic-upscaled low-resolution input of the same size). The upstream patches are 41 x 41; 24 x 24 keeps
#     the 20-layer network fast on CPU (the network is fully convolutional). DatasetFromHdf5 indexes them as
#     upstream ([index, :, :, :], .shape[0]). Nothing is read from or written to disk.
import sys
import types

TRAIN_N, PATCH = 48, 24


def _make():
    import numpy as np
    rng = np.random.RandomState(1111)
    data, label = [], []
    yy, xx = np.mgrid[0:PATCH, 0:PATCH].astype(np.float32)
    for _ in range(TRAIN_N):
        fx, fy, ph = rng.uniform(0.1, 0.8), rng.uniform(0.1, 0.8), rng.uniform(0, 6.28)
        hr = 0.5 + 0.4 * np.sin(fx * xx + ph) * np.cos(fy * yy) + rng.normal(0, 0.02, size=xx.shape)
        pad = np.pad(hr, 1, mode="edge")
        lr = sum(pad[i:i + PATCH, j:j + PATCH] for i in range(3) for j in range(3)) / 9.0
        lr = lr + rng.normal(0, 0.01, size=lr.shape)
        data.append(np.clip(lr, 0, 1)[None])
        label.append(np.clip(hr, 0, 1)[None])
    return {"data": np.stack(data).astype(np.float32), "label": np.stack(label).astype(np.float32)}


class File(object):
    def __init__(self, name, mode=None, *args, **kwargs):
        if mode not in (None, "r"):
            raise OSError("h5py stand-in (stub.py) is read-only: %r mode %r" % (name, mode))
        self._data = _make()

    def get(self, key, default=None):
        return self._data.get(key, default)

    def __getitem__(self, key):
        return self._data[key]

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        return False

    def close(self):
        pass


_h5py = types.ModuleType("h5py")
_h5py.__file__ = __file__
_h5py.File = File
sys.modules["h5py"] = _h5py


PRETRAINED = "synth/vdsr_pretrained.pth"


def _is_ours(f):
    import os
    return isinstance(f, (str, os.PathLike)) and os.path.normpath(os.fspath(f)) == os.path.normpath(PRETRAINED)


def _patch_torch(torch):
    import os.path
    real_isfile, real_load = os.path.isfile, torch.load

    def isfile(path):
        return True if _is_ours(path) else real_isfile(path)

    def load(f, *args, **kwargs):
        if _is_ours(f):
            import vdsr
            with torch.random.fork_rng(devices=[]):
                torch.manual_seed(5050)
                net = vdsr.Net()
            return {"epoch": 50, "model": net}
        return real_load(f, *args, **kwargs)

    isfile.__wrapped__ = real_isfile
    load.__wrapped__ = real_load
    os.path.isfile = isfile
    torch.load = load


when_imported("torch", _patch_torch)  # noqa: F821 (provided by the probe)
