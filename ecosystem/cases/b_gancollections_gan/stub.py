# Stub for znxlwm/pytorch-generative-model-collections (main.py -> GAN.py, dataloader.py, utils.py), run by the
# probe in every process first. Replaces only what comes from outside the repository:
#   * torchvision.datasets.CIFAR10 (downloaded into data/cifar10 by dataloader.py): a subclass of the real class
#     whose __init__ fills .data (N, 32, 32, 3) uint8 and .targets (list of int 0..9) with seeded noise instead
#     of downloading/reading the pickles; torchvision's own __getitem__/__len__ are kept, so every item is an
#     RGB PIL image that goes through the script's Resize + ToTensor + Normalize. train: TRAIN_N samples.
#   * scipy.misc.imsave (removed from SciPy in 1.2; utils.imsave calls it to write the per-epoch sample grid):
#     a stand-in that writes the array as a PNG with PIL, byte-scaled min..max to 0..255 as the old function did.
#   * imageio (a third-party package the repository needs and the venv lacks; utils.generate_animation reads the
#     per-epoch PNGs back and writes a GIF): when it is not installed, a tiny module with imread (PIL -> ndarray)
#     and mimsave(path, images, fps=...) (PIL animated GIF).
import importlib.util
import sys
import types

TRAIN_N = 48


def _patch_datasets(ds):
    import numpy as np
    from torchvision.datasets.vision import VisionDataset

    real = ds.CIFAR10

    class CIFAR10(real):
        def __init__(self, root, train=True, transform=None, target_transform=None, download=False):
            VisionDataset.__init__(self, root, transform=transform, target_transform=target_transform)
            self.train = train
            n = TRAIN_N if train else 40
            rs = np.random.RandomState(1111 if train else 2222)
            self.data = rs.randint(0, 256, size=(n, 32, 32, 3), dtype=np.uint8)
            self.targets = [int(t) for t in rs.randint(0, 10, size=n)]
            self.classes = ["airplane", "automobile", "bird", "cat", "deer", "dog", "frog", "horse", "ship",
                            "truck"]
            self.class_to_idx = {c: i for i, c in enumerate(self.classes)}

    CIFAR10.__module__ = real.__module__
    CIFAR10.__qualname__ = real.__qualname__
    ds.CIFAR10 = CIFAR10


def _imsave(path, arr):
    import numpy as np
    from PIL import Image

    a = np.asarray(arr, dtype=np.float64)
    lo, hi = a.min(), a.max()
    a = (a - lo) / (hi - lo) * 255.0 if hi > lo else np.zeros_like(a)
    Image.fromarray(np.clip(a + 0.5, 0, 255).astype(np.uint8)).save(path)


def _patch_scipy_misc(misc):
    if not hasattr(misc, "imsave"):
        misc.imsave = _imsave


def _fake_imageio():
    mod = types.ModuleType("imageio")

    def imread(path, *args, **kwargs):
        import numpy as np
        from PIL import Image

        with Image.open(path) as im:
            return np.asarray(im.convert("RGB"))

    def mimsave(path, images, fps=10, **kwargs):
        from PIL import Image

        frames = [Image.fromarray(im) for im in images]
        frames[0].save(path, save_all=True, append_images=frames[1:], duration=int(1000 / fps), loop=0)

    mod.imread = imread
    mod.mimsave = mimsave
    mod.__version__ = "0-stub"
    return mod


when_imported("torchvision.datasets", _patch_datasets)  # noqa: F821 (provided by the probe)
when_imported("scipy.misc", _patch_scipy_misc)  # noqa: F821
if importlib.util.find_spec("imageio") is None:
    sys.modules["imageio"] = _fake_imageio()
