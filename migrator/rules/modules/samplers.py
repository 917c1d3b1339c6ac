"""DDP030 in a module a migrated script imports: a shuffled DataLoader built here gets this rank's
DistributedSampler when a process group is set up (and, with --batch global, its part of the batch)."""
from __future__ import annotations

import libcst as cst

from migrator.dataflow import loops_over
from migrator.graph.bindings import dotted_name
from migrator.rule import Example, Rule
from migrator.tree import descendants
from migrator.rules.modules.base import (
    ModulePlanner, assigned_target, calls_in, is_false, is_plain_reference, is_true, short, source_of,
)

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
            id="loader-read-here-for-statistics",
            before='''import torch
from torch.utils.data import DataLoader


def get_mean_and_std(dataset):
    dataloader = DataLoader(dataset, batch_size=1, shuffle=True)
    mean = torch.zeros(3)
    for inputs, targets in dataloader:
        mean += inputs.mean(dim=(0, 2, 3))
    return mean / len(dataset)
''',
            fires=False,
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

SAMPLER_KEYWORDS = ("sampler", "batch_sampler")


class Samplers(ModulePlanner):
    """DDP030: the module's shuffled DataLoaders."""

    def _sampler(self, call: cst.Call) -> None:
        if not (self._is_dataloader(call) or self._is_dataloader_super_init(call)):
            return
        own = next((arg for arg in call.args if arg.keyword is not None and arg.keyword.value in SAMPLER_KEYWORDS), None)
        if own is not None:
            if self._random_sampler(call, own) or self._sampler_chosen_at_run_time(call, own):
                return
            if any(arg.star == "**" and isinstance(arg.value, cst.IfExp) for arg in call.args):
                return  # `**(dict(kwargs, shuffle=False) if sampler is not chosen else kwargs)`: migrated already
            if "distributed" not in source_of(own.value).lower() and shuffles_or_samples(own.value):
                self._report(call, f"a DataLoader with its own {own.keyword.value} (`{short(own.value)}`) in a module a "
                                   "training script imports: under DDP every rank would draw from the whole data set; "
                                   "shard it by hand (a DistributedSampler, or the sampler over this rank's indices)")
            return
        positional = [arg for arg in call.args if arg.keyword is None and not arg.star]
        shuffle = next((arg for arg in call.args if arg.keyword is not None and arg.keyword.value == "shuffle"), None)
        if shuffle is None and len(positional) >= 3:
            shuffle = positional[2]
        if shuffle is None or is_false(shuffle.value):
            return  # read in order: an evaluation loader, left whole (each rank evaluates all of it)
        owner = self._top_level_owner(call)
        if isinstance(owner, cst.FunctionDef) and owner.name.value in self.role.evaluation_loaders:
            return  # shuffled, but the scripts only evaluate with what it returns: left whole too
        if self._read_here_without_training(call):
            return
        dataset = positional[0].value if positional else next(
            (arg.value for arg in call.args if arg.keyword is not None and arg.keyword.value == "dataset"), None)
        statement = self._statement(call)
        why = None
        if len(positional) > 3:
            why = "it passes the sampler's place positionally"
        elif dataset is None or not is_plain_reference(dataset):
            why = "its data set is not a name (it would be built twice)"
        elif not is_true(shuffle.value) and not is_plain_reference(shuffle.value) and any(True for _ in calls_in(shuffle.value)):
            why = "its shuffle argument calls something (it would run twice)"
        elif statement is None:
            why = "it is built inside an expression with no statement of its own"
        if why is not None:
            self._report(call, f"a shuffled DataLoader is built here for a training script, but {why}: give it "
                               "`sampler=DistributedSampler(dataset)` (and shuffle=False) by hand")
            return
        name = self._sampler_name(statement, call)
        dist = self.names.dist
        shuffled = _operand(shuffle.value)  # `shuffle=(mode == "train")`: read again, it is the same
        condition = f"{dist}.is_initialized()" if is_true(shuffle.value) else f"{shuffled} and {dist}.is_initialized()"
        sampler_line = cst.parse_statement(
            f"{name} = {self.names.sampler}({source_of(dataset)}, shuffle=True) if {condition} else None\n")
        self.plan.insert_before(statement, [sampler_line])
        new_shuffle = f"{name} is None" if is_true(shuffle.value) else f"{shuffled} and {name} is None"
        self.plan.replace(call, with_sampler(shuffle, new_shuffle, name))
        self.names.need(self.plan, dist=True, sampler=True)
        split = (self._split_batch(call, statement, name) if self.role.batch == "global" else
                 f"; its batch size stays per process, the global batch grows with the processes ({self.role.batch_why}; "
                 "--batch global keeps it)" if self.role.batch_why else "")
        self._change(MODULE_SAMPLER.code, call, f"DistributedSampler for the shuffled DataLoader (`{name}`), when a process group is set up{split}")

    def _read_here_without_training(self, call: cst.Call) -> bool:
        """`dataloader = DataLoader(dataset, shuffle=True)`, walked only by loops of this module
        that do not train, and handed nowhere else (pytorch-cifar's get_mean_and_std): statistics
        or an evaluation, which must see the whole data set on every rank."""
        function = self.a.enclosing_function(call)
        if function is None:
            return False
        loops = loops_over(self.a, call)
        # Walked in the function that builds it, by loops that neither train nor yield the batches on.
        return bool(loops) and all(
            isinstance(loop, cst.For) and self.a.enclosing_function(loop) is function and not self._trains(loop)
            and not any(True for _ in descendants(loop.body, (cst.Yield, cst.Return))) for loop in loops)

    def _random_sampler(self, call: cst.Call, own: cst.Arg) -> bool:
        """`sampler=RandomSampler(dataset, replacement=True, num_samples=...)`: under a process
        group, a DistributedSampler over the same data set instead (this rank's shard, in a new
        order each pass: DDP031 sets the epoch where the loader is iterated again)."""
        value = own.value
        if not (own.keyword is not None and own.keyword.value == "sampler" and isinstance(value, cst.Call)
                and (dotted_name(value.func) or "").split(".")[-1] == "RandomSampler"):
            return False
        dataset = next((arg.value for arg in value.args if arg.keyword is None and not arg.star), None) or next(
            (arg.value for arg in value.args if arg.keyword is not None and arg.keyword.value == "data_source"), None)
        if dataset is None or not is_plain_reference(dataset):
            return False
        dist = self.names.dist
        self.plan.replace(value, lambda updated: cst.parse_expression(
            f"{self.names.sampler}({source_of(dataset)}, shuffle=True) if {dist}.is_initialized() else {source_of(updated)}"))
        self.names.need(self.plan, dist=True, sampler=True)
        self._change(MODULE_SAMPLER.code, call, (
            f"DistributedSampler in place of `{short(value)}` when a process group is set up (each rank its own shard)"))
        return True

    def _sampler_chosen_at_run_time(self, call: cst.Call, own: cst.Arg) -> bool:
        """`super().__init__(sampler=self.sampler, **self.init_kwargs)` in a DataLoader subclass
        whose sampler is None unless it splits off a validation set (pytorch-template's
        BaseDataLoader): under a process group, a shuffled loader without a sampler of its own
        gets this rank's DistributedSampler, and the keyword arguments lose their shuffle."""
        stars = [arg for arg in call.args if arg.star == "**"]
        if not (self._is_dataloader_super_init(call) and own.keyword.value == "sampler" and is_plain_reference(own.value)
                and len(stars) == 1 and is_plain_reference(stars[0].value)
                and not any(arg.keyword is None and not arg.star for arg in call.args)
                and not any(arg.star == "*" for arg in call.args)):
            return False
        statement = self._statement(call)
        if statement is None or len(statement.body) != 1:
            return False
        kwargs, chosen = source_of(stars[0].value), source_of(own.value)
        dataset_arg = next((arg for arg in call.args if arg.keyword is not None and arg.keyword.value == "dataset"), None)
        dataset = source_of(dataset_arg.value) if dataset_arg is not None else f'{kwargs}["dataset"]'
        name, dist = self._sampler_name(statement, call), self.names.dist
        self.plan.insert_before(statement, [cst.parse_statement(f"{name} = {chosen}\n"), cst.parse_statement(
            f"if {name} is None and {dist}.is_initialized() and {kwargs}.get(\"shuffle\"):  # shuffled, no sampler of its own\n"
            f"    {name} = {self.names.sampler}({dataset}, shuffle=True)  # this rank's shard\n")])

        def rewrite(updated: cst.Call) -> cst.Call:
            args = []
            for arg in updated.args:
                if arg.keyword is not None and arg.keyword.value == "sampler":
                    arg = arg.with_changes(value=cst.Name(name))
                elif arg.star == "**":
                    arg = arg.with_changes(value=cst.parse_expression(
                        f"(dict({kwargs}, shuffle=False) if {name} is not {chosen} else {kwargs})"))
                args.append(arg)
            return updated.with_changes(args=args)

        self.plan.replace(call, rewrite)
        self.names.need(self.plan, dist=True, sampler=True)
        self._change(MODULE_SAMPLER.code, call, f"DistributedSampler when `{chosen}` is None and the loader shuffles, "
                                                "under a process group")
        self._report(call, f"when `{chosen}` is set (a sampler of its own, e.g. a validation split's "
                           "SubsetRandomSampler) every rank draws from all of it under DDP: shard those indices by hand")
        return True

    def _split_batch(self, call: cst.Call, statement: cst.SimpleStatementLine, sampler: str) -> str:
        """--batch global (migrator.rules.global_batch) in a module: the sharded loader's batch_size
        becomes this process's part of the global batch, under a process group only."""
        from migrator.rules.global_batch import batch_argument, plain_value

        argument = batch_argument(call)
        if argument is None or not plain_value(argument.value):
            self._report(call, "--batch global: this loader's batch size is "
                               f"{'an expression' if argument is not None else 'DataLoader default of 1'}, so it stays per "
                               "process and the global batch grows with the number of processes; split it by hand")
            return ""
        size, world = source_of(argument.value), f"{self.names.dist}.get_world_size()"
        per_process = f"max(1, {size} // {world})"
        # Never refused (see migrator.rules.global_batch): rounded down, and rank 0 says so.
        check = cst.parse_statement(
            f"if {sampler} is not None and {size} % {world} and {self.names.dist}.get_rank() == 0:  # the global batch is split over the processes\n"
            f"    print(\"batch size %d does not split evenly over %d processes: each loads %d, a global batch of %d\""
            f" % ({size}, {world}, {per_process}, {per_process} * {world}))\n")
        self.plan.insert_before(statement, [check])
        self.plan.replace(argument, lambda updated: updated.with_changes(
            value=cst.parse_expression(f"max(1, {source_of(updated.value)} // {world}) if {sampler} is not None else {source_of(updated.value)}")))
        return f"; batch size {size} kept as the global batch ({self.role.batch_why})"

    def _names_in(self, function) -> set:
        """The names a function mentions (its own, and those it reads); at module level, its bindings."""
        if function is None:
            return set(self.c.local_names(self.module))
        return {n.value for n in descendants(function, cst.Name)}

    def _is_dataloader(self, call: cst.Call) -> bool:
        dotted = dotted_name(call.func) or ""
        return dotted in self.names.dataloaders or (dotted.endswith(".DataLoader") and dotted.split(".")[0] in self.names.torch_like)

    def _is_dataloader_super_init(self, call: cst.Call) -> bool:
        """`super().__init__(dataset, ...)` in a class that subclasses DataLoader."""
        func = call.func
        if not (isinstance(func, cst.Attribute) and func.attr.value == "__init__" and isinstance(func.value, cst.Call)
                and dotted_name(func.value.func) == "super"):
            return False
        owner = self._enclosing(call, cst.ClassDef)
        return owner is not None and any(
            (dotted_name(base.value) or "") in self.names.dataloaders or (dotted_name(base.value) or "").endswith(".DataLoader")
            for base in owner.bases
        )

    def _sampler_name(self, statement: cst.SimpleStatementLine, call: cst.Call) -> str:
        target = assigned_target(statement)
        stem = ""
        if target:
            last = target.split(".")[-1]
            stem = last[: -len("loader")] if last.lower().endswith("loader") else ""
            stem = stem if stem.endswith("_") or not stem else stem + "_"
        taken = self._names_in(self._enclosing(call, cst.FunctionDef))
        for candidate in (f"{stem}sampler", "dist_sampler", "distributed_sampler"):
            if candidate not in taken:
                return candidate
        return "ddp_sampler"


def _operand(node: cst.BaseExpression) -> str:
    """`node`'s code, in parentheses when it needs them as the left side of an `and`."""
    text = source_of(node)
    return text if is_plain_reference(node) or getattr(node, "lpar", ()) else f"({text})"


def with_sampler(shuffle: cst.Arg, new_shuffle: str, name: str):
    def replace(updated: cst.Call) -> cst.Call:
        args = list(updated.args)
        index = next(i for i, arg in enumerate(args) if arg.deep_equals(shuffle))
        args[index] = args[index].with_changes(value=cst.parse_expression(new_shuffle))
        sampler = cst.Arg(value=cst.Name(name), keyword=cst.Name("sampler"),
                          equal=cst.AssignEqual(whitespace_before=cst.SimpleWhitespace(""), whitespace_after=cst.SimpleWhitespace("")))
        stars = [i for i, arg in enumerate(args) if arg.star == "**"]
        at = stars[0] if stars else len(args)
        comma = cst.Comma(whitespace_after=cst.SimpleWhitespace(" "))
        last_comma = args[-1].comma if args else cst.MaybeSentinel.DEFAULT
        if at == len(args) and isinstance(last_comma, cst.Comma) and len(args) > 1:
            # One argument per line with a trailing comma: the new one gets a line of its own, like them.
            args[-1] = args[-1].with_changes(comma=args[-2].comma)
            args.append(sampler.with_changes(comma=last_comma))
        elif at == len(args):  # after the last argument: it gets the comma, the new one keeps its (none)
            args[-1] = args[-1].with_changes(comma=comma)
            args.append(sampler)
        else:
            args.insert(at, sampler.with_changes(comma=comma))
        return updated.with_changes(args=args)

    return replace


def shuffles_or_samples(node: cst.BaseExpression) -> bool:
    """A random or weighted sampler, not a sequential one (evaluation order) or a None."""
    text = source_of(node)
    return not is_false(node) and "Sequential" not in text
