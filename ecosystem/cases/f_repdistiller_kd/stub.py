# Stub for HobbitLong/RepDistiller train_student.py (run by the probe in every process before the script).
#
# Replaces only what comes from outside the repository:
#   * torchvision.datasets.CIFAR100 (a download into ./data): a subclass of the real class whose __init__ fills
#     .data (N, 32, 32, 3) uint8 and .targets (list of int, only classes 0 and 1 of the 100, so that the test
#     accuracy leaves 0 within two epochs and the best-model save happens) with seeded noise; torchvision's own
#     __getitem__/__len__ (the repository's CIFAR100Instance subclasses it and adds the index). train 64, test 32.
#   * the pretrained teacher (upstream: scripts/fetch_pretrained_teachers.sh downloads
#     save/models/<name>_vanilla/ckpt_epoch_240.pth): torch.load of a path ending in
#     save/models/<name>_vanilla/ckpt_epoch_240.pth that does not exist returns {'model': state_dict} of the
#     repository's own models.model_dict[<name>](num_classes=100), built under a fixed seed inside
#     torch.random.fork_rng (the script's RNG stream is untouched). Nothing is written to disk.
#   * tensorboard_logger (a third-party package not installed): a module whose Logger(logdir, flush_secs)
#     keeps log_value(name, value, step) calls in memory.
import os
import sys
import types

TRAIN_N, TEST_N = 64, 32
_TEACHER_TAIL = ("save", "models")
_TEACHER_FILE = "ckpt_epoch_240.pth"


def _patch_datasets(ds):
    import numpy as np
    from torchvision.datasets.vision import VisionDataset

    real = ds.CIFAR100

    class CIFAR100(real):
        def __init__(self, root, train=True, transform=None, target_transform=None, download=False):
            VisionDataset.__init__(self, root, transform=transform, target_transform=target_transform)
            self.train = train
            n = TRAIN_N if train else TEST_N
            rng = np.random.RandomState(1111 if train else 2222)
            self.data = rng.randint(0, 256, size=(n, 32, 32, 3)).astype(np.uint8)
            self.targets = [int(t) for t in rng.randint(0, 2, size=n)]  # classes 0/1 only: see NOTES.md
            self.classes = ["c%d" % i for i in range(100)]
            self.class_to_idx = {c: i for i, c in enumerate(self.classes)}

    CIFAR100.__module__ = real.__module__
    CIFAR100.__qualname__ = real.__qualname__
    ds.CIFAR100 = CIFAR100


def _teacher_name(path):
    if not isinstance(path, (str, os.PathLike)):
        return None
    parts = os.path.normpath(os.fspath(path)).split(os.sep)
    if len(parts) < 4 or parts[-1] != _TEACHER_FILE or tuple(parts[-4:-2]) != _TEACHER_TAIL:
        return None
    folder = parts[-2]
    if not folder.endswith("_vanilla") or os.path.exists(path):
        return None
    return folder[: -len("_vanilla")]


def _patch_torch(torch):
    real_load = torch.load

    def load(f, *args, **kwargs):
        name = _teacher_name(f)
        if name is None:
            return real_load(f, *args, **kwargs)
        from models import model_dict  # the repository's own model zoo

        with torch.random.fork_rng(devices=[]):
            torch.manual_seed(240)
            model = model_dict[name](num_classes=100)
        return {"model": model.state_dict()}

    load.__wrapped__ = real_load
    torch.load = load


class _Logger(object):
    def __init__(self, logdir=None, flush_secs=2, **kwargs):
        self.logdir = logdir
        self.values = []

    def log_value(self, name, value, step=None):
        self.values.append((name, float(value), step))


_tb = types.ModuleType("tensorboard_logger")
_tb.Logger = _Logger
sys.modules.setdefault("tensorboard_logger", _tb)

when_imported("torchvision.datasets", _patch_datasets)  # noqa: F821 (provided by the probe)
when_imported("torch", _patch_torch)  # noqa: F821
