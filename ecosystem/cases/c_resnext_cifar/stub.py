# Stub for prlz77/ResNeXt.pytorch train.py (run by the probe in every process before the script).
#
# Replaces only what comes from outside the repository:
#   * torchvision.datasets.CIFAR10 (a download of the real data set into data_path): a subclass of the real
#     class whose __init__ fills .data (N, 32, 32, 3) uint8 numpy array and .targets (list of int 0..9) with
#     seeded noise instead of reading/downloading the pickled batches; __getitem__ / __len__ are torchvision's
#     own (PIL image -> the script's Flip/RandomCrop/ToTensor/Normalize). train: 256 samples, test: 40.
#     Nothing is written to disk (the script itself still creates the empty data_path folder).
#   * the script calls data.cuda() / target.cuda() / net.cuda() unconditionally: cuda_calls_stay_on_cpu()
#     makes Tensor.cuda() and Module.cuda() return their object unchanged (on the CPU), in the original and
#     the migrated run alike. torch.cuda.is_available() stays False, so nn.DataParallel (--ngpu 2, as in the
#     README) finds no device and forwards to its module, but still wraps it (state_dict keys get "module.").
TRAIN_N, TEST_N = 256, 40


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
cuda_calls_stay_on_cpu()  # noqa: F821
