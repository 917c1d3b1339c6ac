# Stub for patrickloeber/pytorchTutorial 15_transfer_learning.py (run by the probe in every process before the
# script). Replaces only what comes from outside the repository, plus one run-length patch:
#
#   * the hymenoptera data set (the tutorial tells you to download and unzip it into data/hymenoptera_data):
#     the stub lays out data/hymenoptera_data/{train,val}/{ants,bees}/*.jpg with small seeded synthetic RGB
#     JPEGs (train: 8 + 8 = 16 images, val: 4 + 4 = 8). torchvision's real ImageFolder, PIL loading and the
#     script's own transforms read them. Built under a temporary name and renamed into place (atomic): a
#     process that loses the race drops its copy.
#   * ImageNet weights (resnet18(pretrained=True) -> ResNet18_Weights.IMAGENET1K_V1.get_state_dict, a download
#     from download.pytorch.org): WeightsEnum.get_state_dict returns the state dict of a freshly built model of
#     the same architecture (builder found through torchvision.models.list_models / get_model_weights), made
#     under torch.random.fork_rng with a fixed seed: every process gets the same "pretrained" weights (as with
#     the real file) and the script's own RNG stream is left untouched. Nothing is downloaded.
#   * run length only: the script hard-codes 224-pixel crops (RandomResizedCrop(224), Resize(256),
#     CenterCrop(224)) and 25 epochs per model; at 224 px on one CPU thread a run takes minutes. The stub makes
#     torchvision.transforms.RandomResizedCrop / Resize / CenterCrop scale an int size by 2/7 (224 -> 64,
#     256 -> 73) at construction; the transforms themselves are torchvision's. ResNet-18 ends in an adaptive
#     pool, so the model and the script are otherwise unchanged. Epoch counts are not touched.
import os
import shutil

N_TRAIN_PER_CLASS = 8
N_VAL_PER_CLASS = 4
SIZE = 80
DEST = os.path.join("data", "hymenoptera_data")


def _build():
    import numpy as np
    from PIL import Image

    if os.path.isdir(DEST):
        return
    tmp = "%s.tmp.%d" % (DEST, os.getpid())
    shutil.rmtree(tmp, ignore_errors=True)
    for split, n, base in (("train", N_TRAIN_PER_CLASS, 1000), ("val", N_VAL_PER_CLASS, 2000)):
        for c, cls in enumerate(("ants", "bees")):
            d = os.path.join(tmp, split, cls)
            os.makedirs(d)
            for i in range(n):
                rng = np.random.RandomState(base + 100 * c + i)
                img = rng.randint(0, 256, (SIZE, SIZE, 3)).astype(np.uint8)
                img[..., c] = np.clip(img[..., c].astype(int) + 60, 0, 255)  # a faint class signal
                Image.fromarray(img, mode="RGB").save(os.path.join(d, "%s_%d.jpg" % (cls, i)), quality=90)
    try:
        os.rename(tmp, DEST)
    except OSError:  # another process put it there first
        shutil.rmtree(tmp, ignore_errors=True)


if os.path.isfile("15_transfer_learning.py"):
    os.makedirs("data", exist_ok=True)
    _build()


def _patch_weights(api):
    def get_state_dict(self, *args, **kwargs):
        import torch
        import torchvision.models as models

        builder = None
        for name in models.list_models():
            try:
                if models.get_model_weights(name) is type(self):
                    builder = models.get_model_builder(name)
                    break
            except Exception:
                continue
        if builder is None:
            raise RuntimeError("stub: no builder for %r" % (self,))
        with torch.random.fork_rng(devices=[]):
            torch.manual_seed(12345)
            net = builder(weights=None, num_classes=len(self.meta["categories"]))
        return net.state_dict()

    api.WeightsEnum.get_state_dict = get_state_dict


def _small(size):
    if isinstance(size, int):
        return max(8, size * 2 // 7)
    if isinstance(size, (tuple, list)) and len(size) == 1:
        return [max(8, size[0] * 2 // 7)]
    return size


def _patch_transforms(T):
    for cname in ("RandomResizedCrop", "Resize", "CenterCrop"):
        real = getattr(T, cname)

        def make(real):
            class Small(real):
                def __init__(self, size, *args, **kwargs):
                    super().__init__(_small(size), *args, **kwargs)

            Small.__name__ = real.__name__
            Small.__qualname__ = real.__qualname__
            Small.__module__ = real.__module__
            return Small

        setattr(T, cname, make(real))


when_imported("torchvision.models._api", _patch_weights)  # noqa: F821 (provided by the probe)
when_imported("torchvision.transforms", _patch_transforms)  # noqa: F821
