"""DDP031 in a module a migrated script imports: a training loop over a loader gets `set_epoch` in
reach of its epoch number (or the sampler's own count of passes), and a loader started again
when it runs dry moves its epoch on."""
from __future__ import annotations

from typing import Dict, Optional

import libcst as cst

from migrator.graph.bindings import dotted_name
from migrator.rule import Example, Rule
from migrator.rules.modules.base import ModulePlanner, calls_in, source_of
from migrator.tree import descendants

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


class Epochs(ModulePlanner):
    """DDP031: the epoch of the loaders the module's training loops walk over."""

    def _set_epoch(self, loop: cst.For) -> None:
        function = self._enclosing(loop, cst.FunctionDef)
        loader = iterated_loader(loop.iter, self._wrappers(function or self.module))
        # What a training loop walks over is its data, whatever it is called: the set_epoch below
        # is guarded by the sampler's type, so a list or an iterator of the caller's runs as before.
        passes = loader is not None and _one_pass(loop, function, loader)
        if loader is None or not (passes or self._trains(loop)):
            return
        if self._sets_epoch(function):
            return  # the epoch is set already (maybe by the per-file engine, for its own loaders)
        # The epoch number where it is known; else the sampler's own count of passes moves on by one
        # (each run of this loop is one pass over the loader: all ranks count alike).
        epoch = self._epoch_in_reach(loop, function) or f"{loader}.sampler.epoch + 1"
        statement = cst.parse_statement(
            f"if isinstance(getattr({loader}, \"sampler\", None), {self.names.sampler}):  # a new order each epoch\n"
            f"    {loader}.sampler.set_epoch({epoch})\n")
        self.plan.insert_before(loop, [statement])
        self.names.need(self.plan, sampler=True)
        where = "each pass over the wrapped loader" if passes else "before the training loop"
        self._change(MODULE_SET_EPOCH.code, loop, f"`{loader}.sampler.set_epoch({epoch})` {where}")

    def _restart_epoch(self, handler: cst.ExceptHandler) -> None:
        """`except StopIteration: data_iter = iter(train_loader)`: a loop over steps that starts the
        loader again when it runs out. Each restart is a new pass: the sampler's epoch moves on."""
        if not self._ends_iteration(handler):
            return
        if self._sets_epoch(self._enclosing(handler, cst.FunctionDef)):
            return
        # `except StopIteration:` with the restart in it, or under an `if` there (one of several loaders)
        for statement in descendants(handler.body, cst.SimpleStatementLine):
            small = statement.body[0] if isinstance(statement, cst.SimpleStatementLine) and len(statement.body) == 1 else None
            value = getattr(small, "value", None)
            if not (isinstance(small, cst.Assign) and isinstance(value, cst.Call) and dotted_name(value.func) == "iter"
                    and len(value.args) == 1 and not any(True for _ in calls_in(value.args[0].value))):
                continue  # `iter(loader)`, `iter(self.loaders[i])`: no call to run twice
            loader = source_of(value.args[0].value)
            epoch = cst.parse_statement(
                f"if isinstance(getattr({loader}, \"sampler\", None), {self.names.sampler}):  # a new order each pass\n"
                f"    {loader}.sampler.set_epoch({loader}.sampler.epoch + 1)\n")
            self.plan.insert_before(statement, [epoch])
            self.names.need(self.plan, sampler=True)
            self._change(MODULE_SET_EPOCH.code, statement, f"`{loader}.sampler.set_epoch(...)` each time the loader starts again")

    def _wrappers(self, scope: cst.CSTNode) -> Dict[str, cst.BaseExpression]:
        """`tbar = tqdm(self.train_loader, ...)` in the scope: name -> the wrapping call."""
        return {name: found[0].value for name, found in self.c.bindings.get(scope, {}).items()
                if len(found) == 1 and found[0].kind == "assignment" and isinstance(found[0].value, cst.Call)
                and dotted_name(found[0].value.func) in ITERATION_WRAPPERS}

    def _sets_epoch(self, function: Optional[cst.FunctionDef]) -> bool:
        """Does the function (None: the module) call `set_epoch` already?"""
        return any(attribute.attr.value == "set_epoch" and (function is None or self.a.is_inside(attribute, function))
                   for attribute in self.c.attributes)

    def _ends_iteration(self, handler: cst.ExceptHandler) -> bool:
        """`except StopIteration:`, or a bare `except:` / `except Exception:` around a `next(it)`:
        the handler runs when the iterator runs dry (StarGAN's solver catches everything there)."""
        caught = dotted_name(handler.type) if handler.type is not None else None
        if caught == "StopIteration":
            return True
        attempt = self.parents.get(handler)
        return caught in (None, "Exception", "BaseException") and isinstance(attempt, cst.Try) and any(
            dotted_name(n.func) == "next" for n in calls_in(attempt.body))

    def _epoch_in_reach(self, loop: cst.For, function: Optional[cst.FunctionDef]) -> Optional[str]:
        """The variable of a counting loop around `loop` (`for epoch in range(n)`: one pass of the
        data each), or the epoch the scripts pass in (`trainer.train_epoch(epoch)`)."""
        node = self.parents.get(loop)
        while node is not None and node is not function:
            if isinstance(node, cst.For) and isinstance(node.target, cst.Name) and counts(node.iter):
                return node.target.value
            node = self.parents.get(node)
        if function is not None and self.role.epochs is not None:
            cls, method = self._top_level_scope(function.body)
            for param in function.params.params:
                if self.role.epochs.holds(method, cls, param.name.value):
                    return param.name.value
        return None


def _one_pass(loop: cst.For, function: Optional[cst.FunctionDef], loader: str) -> bool:
    """`def __iter__(self): for data in self.dataloader: yield data`: a class that wraps a loader,
    each pass over it one pass over the loader (one epoch of the loop that iterates it)."""
    return (function is not None and function.name.value == "__iter__" and loader.startswith("self.")
            and any(True for _ in descendants(loop.body, cst.Yield)))


def counts(iterated: cst.BaseExpression) -> bool:
    """`range(...)`, `trange(...)`, `tqdm(range(...))`: a loop that counts (a pass over the data each turn)."""
    while isinstance(iterated, cst.Call):
        name = (dotted_name(iterated.func) or "").split(".")[-1]
        if name in ("range", "trange"):
            return True
        if name != "tqdm" or not iterated.args:
            return False
        iterated = iterated.args[0].value
    return False


ITERATION_WRAPPERS = ("enumerate", "tqdm", "tqdm.tqdm", "iter", "trange")


def iterated_loader(node: cst.BaseExpression, wrapped: Dict[str, cst.BaseExpression]) -> Optional[str]:
    """`loader`, `enumerate(self.train_loader)`, `tqdm(enumerate(loader), ...)`, or `tbar` after
    `tbar = tqdm(self.train_loader)` -> what the loop walks over, as spelled (a loader or not)."""
    for _ in range(4):
        while isinstance(node, cst.Call) and dotted_name(node.func) in ITERATION_WRAPPERS and node.args:
            node = node.args[0].value
        if isinstance(node, cst.Name) and node.value in wrapped:
            node = wrapped[node.value]
        else:
            break
    return dotted_name(node)
