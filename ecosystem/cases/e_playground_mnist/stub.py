# Stub for aaron-xichen/pytorch-playground mnist/train.py (run by the probe in every process before the script).
# Replaces only what comes from outside the repository:
#
#   * the repository's own install step (README: `python3 setup.py develop --user`, which puts the repository
#     root on sys.path so that `from utee import misc` works when started as `python mnist/train.py`): the stub
#     appends the working directory (the tree root, where utee/ lives) to sys.path. Nothing else is imported.
#   * two third-party packages utee/misc.py imports at module level but the training path never calls:
#     `cv2` (opencv, used only by the lmdb / jpeg helpers) and `IPython` (`from IPython import embed`, unused).
#     Empty stand-in modules are put in sys.modules (IPython gets an `embed` that raises if ever called;
#     cv2 gets nothing).
#   * torchvision.datasets.MNIST (a download into <data_root>/mnist-data): a subclass of the real class whose
#     __init__ fills .data (N, 28, 28) uint8 and .targets (0..9) with seeded noise instead of reading/downloading
#     the idx files; __getitem__/__len__ are torchvision's own, so every item is a mode-"L" PIL image through
#     the script's ToTensor + Normalize. train: 64 samples, test: 32. Nothing is written to disk.
import os
import sys
import types

TRAIN_N, TEST_N = 64, 32

if os.path.isdir("utee") and os.getcwd() not in sys.path:
    sys.path.append(os.getcwd())

if "cv2" not in sys.modules:
    sys.modules["cv2"] = types.ModuleType("cv2")
if "IPython" not in sys.modules:
    _ip = types.ModuleType("IPython")

    def embed(*args, **kwargs):
        raise RuntimeError("stub: IPython.embed is not available")

    _ip.embed = embed
    sys.modules["IPython"] = _ip


def _patch_datasets(ds):
    import torch
    from torchvision.datasets.vision import VisionDataset

    real = ds.MNIST

    class MNIST(real):
        def __init__(self, root, train=True, transform=None, target_transform=None, download=False):
            VisionDataset.__init__(self, root, transform=transform, target_transform=target_transform)
            self.train = train
            n = TRAIN_N if train else TEST_N
            g = torch.Generator().manual_seed(1111 if train else 2222)
            self.data = torch.randint(0, 256, (n, 28, 28), dtype=torch.uint8, generator=g)
            self.targets = torch.randint(0, 10, (n,), dtype=torch.int64, generator=g)

    MNIST.__module__ = real.__module__
    MNIST.__qualname__ = real.__qualname__
    ds.MNIST = MNIST


when_imported("torchvision.datasets", _patch_datasets)  # noqa: F821 (provided by the probe)
