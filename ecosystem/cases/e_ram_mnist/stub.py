# Stub for kevinzakka/recurrent-visual-attention main.py (run by the probe in every process before the script).
# Replaces only what comes from outside the repository:
#
#   * the third-party package `tensorboard_logger` (trainer.py imports `configure, log_value` from it at module
#     level; it is not installed in the run venv and is only called with --use_tensorboard True, which the case
#     does not pass): a stand-in module in sys.modules whose configure / log_value do nothing.
#   * torchvision.datasets.MNIST (a download into ./data): a subclass of the real class whose __init__ fills
#     .data (N, 28, 28) uint8 and .targets (0..9) with seeded noise instead of reading/downloading the idx
#     files; __getitem__/__len__ are torchvision's own, so every item is a mode-"L" PIL image through the
#     script's ToTensor + Normalize. train=True (the only split a training run reads): 64 samples;
#     train=False: 32. Nothing is written to disk.
import sys
import types

TRAIN_N, TEST_N = 64, 32

if "tensorboard_logger" not in sys.modules:
    _tb = types.ModuleType("tensorboard_logger")
    _tb.configure = lambda *args, **kwargs: None
    _tb.log_value = lambda *args, **kwargs: None
    sys.modules["tensorboard_logger"] = _tb


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
