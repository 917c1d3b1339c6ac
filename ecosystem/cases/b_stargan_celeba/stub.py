# Stub for yunjey/stargan (main.py + solver.py + data_loader.py), run by the probe in every process first.
#
# Replaces only the CelebA files on disk that data_loader.CelebA reads (the upstream class, its preprocess()
# and __getitem__ stay as they are):
#   * data_loader.open (a module global that shadows the builtin only inside data_loader.py): when the
#     script opens the attribute file (--attr_path), it gets an in-memory list_attr_celeba.txt in the real
#     format (count line, the 40 CelebA attribute names, then "<file>.jpg  1 -1 ..." rows) with seeded
#     +1/-1 values. preprocess() keeps its own random.seed(1234) shuffle and puts the first 1999 rows in the
#     test split, so 1999 + TRAIN_N rows give exactly TRAIN_N training images.
#   * data_loader.Image: the PIL.Image module, except that Image.open(path) returns a seeded synthetic
#     RGB image (SIZE x SIZE, content derived from the file name) instead of reading a jpg. The script's own
#     transforms (RandomHorizontalFlip, CenterCrop, Resize, ToTensor, Normalize) still run on it.
# Nothing is written to disk.
import io
import types
import zlib

TRAIN_N = 32
TEST_N = 1999
SIZE = 24
ATTRS = ("5_o_Clock_Shadow Arched_Eyebrows Attractive Bags_Under_Eyes Bald Bangs Big_Lips Big_Nose Black_Hair "
         "Blond_Hair Blurry Brown_Hair Bushy_Eyebrows Chubby Double_Chin Eyeglasses Goatee Gray_Hair "
         "Heavy_Makeup High_Cheekbones Male Mouth_Slightly_Open Mustache Narrow_Eyes No_Beard Oval_Face "
         "Pale_Skin Pointy_Nose Receding_Hairline Rosy_Cheeks Sideburns Smiling Straight_Hair Wavy_Hair "
         "Wearing_Earrings Wearing_Hat Wearing_Lipstick Wearing_Necklace Wearing_Necktie Young").split()


def _attr_text():
    import random
    rng = random.Random(1111)
    n = TEST_N + TRAIN_N
    lines = [str(n), " ".join(ATTRS)]
    for i in range(n):
        vals = " ".join(rng.choice(("1", "-1")) for _ in ATTRS)
        lines.append("%06d.jpg %s" % (i + 1, vals))
    return "\n".join(lines) + "\n"


def _patch_data_loader(mod):
    import builtins
    import numpy as np
    from PIL import Image as real_image

    def fake_open(path, *args, **kwargs):
        if str(path).endswith("list_attr_celeba.txt"):
            return io.StringIO(_attr_text())
        return builtins.open(path, *args, **kwargs)

    def image_open(path, *args, **kwargs):
        seed = zlib.crc32(str(path).replace("\\", "/").rsplit("/", 1)[-1].encode())
        arr = np.random.RandomState(seed).randint(0, 256, (SIZE, SIZE, 3), dtype=np.uint8)
        return real_image.fromarray(arr, "RGB")

    shim = types.ModuleType("PIL.Image")
    shim.__dict__.update(real_image.__dict__)
    shim.open = image_open
    mod.open = fake_open
    mod.Image = shim


when_imported("data_loader", _patch_data_loader)  # noqa: F821 (provided by the probe)
