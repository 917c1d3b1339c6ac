# Stub for mrdbourke/pytorch-deep-learning going_modular/going_modular/train.py (run by the probe in every
# process before the script).
#
# Replaces only what comes from outside the repository:
#   * the pizza_steak_sushi image folders (upstream: data/pizza_steak_sushi.zip, unzipped by hand / by the
#     course notebook into data/pizza_steak_sushi/{train,test}/{pizza,steak,sushi}/*.jpg):
#     torchvision.datasets.ImageFolder becomes a subclass of the real class whose __init__ lists 3 classes
#     (pizza, steak, sushi) and N made-up file paths under the given root instead of scanning the disk, and whose
#     loader returns a seeded RGB noise PIL image (80 x 72, seed derived from the path) instead of opening the
#     file. torchvision's own DatasetFolder.__getitem__ / __len__ are kept, so every item goes through the
#     script's Resize((64, 64)) + ToTensor as with the real images. train: 96 images (32 per class), test: 24.
#     Nothing is read from or written to disk.
import os
import zlib

CLASSES = ["pizza", "steak", "sushi"]
PER_CLASS = {"train": 32, "test": 8}
IMG_W, IMG_H = 80, 72


def _split(root):
    name = os.path.basename(os.path.normpath(str(root)))
    return name if name in PER_CLASS else "test"


def _noise_image(path):
    import numpy as np
    from PIL import Image

    rng = np.random.RandomState(zlib.crc32(os.path.normpath(path).encode("utf-8")) & 0x7FFFFFFF)
    arr = rng.randint(0, 256, size=(IMG_H, IMG_W, 3)).astype(np.uint8)
    return Image.fromarray(arr, mode="RGB")


def _patch_datasets(ds):
    from torchvision.datasets.vision import VisionDataset

    real = ds.ImageFolder

    class ImageFolder(real):
        def __init__(self, root, transform=None, target_transform=None, loader=None, is_valid_file=None,
                     allow_empty=False):
            VisionDataset.__init__(self, root, transform=transform, target_transform=target_transform)
            self.classes = list(CLASSES)
            self.class_to_idx = {c: i for i, c in enumerate(self.classes)}
            n = PER_CLASS[_split(root)]
            self.samples = [(os.path.join(str(root), c, "%s_%03d.jpg" % (c, k)), i)
                            for i, c in enumerate(self.classes) for k in range(n)]
            self.targets = [t for _, t in self.samples]
            self.imgs = self.samples
            self.extensions = (".jpg",)
            self.loader = _noise_image

    ImageFolder.__module__ = real.__module__
    ImageFolder.__qualname__ = real.__qualname__
    ds.ImageFolder = ImageFolder


when_imported("torchvision.datasets", _patch_datasets)  # noqa: F821 (provided by the probe)
