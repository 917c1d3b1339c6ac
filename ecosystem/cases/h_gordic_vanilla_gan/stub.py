# Stub for gordicaleksa/pytorch-GANs train_vanilla_gan.py (run by the probe in every process before the script).
#
# Replaces only what comes from outside the repository's code:
#   * torchvision.datasets.MNIST (a download of the real data set into data/MNIST): a subclass of the real class
#     whose __init__ fills .data (N, 28, 28) uint8 tensor and .targets (int64 0..9) with seeded noise instead of
#     reading/downloading the idx files; __getitem__ / __len__ are torchvision's own (mode-"L" PIL image, then
#     the repository's ToTensor + Normalize((.5,), (.5,))). train: 128 samples. Nothing is written for the data.
#   * the third-party package tensorboard (not installed in the realrun venv; torch.utils.tensorboard refuses to
#     import without it): a stand-in module "torch.utils.tensorboard" whose SummaryWriter(...) accepts and
#     ignores add_scalar / add_scalars / add_image / flush / close and writes nothing (the real one writes event
#     files under runs/).
#   * the third-party package GitPython ("git", not installed): a stand-in whose
#     Repo(search_parent_directories=True).head.object.hexsha is the upstream commit this tree was taken from
#     (the scratch folders the harness runs in are not git checkouts, the real call would raise there).
#   * the third-party package opencv-python ("cv2", not installed): an empty stand-in module; utils/utils.py
#     imports it at the top but only its image helpers (not used by this training script) call it.
import sys
import types

TRAIN_N = 128
UPSTREAM_COMMIT = "2119f6d9522c710e658f897cc7c97b8ac771b8ea"


def _patch_datasets(ds):
    import torch
    from torchvision.datasets.vision import VisionDataset

    real = ds.MNIST

    class MNIST(real):
        def __init__(self, root, train=True, transform=None, target_transform=None, download=False):
            VisionDataset.__init__(self, root, transform=transform, target_transform=target_transform)
            self.train = train
            g = torch.Generator().manual_seed(1111 if train else 2222)
            self.data = torch.randint(0, 256, (TRAIN_N, 28, 28), dtype=torch.uint8, generator=g)
            self.targets = torch.randint(0, 10, (TRAIN_N,), dtype=torch.int64, generator=g)

    MNIST.__module__ = real.__module__
    MNIST.__qualname__ = real.__qualname__
    ds.MNIST = MNIST


class SummaryWriter(object):
    def __init__(self, log_dir=None, *args, **kwargs):
        self.log_dir = log_dir

    def _ignore(self, *args, **kwargs):
        pass

    add_scalar = add_scalars = add_image = add_images = add_histogram = add_text = flush = close = _ignore


def _add_tensorboard(torch):
    tb = types.ModuleType("torch.utils.tensorboard")
    tb.__file__ = __file__
    tb.SummaryWriter = SummaryWriter
    sys.modules["torch.utils.tensorboard"] = tb


class _Repo(object):
    def __init__(self, path=None, search_parent_directories=False, **kwargs):
        self.head = types.SimpleNamespace(object=types.SimpleNamespace(hexsha=UPSTREAM_COMMIT))


_git = types.ModuleType("git")
_git.__file__ = __file__
_git.Repo = _Repo
sys.modules["git"] = _git

_cv2 = types.ModuleType("cv2")
_cv2.__file__ = __file__
sys.modules["cv2"] = _cv2

when_imported("torch", _add_tensorboard)  # noqa: F821 (provided by the probe)
when_imported("torchvision.datasets", _patch_datasets)  # noqa: F821
