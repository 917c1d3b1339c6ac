"""DDP035 and DDP036 in a module a migrated script imports: prints, progress bars and appended logs
on rank 0; folders every rank creates tolerate the others' copy."""
from __future__ import annotations

from typing import Optional, Set

import libcst as cst

from migrator.graph.bindings import dotted_name
from migrator.tree import on_rank_zero_only, with_keyword
from migrator.project.rules import MODULE_RANK_ZERO_OUTPUT, MODULE_SHARED_FOLDERS
from migrator.project.shapes import is_false, is_true, source_of, walk
from migrator.project.planner import ENV_NOT_RANK_ZERO, ENV_RANK_ZERO, Planner


class Outputs(Planner):
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
            statement = self._statement(call)
            if statement is None or len(statement.body) != 1 or not (
                    isinstance(statement.body[0], cst.Expr) and statement.body[0].value is call):
                return
            self.plan.guard(statement, ENV_RANK_ZERO)
            self._change(MODULE_RANK_ZERO_OUTPUT.code, call, "printed on rank 0 only")
        elif spelled in self.names.tracker_runs and on_rank_zero_only(call, ENV_RANK_ZERO) is not None:
            # One run on the dashboard, rank 0's; the others' is disabled, and logging to it does nothing.
            self.plan.replace(call, lambda updated: on_rank_zero_only(updated, ENV_RANK_ZERO) or updated)
            self._change(MODULE_RANK_ZERO_OUTPUT.code, call, "experiment run started on rank 0 only (the other ranks get a disabled run)")
        elif spelled == "open" and self._log_append(call) is not None:
            self.plan.guard(self._log_append(call), ENV_RANK_ZERO)
            self._change(MODULE_RANK_ZERO_OUTPUT.code, call, "log lines appended on rank 0 only")
        else:
            return
        self.plan.need_import("os")

    def _log_append(self, call: cst.Call) -> Optional[cst.With]:
        """`with open(log_name, "a") as log_file: log_file.write(message)`: a log every rank
        appends the same lines to. The `with` statement, when writing (or printing) is all it does."""
        item = self.parents.get(call)
        block = self.parents.get(item)
        if not (isinstance(item, cst.WithItem) and isinstance(block, cst.With) and len(block.items) == 1
                and item.asname is not None and isinstance(item.asname.name, cst.Name)):
            return None
        mode = next((arg.value for arg in call.args[1:2] if arg.keyword is None), None) or next(
            (arg.value for arg in call.args if arg.keyword is not None and arg.keyword.value == "mode"), None)
        if not (isinstance(mode, cst.SimpleString) and mode.evaluated_value in ("a", "at")):
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
        inside = set(walk(block))
        if made and (function is None or any(isinstance(n, cst.Name) and n.value in made and n not in inside
                                             for n in walk(function.body))):
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

