"""DDP030-DDP033 and DDP140: the rules of project mode (migrator.project).

They run on modules that a migrated training script imports (its trainer class, its loader
helper, its checkpoint saver), never on a file alone: `ddp-migrate train.py` reports what such a
module needs (DDP140), `ddp-migrate .` (or naming the module too) changes it.
"""
from __future__ import annotations

from migrator.rule import Example, Rule

_LOADERS_BEFORE = '''from torch.utils.data import DataLoader


def make_data_loader(args, train_set, val_set):
    train_loader = DataLoader(train_set, batch_size=args.batch_size, shuffle=True)
    val_loader = DataLoader(val_set, batch_size=args.batch_size, shuffle=False)
    return train_loader, val_loader
'''

MODULE_SAMPLER = Rule(
    code="DDP030",
    name="module-distributed-sampler",
    summary="a shuffled DataLoader built in a module the training script imports gets a DistributedSampler",
    what="""
In project mode, a module that a migrated training script imports builds a shuffled DataLoader
(`DataLoader(ds, shuffle=True)`, or `super().__init__(...)` in a DataLoader subclass). A
DistributedSampler is created beside it when a process group is set up, and the loader reads it.""",
    why="""
Without a sampler every process trains on the whole data set in its own random order: N times
the work per epoch, and not the data parallelism DDP is for. The module may have other callers
(an evaluation script) that never set up a process group: for them nothing changes.""",
    fix="""
`sampler = DistributedSampler(ds, shuffle=True) if dist.is_initialized() else None` before the
loader, and `shuffle=sampler is None, sampler=sampler` in it (`shuffle=<flag> and sampler is None`
when shuffling is a parameter or a test such as `mode == "train"`: the sampler is only made when
it is true). Loaders read in order (evaluation) stay whole.""",
    fix_safety="""
Safe: the sampler only exists under a process group. A data set given as an expression (it would
be built twice), a shuffle that calls something (it would run twice) or a positional sampler
argument is reported (DDP140).""",
    requires=('DDP001',),
    fixable=True,
    examples=(
        Example(
            id="shuffled-in-training-mode",
            before='''from torch.utils import data


def get_loader(dataset, batch_size, mode="train"):
    loader = data.DataLoader(dataset=dataset, batch_size=batch_size, shuffle=(mode == "train"))
    return loader
''',
            after='''from torch.utils import data
import torch.distributed as dist
from torch.utils.data.distributed import DistributedSampler


def get_loader(dataset, batch_size, mode="train"):
    sampler = DistributedSampler(dataset, shuffle=True) if (mode == "train") and dist.is_initialized() else None
    loader = data.DataLoader(dataset=dataset, batch_size=batch_size, shuffle=(mode == "train") and sampler is None, sampler=sampler)
    return loader
''',
        ),
        Example(
            id="sampler-chosen-at-run-time",
            before='''from torch.utils.data import DataLoader


class BaseDataLoader(DataLoader):
    def __init__(self, dataset, batch_size, shuffle, sampler=None):
        self.sampler = sampler
        self.init_kwargs = {"dataset": dataset, "batch_size": batch_size, "shuffle": shuffle}
        super().__init__(sampler=self.sampler, **self.init_kwargs)
''',
            after='''from torch.utils.data import DataLoader
import torch.distributed as dist
from torch.utils.data.distributed import DistributedSampler


class BaseDataLoader(DataLoader):
    def __init__(self, dataset, batch_size, shuffle, sampler=None):
        self.sampler = sampler
        self.init_kwargs = {"dataset": dataset, "batch_size": batch_size, "shuffle": shuffle}
        dist_sampler = self.sampler
        if dist_sampler is None and dist.is_initialized() and self.init_kwargs.get("shuffle"):  # shuffled, no sampler of its own
            dist_sampler = DistributedSampler(self.init_kwargs["dataset"], shuffle=True)  # this rank's shard
        super().__init__(sampler=dist_sampler, **(dict(self.init_kwargs, shuffle=False) if dist_sampler is not self.sampler else self.init_kwargs))
''',
            diagnostics=("DDP140",),
        ),
        Example(
            id="loader-helper",
            before=_LOADERS_BEFORE,
            after='''from torch.utils.data import DataLoader
import torch.distributed as dist
from torch.utils.data.distributed import DistributedSampler


def make_data_loader(args, train_set, val_set):
    train_sampler = DistributedSampler(train_set, shuffle=True) if dist.is_initialized() else None
    train_loader = DataLoader(train_set, batch_size=args.batch_size, shuffle=train_sampler is None, sampler=train_sampler)
    val_loader = DataLoader(val_set, batch_size=args.batch_size, shuffle=False)
    return train_loader, val_loader
''',
        ),
        Example(
            id="dataloader-subclass",
            before='''from torch.utils.data import DataLoader


class BaseDataLoader(DataLoader):
    def __init__(self, dataset, batch_size, shuffle):
        super().__init__(dataset, batch_size=batch_size, shuffle=shuffle)
''',
            after='''from torch.utils.data import DataLoader
import torch.distributed as dist
from torch.utils.data.distributed import DistributedSampler


class BaseDataLoader(DataLoader):
    def __init__(self, dataset, batch_size, shuffle):
        sampler = DistributedSampler(dataset, shuffle=True) if shuffle and dist.is_initialized() else None
        super().__init__(dataset, batch_size=batch_size, shuffle=shuffle and sampler is None, sampler=sampler)
''',
        ),
        Example(
            id="loader-with-its-own-sampler",
            before='''from torch.utils.data import DataLoader, WeightedRandomSampler


def train_loader(ds, weights):
    return DataLoader(ds, batch_size=8, sampler=WeightedRandomSampler(weights, len(ds)))
''',
            fires=False,
        ),
    ),
)

MODULE_SET_EPOCH = Rule(
    code="DDP031",
    name="module-set-epoch",
    summary="a training loop over a loader, in a module the training script imports, sets the sampler's epoch",
    what="""
In project mode, a loop that trains (a backward pass or an optimizer step, here or in the code it
calls) over a loader, directly or through `enumerate`, `tqdm` or a `tbar = tqdm(loader)` variable,
gets `loader.sampler.set_epoch(epoch)` before it: what a training loop walks over is its data,
whatever it is called and wherever it was built (a config factory, `build_loaders(cfg)`), and the
call is guarded by the sampler's type, so anything else runs as before. The epoch is the variable
of a counting loop around it (`for epoch in range(...)`), or the one its callers pass in from such
a loop (`self._train_epoch(epoch)`, followed from the script's calls and the module's own, into a
subclass's override too); without one, the sampler's own count moves on by one each pass
(`set_epoch(loader.sampler.epoch + 1)`).
The migrated script itself gets it too, for loops over loaders its imported modules build.""",
    why="""
DistributedSampler shuffles by its seed plus the epoch; unless `set_epoch` moves the epoch on,
every epoch visits the shards in the same order.""",
    fix="""
`if isinstance(getattr(loader, "sampler", None), DistributedSampler): loader.sampler.set_epoch(epoch)`
before the loop: it does nothing for a caller whose loader has no DistributedSampler.""",
    fix_safety="""
Safe: a loop over anything without a DistributedSampler runs as before. A function that calls
`set_epoch` already is left alone.""",
    requires=('DDP001',),
    fixable=True,
    examples=(
        Example(
            id="trainer-epoch-method",
            before='''import torch


class Trainer:
    def _train_epoch(self, epoch):
        self.model.train()
        for data, target in self.data_loader:
            self.optimizer.zero_grad()
            self.criterion(self.model(data), target).backward()
            self.optimizer.step()
''',
            after='''import torch
from torch.utils.data.distributed import DistributedSampler


class Trainer:
    def _train_epoch(self, epoch):
        self.model.train()
        if isinstance(getattr(self.data_loader, "sampler", None), DistributedSampler):  # a new order each epoch
            self.data_loader.sampler.set_epoch(epoch)
        for data, target in self.data_loader:
            self.optimizer.zero_grad()
            self.criterion(self.model(data), target).backward()
            self.optimizer.step()
''',
            handed=(("epoch", "Trainer._train_epoch", "epoch"),),
        ),
        Example(
            id="data-from-a-config-factory",
            before='''import torch


class Trainer:
    def __init__(self, model, optimizer, source):
        self.model, self.optimizer, self.source = model, optimizer, source  # `config.init_obj("data_loader", ...)`

    def fit(self, epochs):
        for epoch in range(epochs):
            for x, y in self.source:
                self.optimizer.zero_grad()
                torch.nn.functional.mse_loss(self.model(x), y).backward()
                self.optimizer.step()
''',
            after='''import torch
from torch.utils.data.distributed import DistributedSampler


class Trainer:
    def __init__(self, model, optimizer, source):
        self.model, self.optimizer, self.source = model, optimizer, source  # `config.init_obj("data_loader", ...)`

    def fit(self, epochs):
        for epoch in range(epochs):
            if isinstance(getattr(self.source, "sampler", None), DistributedSampler):  # a new order each epoch
                self.source.sampler.set_epoch(epoch)
            for x, y in self.source:
                self.optimizer.zero_grad()
                torch.nn.functional.mse_loss(self.model(x), y).backward()
                self.optimizer.step()
''',
        ),
        Example(
            id="one-pass-per-call",
            before='''def train_one_pass(model, optimizer, batches):
    for x, y in batches:
        optimizer.zero_grad()
        model(x).sum().backward()
        optimizer.step()
''',
            after='''from torch.utils.data.distributed import DistributedSampler
def train_one_pass(model, optimizer, batches):
    if isinstance(getattr(batches, "sampler", None), DistributedSampler):  # a new order each epoch
        batches.sampler.set_epoch(batches.sampler.epoch + 1)
    for x, y in batches:
        optimizer.zero_grad()
        model(x).sum().backward()
        optimizer.step()
''',
        ),
        Example(
            id="evaluation-loop",
            before='''import torch


def evaluate(model, val_loader, epoch):
    with torch.no_grad():
        for x, y in val_loader:
            model(x)
''',
            fires=False,
        ),
    ),
)

MODULE_RANK_ZERO_SAVE = Rule(
    code="DDP032",
    name="module-rank-zero-checkpoint",
    summary="checkpoints written in a module the training script imports are written by rank 0 only",
    what="""
In project mode, a `torch.save` of a checkpoint in a module that a migrated training script
imports runs on rank 0 only: a function that only writes (`save_checkpoint`, an `on_epoch_end`
hook: it returns nothing, keeps no state the ranks share, and runs nothing every rank must run,
neither the model's forward nor a method of its class, a load, a training step or a collective)
returns early on the other ranks, so what it does after the save (copying the best model, writing
a score file) is rank 0's too; any other `torch.save` is put under `if not dist.is_initialized() or dist.get_rank() == 0:`.

A save is a checkpoint by what it writes, whatever it is called: a value that carries a
`state_dict()`, the script's model, or a state the script hands over (`save_checkpoint({"state_dict":
model.state_dict()}, is_best)` fills the helper's `state`), itself or through a local the function
builds (`state = {...}`, `save_dict["model"] = ...`). Project mode follows the model and such
states from the script's calls into the modules.""",
    why="""
Every rank reaching the save writes the same file at the same time: wasted I/O at best, a
truncated or interleaved checkpoint at worst, and a copy of a file another rank is still writing.""",
    fix="The rank check, conditional on a process group: a caller without one still saves.",
    fix_safety="""
Safe for checkpoints. A `torch.save` of anything else (a cache of processed data that every rank
reads back, or a parameter no caller is seen to fill with a model's state) is reported (DDP140),
not guarded; a save under a rank check already is left alone.""",
    requires=('DDP001',),
    fixable=True,
    examples=(
        Example(
            id="saver-class",
            before='''import shutil

import torch


class Saver:
    def save_checkpoint(self, state, is_best, filename="checkpoint.pth.tar"):
        torch.save(state, filename)
        if is_best:
            shutil.copyfile(filename, "model_best.pth.tar")
''',
            after='''import shutil

import torch
import torch.distributed as dist


class Saver:
    def save_checkpoint(self, state, is_best, filename="checkpoint.pth.tar"):
        if dist.is_initialized() and dist.get_rank() != 0:
            return  # one copy of each checkpoint: rank 0 writes it
        torch.save(state, filename)
        if is_best:
            shutil.copyfile(filename, "model_best.pth.tar")
''',
            handed=(("state", "Saver.save_checkpoint", "state"),),
        ),
        Example(
            id="state-built-here",
            before='''import torch


def save_model(model, epoch, path):
    state = {"epoch": epoch}
    state["model"] = model.state_dict()
    torch.save(state, path)
''',
            after='''import torch
import torch.distributed as dist


def save_model(model, epoch, path):
    state = {"epoch": epoch}
    state["model"] = model.state_dict()
    if not dist.is_initialized() or dist.get_rank() == 0:
        torch.save(state, path)
''',
        ),
        Example(
            id="a-hook-that-only-writes",
            before='''import shutil

import torch


def on_epoch_end(epoch, state, path):
    torch.save(state, path)
    shutil.copyfile(path, "last.pt")
''',
            after='''import shutil

import torch
import torch.distributed as dist


def on_epoch_end(epoch, state, path):
    if dist.is_initialized() and dist.get_rank() != 0:
        return  # one copy of each checkpoint: rank 0 writes it
    torch.save(state, path)
    shutil.copyfile(path, "last.pt")
''',
            handed=(("state", "on_epoch_end", "state"),),
        ),
        Example(
            id="evaluates-before-it-saves",
            before='''import shutil

import torch


class Trainer:
    def save_best(self, loader, state, path):
        self.evaluate(loader)
        torch.save(state, path)
        shutil.copyfile(path, "best.pt")
''',
            fires=False,
            diagnostics=("DDP140",),
            handed=(("state", "Trainer.save_best", "state"),),
        ),
        Example(
            id="data-cache",
            before='''import os

import torch


def load_features(dataset, path):
    if not os.path.exists(path):
        features = torch.stack([sample for sample, _ in dataset])
        torch.save(features, path)
    return torch.load(path)
''',
            fires=False,
            diagnostics=("DDP140",),
        ),
        Example(
            id="already-on-rank-zero",
            before='''import torch


def save_on_master(state, path, rank):
    if rank == 0:
        torch.save(state, path)
''',
            fires=False,
        ),
    ),
)

MODULE_CHECKPOINT_KEYS = Rule(
    code="DDP033",
    name="module-checkpoint-keys",
    summary="a model saved or loaded in a module the training script imports keeps its original keys",
    what="""
In project mode, when the training script's model was not wrapped in DataParallel for good (its
checkpoints had the bare module's keys), `model.state_dict()` and `model.load_state_dict(...)` on
the script's model in an imported module go through `.module` when the model is wrapped in DDP.
The model is followed from the script's calls into the module (`Trainer(model, ...)`,
`save_checkpoint(model, epoch)`): through parameters, `self.x = model`, a local `net = self.x`, the
functions it is passed on to and base classes, whatever it is called there; an object that is only
named like a model (`self.model_dir`) is left alone.

The script's model pickled whole (`state = {"epoch": epoch, "model": model}; torch.save(state,
path)`) is saved as the bare module, whatever DataParallel the script had.""",
    why="""
DDP's own `state_dict()` prefixes every key with `module.`: checkpoints written after the
migration would no longer load into the unwrapped model (an evaluation script, a resumed run).
A pickled DDP wrapper is worse: it cannot be loaded without a process group, and a run resumed
from it wraps it in DDP a second time.""",
    fix="`(model.module if isinstance(model, DDP) else model).state_dict()`; `(model.module if isinstance(model, DDP) else model)` where the model is saved whole.",
    fix_safety="Safe: a model that is not wrapped is used as before. A module that spells `.module.` itself is left alone.",
    requires=('DDP003',),
    fixable=True,
    examples=(
        Example(
            id="trainer-saves-model",
            before='''import torch


class BaseTrainer:
    def _save_checkpoint(self, epoch):
        torch.save({"epoch": epoch, "state_dict": self.model.state_dict()}, f"epoch{epoch}.pth")
''',
            after='''import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel as DDP


class BaseTrainer:
    def _save_checkpoint(self, epoch):
        if dist.is_initialized() and dist.get_rank() != 0:
            return  # one copy of each checkpoint: rank 0 writes it
        torch.save({"epoch": epoch, "state_dict": (self.model.module if isinstance(self.model, DDP) else self.model).state_dict()}, f"epoch{epoch}.pth")
''',
            handed=(("model", "BaseTrainer", "self.model"),),
        ),
        Example(
            id="model-pickled-in-a-dict",
            before='''import torch


def save_checkpoint(epoch, model, optimizer):
    state = {"epoch": epoch, "model": model, "optimizer": optimizer}
    torch.save(state, "checkpoint.pth.tar")
''',
            after='''import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel as DDP


def save_checkpoint(epoch, model, optimizer):
    if dist.is_initialized() and dist.get_rank() != 0:
        return  # one copy of each checkpoint: rank 0 writes it
    state = {"epoch": epoch, "model": (model.module if isinstance(model, DDP) else model), "optimizer": optimizer}
    torch.save(state, "checkpoint.pth.tar")
''',
            handed=(("model", "save_checkpoint", "model"),),
        ),
        Example(
            id="optimizer-state",
            before='''import torch


def save(optimizer, path):
    torch.save(optimizer.state_dict(), path)
''',
            after='''import torch
import torch.distributed as dist


def save(optimizer, path):
    if dist.is_initialized() and dist.get_rank() != 0:
        return  # one copy of each checkpoint: rank 0 writes it
    torch.save(optimizer.state_dict(), path)
''',
            fires=False,
        ),
    ),
)

MODULE_NEEDS_MIGRATION = Rule(
    code="DDP140",
    name="project-module-needs-migration",
    summary="a module the training script imports needs a change that project mode could not make",
    what="""
A migrated training script imports a module of its project that needs a DDP change: a shuffled
DataLoader without a DistributedSampler, a training loop with no `set_epoch`, a checkpoint every
rank writes. Either the module is not among the files ddp-migrate was given (the finding, on the
script, names the module, the line and the change), or the change could not be made safely
there (the finding is on the module, with the reason).""",
    why="A half-migrated project trains silently wrong: the script runs DDP, the loader in the other file does not shard.",
    fix="""
Run ddp-migrate on the project's folder (`ddp-migrate --diff .`) or name the module too; make
the change by hand where the finding says it cannot be made.""",
    fix_safety="Report only.",
    fixable=False,
    examples=(
        Example(
            id="dataset-built-inline",
            before='''from torch.utils.data import DataLoader


def make_loader(args):
    return DataLoader(build_dataset(args), batch_size=8, shuffle=True)
''',
            diagnostics=("DDP140",),
        ),
    ),
)

RULES = (MODULE_SAMPLER, MODULE_SET_EPOCH, MODULE_RANK_ZERO_SAVE, MODULE_CHECKPOINT_KEYS, MODULE_NEEDS_MIGRATION)

MODULE_MODEL_API = Rule(
    code="DDP034",
    name="module-model-api",
    summary="a module the training script imports reaches the model's own methods and submodules through `.module`",
    what="""
In project mode, a module that a migrated training script imports uses what the user's model
class defines on the model it is handed (`self.model.encoder`, `model.configure_optimizers(cfg)`,
`self.model.get_1x_lr_params()`): it goes through `.module` when the model is wrapped in DDP. The
model is the one the script hands over, followed as for DDP033, whatever the module calls it.""",
    why="""
DistributedDataParallel forwards the forward pass and nn.Module's own API (parameters,
state_dict, train/eval, to), not the attributes of the class it wraps: `ddp.encoder` raises
AttributeError the first time the trainer runs on the migrated script.""",
    fix="`(model.module if isinstance(model, DDP) else model).encoder`.",
    fix_safety="""
Safe: a model that is not wrapped is used as before. Left alone in a module that spells
`.module.` itself (written for DataParallel, which has the same limits) and for a script whose
model was wrapped in DataParallel for good.""",
    requires=('DDP003',),
    fixable=True,
    examples=(
        Example(
            id="trainer-asks-the-model",
            before='''import torch


class Trainer:
    def __init__(self, model, config):
        self.model = model
        self.optimizer = self.model.configure_optimizers(config)
''',
            after='''import torch
from torch.nn.parallel import DistributedDataParallel as DDP


class Trainer:
    def __init__(self, model, config):
        self.model = model
        self.optimizer = (self.model.module if isinstance(self.model, DDP) else self.model).configure_optimizers(config)
''',
            handed=(("model", "Trainer", "self.model"),),
        ),
        Example(
            id="named-like-the-model",
            before='''import torch


class Trainer:
    def __init__(self, model, model_dir):
        self.model = model
        self.model_dir = model_dir

    def checkpoint_path(self, epoch):
        return self.model_dir.joinpath(f"epoch{epoch}.pt")
''',
            handed=(("model", "Trainer", "self.model"),),
            fires=False,
        ),
        Example(
            id="module-api-is-forwarded",
            before='''import torch


class Trainer:
    def __init__(self, model):
        self.model = model
        self.optimizer = torch.optim.SGD(self.model.parameters(), lr=0.1)
''',
            fires=False,
        ),
    ),
)

RULES = RULES[:4] + (MODULE_MODEL_API,) + RULES[4:]

MODULE_RANK_ZERO_OUTPUT = Rule(
    code="DDP035",
    name="module-rank-zero-output",
    summary="prints and progress bars in a module the training script imports show on rank 0 only",
    what="""
In project mode, in the functions and methods of a module that a migrated training script
imports: a `print(...)` statement runs under `if int(os.environ.get("RANK", 0)) == 0:`, and a tqdm
progress bar without `disable=` gets `disable=int(os.environ.get("RANK", 0)) != 0`, and a
`wandb.init(...)` gets `mode=None if int(os.environ.get("RANK", 0)) == 0 else "disabled"` (rank 0
keeps the mode it had; the other ranks' run is disabled, and logging to it does nothing). torchrun's
RANK decides, not the process group, since such code often runs before the script sets it up (a
config parser, a data set). Code already under a rank check, and the module's own
`if __name__ == "__main__":` block, are left alone.""",
    why="""
The script's training calls these functions on every rank: an evaluation helper's progress bar,
a visualizer's loss printer or a data set's "loaded N images" appear once per process, the bars
of several ranks overwrite each other, and the log is N times as long.""",
    fix="The rank check on torchrun's RANK: a caller run as a plain process (no RANK) prints as before.",
    fix_safety="""
Safe: only what is shown changes. A print that reports a failure on one rank is shown by rank 0
only; exceptions still reach every rank's traceback.""",
    requires=('DDP001',),
    fixable=True,
    examples=(
        Example(
            id="evaluation-helper",
            before='''import torch
from tqdm import tqdm


def evaluate(net, loader):
    net.eval()
    correct = 0
    for x, y in tqdm(loader, desc="Validation", leave=False):
        correct += (net(x).argmax(1) == y).sum().item()
    print(f"accuracy {correct / len(loader.dataset):.3f}")
    net.train()
    return correct
''',
            after='''import torch
from tqdm import tqdm
import os


def evaluate(net, loader):
    net.eval()
    correct = 0
    for x, y in tqdm(loader, desc="Validation", leave=False, disable=int(os.environ.get("RANK", 0)) != 0):
        correct += (net(x).argmax(1) == y).sum().item()
    if int(os.environ.get("RANK", 0)) == 0:
        print(f"accuracy {correct / len(loader.dataset):.3f}")
    net.train()
    return correct
''',
        ),
        Example(
            id="experiment-run-of-a-trainer",
            before='''import wandb


class Trainer:
    def __init__(self, model, config):
        self.model = model
        self.run = wandb.init(project="demo", config=config, mode=config.get("wandb_mode"))

    def log(self, step, loss):
        self.run.log({"loss": loss}, step=step)
''',
            after='''import wandb
import os


class Trainer:
    def __init__(self, model, config):
        self.model = model
        self.run = wandb.init(project="demo", config=config, mode=config.get("wandb_mode") if int(os.environ.get("RANK", 0)) == 0 else "disabled")

    def log(self, step, loss):
        self.run.log({"loss": loss}, step=step)
''',
        ),
        Example(
            id="already-rank-checked",
            before='''def report(loss, rank):
    if rank == 0:
        print(f"loss {loss:.4f}")


if __name__ == "__main__":
    print("a demo")
''',
            fires=False,
        ),
    ),
)

RULES = RULES + (MODULE_RANK_ZERO_OUTPUT,)

MODULE_SHARED_FOLDERS = Rule(
    code="DDP036",
    name="module-shared-folders",
    summary="folders created in a module the training script imports tolerate the other ranks' copy under torchrun",
    what="""
In project mode, in a module that a migrated training script imports, `Path.mkdir(...)` and
`os.makedirs(...)` that raise when the folder exists (no `exist_ok`, `exist_ok=False`, or an
expression: a config object naming each run's folder by the time) get
`exist_ok=... or "RANK" in os.environ`. `os.mkdir(path)` becomes `os.makedirs(path, exist_ok=...)`
the same way. Run as a plain process (no `RANK` from torchrun), the refusal of an existing folder
stays as it was.""",
    why="""
Such a module often runs before the process group exists (a config parser built from the command
line, naming `saved/models/<name>/<run id>`): every rank creates the same run folder at once, and
all but the first die with FileExistsError before training starts.""",
    fix='`exist_ok=<as before> or "RANK" in os.environ`.',
    fix_safety="""
Under torchrun a folder left by an earlier run with the same name is reused instead of refused
(the ranks cannot tell it from one another rank just made); as a plain process nothing changes.""",
    requires=('DDP001',),
    fixable=True,
    examples=(
        Example(
            id="config-run-folder",
            before='''from datetime import datetime
from pathlib import Path


class ConfigParser:
    def __init__(self, config, run_id=None):
        run_id = run_id or datetime.now().strftime(r"%m%d_%H%M%S")
        self.save_dir = Path(config["save_dir"]) / "models" / run_id
        self.save_dir.mkdir(parents=True, exist_ok=run_id == "")
''',
            after='''from datetime import datetime
from pathlib import Path
import os


class ConfigParser:
    def __init__(self, config, run_id=None):
        run_id = run_id or datetime.now().strftime(r"%m%d_%H%M%S")
        self.save_dir = Path(config["save_dir"]) / "models" / run_id
        self.save_dir.mkdir(parents=True, exist_ok=run_id == "" or "RANK" in os.environ)
''',
        ),
        Example(
            id="already-exist-ok",
            before='''import os


def prepare(out):
    os.makedirs(out, exist_ok=True)
''',
            fires=False,
        ),
    ),
)

RULES = RULES + (MODULE_SHARED_FOLDERS,)

MODULE_NETWORK_FACTORY = Rule(
    code="DDP037",
    name="module-network-factory",
    summary="a network factory's DataParallel, in a module the training script imports, runs only without a process group",
    what="""
In project mode, a function of a module that a migrated training script imports is handed a
network, wraps it in DataParallel (`net = torch.nn.DataParallel(net, gpu_ids)`) and returns it:
the factory every network of an image-to-image framework goes through (`init_net`). The
DataParallel runs only when no process group is set up; the caller, migrated with it, wraps the
network it gets back in DDP.""",
    why="""
DDP around a DataParallel (or a DataParallel around DDP) breaks: under torchrun each process
drives one GPU, and DDP replaces the DataParallel. The factory goes on to initialise the weights,
which it did after the wrap; DDP's wrap comes after the factory returns, so rank 0's initial
weights are what every rank starts from.""",
    fix="`if not dist.is_initialized():` around the DataParallel assignment.",
    fix_safety="""
Safe: without a process group (a plain evaluation script that imports the factory) the network is
wrapped as before. Any other DataParallel in such a module (one that is not handed in and
returned) is reported (DDP140) and blocks the script's migration.""",
    requires=('DDP001',),
    fixable=True,
    examples=(
        Example(
            id="init-net",
            before='''import torch


def init_net(net, gpu_ids=()):
    if len(gpu_ids) > 0:
        net.to(gpu_ids[0])
        net = torch.nn.DataParallel(net, gpu_ids)
    return net
''',
            after='''import torch
import torch.distributed as dist


def init_net(net, gpu_ids=()):
    if len(gpu_ids) > 0:
        net.to(gpu_ids[0])
        if not dist.is_initialized():
            net = torch.nn.DataParallel(net, gpu_ids)
    return net
''',
        ),
        Example(
            id="trainer-keeps-its-dataparallel",
            before='''import torch


class Trainer:
    def __init__(self, model):
        self.model = torch.nn.DataParallel(model)
''',
            fires=False,
            diagnostics=('DDP140',),
        ),
    ),
)

MODULE_DEVICE_LIST = Rule(
    code="DDP038",
    name="module-device-list",
    summary="the GPU list an option parser sets the device from is the process's own GPU under torchrun",
    what="""
In project mode, a module that a migrated training script imports sets the device from the first
GPU of a list (`torch.cuda.set_device(opt.gpu_ids[0])` after `--gpu_ids 0,1` was parsed into
`opt.gpu_ids`). Under torchrun the list becomes the process's own GPU (`[LOCAL_RANK]`) before the
call, so every use of it later (the models' device, the network factory's `gpu_ids`) is that GPU.""",
    why="""
The script's setup gives each process its GPU; the parser would set every process back to the
first GPU of the list, and the models would all be built there.""",
    fix='`if "LOCAL_RANK" in os.environ: opt.gpu_ids = [int(os.environ["LOCAL_RANK"])]` before the call.',
    fix_safety="""
Safe: as a plain process (no LOCAL_RANK) the list stays as parsed, and under torchrun a CPU run
(an empty list) never reaches the call. `--gpu_ids 2,3` under torchrun becomes GPUs 0 and 1 of
what the process sees: choose the GPUs with CUDA_VISIBLE_DEVICES.""",
    requires=('DDP001',),
    fixable=True,
    examples=(
        Example(
            id="gpu-ids-option",
            before='''import torch


def parse(parser):
    opt = parser.parse_args()
    opt.gpu_ids = [int(i) for i in opt.gpu_ids.split(",") if int(i) >= 0]
    if len(opt.gpu_ids) > 0:
        torch.cuda.set_device(opt.gpu_ids[0])
    return opt
''',
            after='''import torch
import os


def parse(parser):
    opt = parser.parse_args()
    opt.gpu_ids = [int(i) for i in opt.gpu_ids.split(",") if int(i) >= 0]
    if len(opt.gpu_ids) > 0:
        if "LOCAL_RANK" in os.environ:  # torchrun: each process drives its own GPU
            opt.gpu_ids = [int(os.environ["LOCAL_RANK"])]
        torch.cuda.set_device(opt.gpu_ids[0])
    return opt
''',
        ),
        Example(
            id="device-from-an-integer",
            before='''import torch


def setup(args):
    torch.cuda.set_device(args.gpu)
''',
            fires=False,
        ),
    ),
)

RULES = RULES + (MODULE_NETWORK_FACTORY, MODULE_DEVICE_LIST)
