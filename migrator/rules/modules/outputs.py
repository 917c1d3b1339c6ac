"""DDP035 and DDP036 in a module a migrated script imports: prints, progress bars and appended logs
on rank 0; folders every rank creates tolerate the others' copy."""
from __future__ import annotations

from typing import Optional, Set

import libcst as cst

from migrator import names as N
from migrator.graph.bindings import dotted_name
from migrator.graph.flow import ALIAS
from migrator.rule import Example, Rule
from migrator.rules.modules.base import ENV_NOT_RANK_ZERO, ENV_RANK_ZERO, ModulePlanner, is_false, is_true, source_of
from migrator.tree import descendants, on_rank_zero_only, with_keyword

MODULE_RANK_ZERO_OUTPUT = Rule(
    code="DDP035",
    name="module-rank-zero-output",
    summary="prints and progress bars in a module the training script imports show on rank 0 only",
    what="""
In project mode, in the functions and methods of a module that a migrated training script
imports: a `print(...)` statement runs under `if int(os.environ.get("RANK", 0)) == 0:`, and a tqdm
progress bar without `disable=` gets `disable=int(os.environ.get("RANK", 0)) != 0`, and a
`wandb.init(...)` gets `mode=None if int(os.environ.get("RANK", 0)) == 0 else "disabled"` (rank 0
keeps the mode it had; the other ranks' run is disabled, and logging to it does nothing), and a
TensorBoard entry (`writer.add_scalar(...)`, `add_image`, ...) whose arguments compute nothing but
values at hand (`loss.item()`) runs under the same check, as do lines appended to a log file
(`with open(path, "a") as f: f.write(...)`, or `log = open(path, "a")` then `log.write(...)`) and
a progress bar drawn by hand with `sys.stdout.write(...)` (with the `for` loops that only draw it).
A logger object that keeps its file (`self.file = open(fpath, "w")`, then only `.write`, `.flush`
and `.close` on it, and no file read back after it in the class) opens os.devnull on the other
ranks. torchrun's
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
            id="tensorboard-curves",
            before='''from torch.utils.tensorboard import SummaryWriter


class Logger:
    def __init__(self, log_dir):
        self.writer = SummaryWriter(log_dir)

    def epoch_end(self, epoch, loss, accuracy):
        self.writer.add_scalar("train/loss", loss.item(), epoch)
        self.writer.add_scalar("val/accuracy", accuracy, epoch)
''',
            after='''from torch.utils.tensorboard import SummaryWriter
import os


class Logger:
    def __init__(self, log_dir):
        self.writer = SummaryWriter(log_dir)

    def epoch_end(self, epoch, loss, accuracy):
        if int(os.environ.get("RANK", 0)) == 0:
            self.writer.add_scalar("train/loss", loss.item(), epoch)
            self.writer.add_scalar("val/accuracy", accuracy, epoch)
''',
        ),
        Example(
            id="appended-log-file",
            before='''import json


def describe(datasets, log_path):
    log = open(log_path, "a")
    for name, data in datasets.items():
        line = json.dumps({"name": name, "samples": len(data)})
        log.write(line + "\\n")
    log.close()
''',
            after='''import json
import os


def describe(datasets, log_path):
    log = open(log_path, "a")
    for name, data in datasets.items():
        line = json.dumps({"name": name, "samples": len(data)})
        if int(os.environ.get("RANK", 0)) == 0:
            log.write(line + "\\n")
    log.close()
''',
        ),
        Example(
            id="progress-bar-drawn-by-hand",
            before='''import sys


def progress_bar(current, total, msg):
    done = int(40 * current / total)
    sys.stdout.write(" [")
    for i in range(done):
        sys.stdout.write("=")
    sys.stdout.write("]")
    sys.stdout.write(" %d/%d %s\\r" % (current + 1, total, msg))
    sys.stdout.flush()
''',
            after='''import sys
import os


def progress_bar(current, total, msg):
    done = int(40 * current / total)
    if int(os.environ.get("RANK", 0)) == 0:
        sys.stdout.write(" [")
        for i in range(done):
            sys.stdout.write("=")
        sys.stdout.write("]")
        sys.stdout.write(" %d/%d %s\\r" % (current + 1, total, msg))
    sys.stdout.flush()
''',
        ),
        Example(
            id="logger-keeps-its-file",
            before='''class Logger:
    def __init__(self, fpath, resume=False):
        self.file = None
        if resume:
            self.file = open(fpath, "r")
            self.names = self.file.readline().rstrip().split("\\t")
            self.file.close()
            self.file = open(fpath, "a")
        else:
            self.file = open(fpath, "w")

    def append(self, numbers):
        for number in numbers:
            self.file.write("{0:.6f}\\t".format(number))
        self.file.write("\\n")
        self.file.flush()

    def close(self):
        if self.file is not None:
            self.file.close()
''',
            after='''import os
class Logger:
    def __init__(self, fpath, resume=False):
        self.file = None
        if resume:
            self.file = open(fpath, "r")
            self.names = self.file.readline().rstrip().split("\\t")
            self.file.close()
            self.file = open(fpath if int(os.environ.get("RANK", 0)) == 0 else os.devnull, "a")
        else:
            self.file = open(fpath if int(os.environ.get("RANK", 0)) == 0 else os.devnull, "w")

    def append(self, numbers):
        for number in numbers:
            self.file.write("{0:.6f}\\t".format(number))
        self.file.write("\\n")
        self.file.flush()

    def close(self):
        if self.file is not None:
            self.file.close()
''',
        ),
        Example(
            id="log-file-read-back",
            before='''class Results:
    def __init__(self, path):
        self.path = path
        self.out = open(path, "w")

    def add(self, row):
        self.out.write(row)

    def rows(self):
        self.out.close()
        return open(self.path).read()
''',
            fires=False,
        ),
        Example(
            id="tensorboard-image-of-a-forward",
            before='''def show(writer, model, images, step):
    writer.add_image("prediction", model(images)[0], step)
''',
            fires=False,
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


def _appends(call: cst.Call) -> bool:
    """`open(path, "a")`, `open(path, mode="at")`: a file opened to append to."""
    mode = next((arg.value for arg in call.args[1:2] if arg.keyword is None), None) or next(
        (arg.value for arg in call.args if arg.keyword is not None and arg.keyword.value == "mode"), None)
    return isinstance(mode, cst.SimpleString) and mode.evaluated_value in ("a", "at")


# TensorBoard's SummaryWriter (torch.utils.tensorboard, tensorboardX): what it adds to the run folder
_BOARD_ENTRIES = frozenset({"add_scalar", "add_scalars", "add_image", "add_images", "add_histogram", "add_text", "add_figure"})
# What an entry's arguments may compute and still be written by rank 0 alone: values at hand


class Outputs(ModulePlanner):
    """DDP035, DDP036: what every rank would show or create."""

    # DDP035
    def _output(self, call: cst.Call) -> None:
        """A `print(...)` statement or a tqdm bar in a function: every rank that calls it shows it.
        torchrun's RANK decides, not the process group: a config parser or a data set prints
        before the script sets the group up."""
        function = self._enclosing(call, cst.FunctionDef)
        if function is None or self._rank_checked(call, function):
            return
        spelled = dotted_name(call.func)
        if spelled in self.names.progress_bars:
            if any(arg.keyword is not None and arg.keyword.value == "disable" for arg in call.args) or any(
                    arg.star for arg in call.args):
                return
            self.plan.replace(call, lambda updated: with_keyword(updated, "disable", ENV_NOT_RANK_ZERO))
            self._change(MODULE_RANK_ZERO_OUTPUT.code, call, "progress bar drawn on rank 0 only")
        elif spelled == "print":
            statement = self._alone(call)
            if statement is None:
                return
            self.plan.guard(statement, ENV_RANK_ZERO)
            self._change(MODULE_RANK_ZERO_OUTPUT.code, call, "printed on rank 0 only")
        elif spelled in self.names.tracker_runs and on_rank_zero_only(call, ENV_RANK_ZERO) is not None:
            # One run on the dashboard, rank 0's; the others' is disabled, and logging to it does nothing.
            self.plan.replace(call, lambda updated: on_rank_zero_only(updated, ENV_RANK_ZERO) or updated)
            self._change(MODULE_RANK_ZERO_OUTPUT.code, call, "experiment run started on rank 0 only (the other ranks get a disabled run)")
        elif spelled == "open" and self._kept_log(call) is not None:
            path = self._kept_log(call)
            self.plan.replace(path, lambda arg: arg.with_changes(
                value=cst.parse_expression(f"{source_of(arg.value)} if {ENV_RANK_ZERO} else os.devnull")))
            self._change(MODULE_RANK_ZERO_OUTPUT.code, call, "log file written on rank 0 only (the other ranks write to os.devnull)")
        elif spelled == "open" and self._log_append(call) is not None:
            self.plan.guard(self._log_append(call), ENV_RANK_ZERO)
            self._change(MODULE_RANK_ZERO_OUTPUT.code, call, "log lines appended on rank 0 only")
        elif self._appended_line(call) is not None:
            self.plan.guard(self._appended_line(call), ENV_RANK_ZERO)
            self._change(MODULE_RANK_ZERO_OUTPUT.code, call, "log line appended on rank 0 only")
        elif self._board_entry(call) is not None:
            self.plan.guard(self._board_entry(call), ENV_RANK_ZERO)
            self._change(MODULE_RANK_ZERO_OUTPUT.code, call, "TensorBoard entry written on rank 0 only")
        elif self._terminal_write(call) is not None:
            self.plan.guard(self._terminal_write(call), ENV_RANK_ZERO)
            self._change(MODULE_RANK_ZERO_OUTPUT.code, call, "written to the terminal on rank 0 only")
        else:
            return
        self.plan.need_import("os")

    def _alone(self, call: cst.Call) -> Optional[cst.SimpleStatementLine]:
        """The statement `call` is all of (`print(x)`, `log.write(x)`), if it is."""
        statement = self._statement(call)
        if statement is None or len(statement.body) != 1 or not (
                isinstance(statement.body[0], cst.Expr) and statement.body[0].value is call):
            return None
        return statement

    def _appended_line(self, call: cst.Call) -> Optional[cst.SimpleStatementLine]:
        """`log.write(line)`, a statement of its own, where every binding of `log` it reads is
        `open(path, "a")` (deep-text-recognition-benchmark's dataset log): every rank would append
        the same lines to the one file. Only when what it writes calls nothing."""
        func = call.func
        if not (isinstance(func, cst.Attribute) and func.attr.value == "write" and isinstance(func.value, cst.Name)):
            return None
        read = self.a.c.refers.get(func.value, ())
        if not read or not all(b.kind == "assignment" and not b.path and isinstance(b.value, cst.Call)
                               and dotted_name(b.value.func) == "open" and _appends(b.value) for b in read):
            return None
        statement = self._alone(call)
        if statement is None:
            return None
        if any(inner is not call for inner in descendants(call, cst.Call)):
            return None  # what it writes is computed there: every rank may need that computation
        return statement

    def _board_entry(self, call: cst.Call) -> Optional[cst.SimpleStatementLine]:
        """`self.writer.add_scalar("train/loss", loss.item(), step)`, a statement of its own: every
        rank would write its copy of the curve into the same run folder. Only when its arguments
        compute nothing but values at hand (`.item()`, `float(...)`): a forward or any other call
        of the project must stay on every rank."""
        func = call.func
        if not (isinstance(func, cst.Attribute) and func.attr.value in _BOARD_ENTRIES):
            return None
        return self._alone(call) if N.values_at_hand(call) else None

    def _terminal_write(self, call: cst.Call) -> Optional[cst.BaseStatement]:
        """`sys.stdout.write(' [')`, a statement of its own that writes values at hand: a progress
        bar drawn by hand (pytorch-cifar's utils.progress_bar), which every rank would draw. A
        `for` loop that does nothing else (`for i in range(n): sys.stdout.write('=')`) is guarded
        whole, so that the bar's writes share one rank check."""
        if self.c.resolve(call.func) != "sys.stdout.write" or not N.values_at_hand(call):
            return None
        statement: Optional[cst.BaseStatement] = self._alone(call)
        block = self.parents.get(statement) if statement is not None else None
        loop = self.parents.get(block)
        if (isinstance(loop, cst.For) and isinstance(block, cst.IndentedBlock) and len(block.body) == 1
                and loop.orelse is None and isinstance(loop.iter, cst.Call) and N.values_at_hand(loop.iter)):
            return loop
        return statement

    def _kept_log(self, call: cst.Call) -> Optional[cst.Arg]:
        """`self.file = open(fpath, 'w')` kept by a logger (pytorch-classification's Logger), whose
        every later use writes to it (`self.file.write(...)`, `.flush()`, `.close()`, a csv
        writer): its path argument, which the other ranks swap for os.devnull. A use before the
        open in the same function, outside a loop, reads an earlier handle (`open(fpath, 'r')`)."""
        statement = self._statement(call)
        small = statement.body[0] if statement is not None and len(statement.body) == 1 else None
        if not (isinstance(small, cst.Assign) and small.value is call and call.args and not call.args[0].keyword
                and N.opens_for_writing(call) and len(small.targets) == 1):
            return None
        path = call.args[0].value
        if isinstance(path, cst.IfExp) and dotted_name(path.orelse) == "os.devnull":
            return None  # migrated already
        kept = dotted_name(small.targets[0].target) or ""
        cls = self._enclosing(call, cst.ClassDef)
        if not kept.startswith("self.") or kept.count(".") != 1 or cls is None or self._log_reread(call, cls):
            return None  # a logger object's own file; one a function writes and hands on may be read back
        function = self._enclosing(call, cst.FunctionDef)
        looped = any(isinstance(n, (cst.For, cst.While)) for n in self.a.ancestors(call) if self.a.is_inside(n, function))
        value = self.a.values.follow(self.a.values.receivers(call), ALIAS, every=False)
        for node in value.references():
            earlier = self.c.order.get(node, 0) < self.c.order.get(call, 0)
            if earlier and not looped and self.a.enclosing_function(node) is function:
                continue
            if not self._written_to(node):
                return None
        return call.args[0]

    def _log_reread(self, opened: cst.Call, cls: cst.ClassDef) -> bool:
        """Does the class open a file to read after `opened` (whatever the path is called there: the
        log may be read back)?"""
        return any(
            N.is_name(call.func, "open") and not N.opens_for_writing(call) and self.a.is_inside(call, cls)
            and self.c.order.get(call, 0) > self.c.order.get(opened, 0)
            for call in self.c.calls)

    def _written_to(self, handle: cst.CSTNode) -> bool:
        """`handle.write(...)`, `.flush()`, `.close()`, `csv.writer(handle)`, `handle is not None`."""
        parent = self.parents.get(handle)
        if isinstance(parent, cst.Attribute) and parent.value is handle:
            call = self.parents.get(parent)
            return isinstance(call, cst.Call) and call.func is parent and parent.attr.value in (*N.FILE_WRITES, "close")
        if isinstance(parent, cst.Comparison):
            return all(isinstance(c.operator, (cst.Is, cst.IsNot)) and N.is_name(c.comparator, "None") for c in parent.comparisons)
        holder = self.parents.get(parent) if isinstance(parent, cst.Arg) else None
        return isinstance(holder, cst.Call) and (dotted_name(holder.func) or "").split(".")[-1] in ("writer", "DictWriter")

    def _log_append(self, call: cst.Call) -> Optional[cst.With]:
        """`with open(log_name, "a") as log_file: log_file.write(message)`: a log every rank
        appends the same lines to. The `with` statement, when writing (or printing) is all it does."""
        item = self.parents.get(call)
        block = self.parents.get(item)
        if not (isinstance(item, cst.WithItem) and isinstance(block, cst.With) and len(block.items) == 1
                and item.asname is not None and isinstance(item.asname.name, cst.Name)):
            return None
        if not _appends(call):
            return None
        handle = item.asname.name.value
        made: Set[str] = set()  # locals the lines are made of (`now = time.strftime("%c")`)
        for statement in block.body.body:
            small = statement.body[0] if isinstance(statement, cst.SimpleStatementLine) and len(statement.body) == 1 else None
            if isinstance(small, cst.Assign) and all(isinstance(t.target, cst.Name) for t in small.targets):
                made |= {t.target.value for t in small.targets}
                continue
            written = small.value if isinstance(small, cst.Expr) and isinstance(small.value, cst.Call) else None
            if written is None or dotted_name(written.func) not in (f"{handle}.write", "print"):
                return None
        function = self._enclosing(block, cst.FunctionDef)
        inside = set(descendants(block, cst.Name))
        if made and (function is None or any(n.value in made and n not in inside
                                             for n in descendants(function.body, cst.Name))):
            return None  # read after the `with`: every rank needs it
        return block

    # ----------------------------------------------------------------- DDP036
    def _folder(self, call: cst.Call) -> None:
        """`path.mkdir(parents=True, exist_ok=False)`, `os.makedirs(d)`, `os.mkdir(d)`: raises on
        every rank but the first that gets there."""
        func = call.func
        if not isinstance(func, cst.Attribute) or func.attr.value not in ("mkdir", "makedirs") or any(arg.star for arg in call.args):
            return
        spelled = dotted_name(func) or ""
        is_os = spelled in ("os.mkdir", "os.makedirs")
        positional = [arg for arg in call.args if arg.keyword is None]
        if is_os and (not positional or len(positional) > 2 or (spelled == "os.mkdir" and len(positional) > 1)):
            return  # `os.makedirs(d, mode, exist_ok)` positionally, or nothing to create
        if not is_os and (len(positional) > 2 or self._enclosing(call, cst.FunctionDef) is None):
            return
        if not is_os and not any(arg.keyword is not None and arg.keyword.value in ("parents", "exist_ok") for arg in call.args):
            return  # `x.mkdir()` alone: too common a name to be sure it is a Path
        current = next((arg for arg in call.args if arg.keyword is not None and arg.keyword.value == "exist_ok"), None)
        if current is not None and (is_true(current.value) or "os.environ" in source_of(current.value)):
            return  # exist_ok already, or decided by the environment (ours, on a second run)
        before = source_of(current.value) if current is not None else None
        value = f'{before} or "RANK" in os.environ' if before and not is_false(current.value) else '"RANK" in os.environ'

        def rewrite(updated: cst.Call) -> cst.Call:
            args = [arg for arg in updated.args if not (arg.keyword is not None and arg.keyword.value == "exist_ok")]
            if args:
                args[-1] = args[-1].with_changes(comma=cst.MaybeSentinel.DEFAULT)
            new = updated.with_changes(args=args)
            if spelled == "os.mkdir":
                new = new.with_changes(func=new.func.with_changes(attr=cst.Name("makedirs")))
            return with_keyword(new, "exist_ok", value)

        self.plan.replace(call, rewrite)
        self.plan.need_import("os")
        self._change(MODULE_SHARED_FOLDERS.code, call, "folder created with exist_ok under torchrun (every rank creates it)")
