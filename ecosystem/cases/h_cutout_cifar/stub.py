# Stub for uoguelph-mlrg/Cutout train.py (run by the probe in every process before the script).
#
# Replaces only what comes from outside the repository's code:
#   * torchvision.datasets.CIFAR10 (a download of the real data set into data/): a subclass of the real class
#     whose __init__ fills .data (N, 32, 32, 3) uint8 numpy array and .targets (list of int 0..9) with seeded
#     noise instead of reading/downloading the pickled batches; __getitem__ / __len__ are torchvision's own
#     (PIL image -> the script's RandomCrop/Flip/ToTensor/Normalize/Cutout). train: 32 samples, test: 16.
#     Nothing is written to disk for the data.
#   * the script calls .cuda() on the model, the criterion and every batch with no flag to avoid it:
#     cuda_calls_stay_on_cpu() makes Tensor.cuda()/Module.cuda() return the object as it is (CPU).
#   * the output folders logs/ and checkpoints/ (listed in the repository's .gitignore; a user creates them
#     before the first run, the script opens logs/<id>.csv and saves checkpoints/<id>.pt without creating
#     them): made empty here, in the folder the script starts in, if absent.
import os

TRAIN_N, TEST_N = 32, 16


def _patch_datasets(ds):
    import numpy as np
    from torchvision.datasets.vision import VisionDataset

    real = ds.CIFAR10

    class CIFAR10(real):
        def __init__(self, root, train=True, transform=None, target_transform=None, download=False):
            VisionDataset.__init__(self, root, transform=transform, target_transform=target_transform)
            self.train = train
            n = TRAIN_N if train else TEST_N
            rng = np.random.RandomState(1111 if train else 2222)
            self.data = rng.randint(0, 256, size=(n, 32, 32, 3)).astype(np.uint8)
            self.targets = [int(t) for t in rng.randint(0, 10, size=n)]
            self.classes = ["c%d" % i for i in range(10)]
            self.class_to_idx = {c: i for i, c in enumerate(self.classes)}

    CIFAR10.__module__ = real.__module__
    CIFAR10.__qualname__ = real.__qualname__
    ds.CIFAR10 = CIFAR10


when_imported("torchvision.datasets", _patch_datasets)  # noqa: F821 (provided by the probe)
cuda_calls_stay_on_cpu()  # noqa: F821 (provided by the probe)
for _d in ("logs", "checkpoints"):
    os.makedirs(_d, exist_ok=True)
