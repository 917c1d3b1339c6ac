# Stub for yjn870/SRCNN-pytorch train.py (run by the probe in every process before the script).
#
# Replaces only what comes from outside the repository:
#   * the third-party package h5py (not installed; the script's data are HDF5 files made by prepare.py or
#     downloaded from Dropbox): a stand-in module "h5py" whose File(path, mode) is a context manager over
#     seeded synthetic arrays, shaped as prepare.py writes them:
#       - a file whose name starts with "Set5" (the --eval-file) has groups 'lr' and 'hr', each a dict
#         {'0': ..., '1': ..., '2': ...} of float32 (48, 48) Y-channel images with values in 0..255;
#       - any other file (the --train-file) has datasets 'lr' and 'hr' of shape (64, 33, 33) float32
#         (64 patches of 33 x 33, hr = smooth pattern, lr = hr blurred by 3x3 box averaging + noise).
#     The repository's own TrainDataset / EvalDataset open the file in every __getitem__ / __len__ as upstream.
#     Nothing is read from or written to disk.
import sys
import types

TRAIN_N, EVAL_N, PATCH, EVAL_SIZE = 64, 3, 33, 48
_CACHE = {}


def _make(path):
    import os
    import numpy as np
    name = os.path.basename(str(path))
    if name in _CACHE:
        return _CACHE[name]
    is_eval = name.startswith("Set5")
    rng = np.random.RandomState(2222 if is_eval else 1111)

    def pair(size):
        yy, xx = np.mgrid[0:size, 0:size].astype(np.float32)
        fx, fy, ph = rng.uniform(0.1, 0.6), rng.uniform(0.1, 0.6), rng.uniform(0, 6.28)
        hr = 127.5 + 100.0 * np.sin(fx * xx + ph) * np.cos(fy * yy)
        hr = hr + rng.normal(0, 5, size=hr.shape)
        pad = np.pad(hr, 1, mode="edge")
        lr = sum(pad[i:i + size, j:j + size] for i in range(3) for j in range(3)) / 9.0
        lr = lr + rng.normal(0, 2, size=lr.shape)
        return np.clip(lr, 0, 255).astype(np.float32), np.clip(hr, 0, 255).astype(np.float32)

    if is_eval:
        pairs = [pair(EVAL_SIZE) for _ in range(EVAL_N)]
        data = {"lr": {str(i): p[0] for i, p in enumerate(pairs)},
                "hr": {str(i): p[1] for i, p in enumerate(pairs)}}
    else:
        pairs = [pair(PATCH) for _ in range(TRAIN_N)]
        data = {"lr": np.stack([p[0] for p in pairs]), "hr": np.stack([p[1] for p in pairs])}
    _CACHE[name] = data
    return data


class File(object):
    def __init__(self, name, mode="r", *args, **kwargs):
        if mode != "r":
            raise OSError("h5py stand-in (stub.py) is read-only: %r mode %r" % (name, mode))
        self._data = _make(name)

    def __getitem__(self, key):
        return self._data[key]

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()
        return False

    def close(self):
        pass


_h5py = types.ModuleType("h5py")
_h5py.__file__ = __file__
_h5py.File = File
sys.modules["h5py"] = _h5py
