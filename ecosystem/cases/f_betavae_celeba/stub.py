# Stub for 1Konny/Beta-VAE main.py (run by the probe in every process before the script).
#
# Replaces only what comes from outside the repository:
#   * the CelebA image folder (upstream: data/CelebA/<class>/*.jpg, downloaded by hand and read through
#     torchvision.datasets.ImageFolder): torchvision.datasets.ImageFolder becomes a subclass of the real class
#     whose __init__(root, transform, ...) lists N = 48 made-up paths <root>/img_align_celeba/NNNNNN.jpg (class 0)
#     in .samples/.imgs/.targets without touching the disk, and whose .loader turns such a path into a seeded
#     48x48 RGB PIL noise image (seed = the file number). The repository's CustomImageFolder subclasses it
#     (imported after the patch) and keeps its own __getitem__ (self.imgs[index][0] -> self.loader -> the
#     script's Resize((64, 64)) + ToTensor). Nothing is read or written.
#   * visdom (a third-party package that is not installed; solver.py imports it at the top): a module whose
#     Visdom class accepts every call and does nothing. The args turn visualisation off (--viz_on False), so it
#     is never instantiated.
import os
import sys
import types

TRAIN_N = 48
_SIDE = 48


def _fake_image(path):
    import numpy as np
    from PIL import Image

    stem = os.path.splitext(os.path.basename(path))[0]
    rng = np.random.RandomState(int(stem))
    return Image.fromarray(rng.randint(0, 256, size=(_SIDE, _SIDE, 3)).astype(np.uint8), mode="RGB")


def _patch_datasets(ds):
    from torchvision.datasets.vision import VisionDataset

    real = ds.ImageFolder

    class ImageFolder(real):
        def __init__(self, root, transform=None, target_transform=None, loader=None, is_valid_file=None, **kw):
            VisionDataset.__init__(self, root, transform=transform, target_transform=target_transform)
            self.loader = _fake_image
            self.extensions = (".jpg",)
            self.classes = ["img_align_celeba"]
            self.class_to_idx = {"img_align_celeba": 0}
            self.samples = [(os.path.join(root, "img_align_celeba", "%06d.jpg" % (i + 1)), 0) for i in range(TRAIN_N)]
            self.targets = [s[1] for s in self.samples]
            self.imgs = self.samples

    ImageFolder.__module__ = real.__module__
    ImageFolder.__qualname__ = real.__qualname__
    ds.ImageFolder = ImageFolder
    try:  # `from torchvision.datasets.folder import ImageFolder` gets the same class
        import torchvision.datasets.folder as folder

        folder.ImageFolder = ImageFolder
    except Exception:
        pass


class _Visdom(object):
    def __init__(self, *args, **kwargs):
        pass

    def __getattr__(self, name):
        return lambda *args, **kwargs: None


_viz = types.ModuleType("visdom")
_viz.Visdom = _Visdom
sys.modules.setdefault("visdom", _viz)

when_imported("torchvision.datasets", _patch_datasets)  # noqa: F821 (provided by the probe)
