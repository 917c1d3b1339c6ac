# Stub for L1aoXingyu/pytorch-beginner "03-Neural Network/neural_network.py" (run by the probe in every process
# before the script).
#
# Replaces only what comes from outside the repository:
#   * torchvision.datasets.FashionMNIST (a download of the real data set into ../datasets): a subclass of the
#     real class whose __init__ fills .data (N, 28, 28) uint8 tensor and .targets (int64 tensor in 0..9) with
#     seeded noise instead of reading / downloading the idx files; __getitem__ / __len__ are torchvision's own
#     (MNIST's), so every item is a mode-"L" PIL image that goes through the script's ToTensor, exactly as with
#     the real data. train: 96 samples, test: 40 samples. Nothing is written to disk.
TRAIN_N, TEST_N = 96, 40


def _patch_datasets(ds):
    import torch
    from torchvision.datasets.vision import VisionDataset

    real = ds.FashionMNIST

    class FashionMNIST(real):
        def __init__(self, root, train=True, transform=None, target_transform=None, download=False):
            VisionDataset.__init__(self, root, transform=transform, target_transform=target_transform)
            self.train = train
            n = TRAIN_N if train else TEST_N
            g = torch.Generator().manual_seed(3111 if train else 4222)
            self.data = torch.randint(0, 256, (n, 28, 28), dtype=torch.uint8, generator=g)
            self.targets = torch.randint(0, 10, (n,), dtype=torch.int64, generator=g)

    FashionMNIST.__module__ = real.__module__
    FashionMNIST.__qualname__ = real.__qualname__
    ds.FashionMNIST = FashionMNIST


when_imported("torchvision.datasets", _patch_datasets)  # noqa: F821 (provided by the probe)
