"""Scripts that start their own workers with mp.spawn: what makes one a torchrun script, or why not.

Read for `--spawn` (migrator.rules.spawn). Such a script (`mp.spawn(main_worker, nprocs=ngpus,
args=(ngpus, args))`, each worker calling `init_process_group(..., init_method="tcp://...",
world_size=..., rank=...)`) is distributed already. Under torchrun the processes exist before the
script runs, so the spawn becomes a direct call, `main_worker(local_rank, ngpus, args)` (the
worker's first parameter is its process index, which torchrun calls LOCAL_RANK), and what the
script computed for its own rendezvous comes from torchrun's environment instead:

  nprocs, the processes on this machine (`ngpus = torch.cuda.device_count()`)   LOCAL_WORLD_SIZE
  the rank init_process_group is given, where the worker computes it            RANK
    (`args.rank = args.rank * ngpus_per_node + gpu`, `args.rank += gpu`)
  the world size it is given, where it is assigned                              WORLD_SIZE
    (`args.world_size = ngpus_per_node * args.world_size`)
  init_method, MASTER_ADDR/MASTER_PORT set by hand                              torchrun's rendezvous

So `args.batch_size // ngpus_per_node` still divides a machine's batch over its processes, and
`args.rank % ngpus_per_node == 0` still picks each machine's first process. A worker that takes
its process index as its rank (`init_process_group(rank=rank)`, the tutorial's shape) or nprocs as
the world size was written for one machine, where the local and the global numbers agree: it
stays a one-machine script (`one_machine`). Anything else is declined with the reason, and the
file is left as it is: a spawn that runs only under a flag, in a loop, of a lambda or a method,
with `join=False` or arguments that are not a literal tuple, several spawns, mp.Process workers, a
worker that trains nothing, and a rendezvous set per environment (`if "SLURM_JOB_ID" in
os.environ: args.rank = ...`) that the tool cannot map onto torchrun's.

DDP024's own reading of the script (spawn_facts), from ScriptFacts and the graph it carries; made
only when `--spawn` asks for it.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Dict, List, Optional, Sequence, Set, Tuple

import libcst as cst

from migrator import names as N
from migrator.analysis.distributed import SPAWN
from migrator.analysis.helpers import code_of
from migrator.graph.bindings import ScopeOwner, dotted_name
from migrator.tree import descendants

PROCESS = frozenset({"torch.multiprocessing.Process", "multiprocessing.Process"})
# What a spawn script sets in os.environ for its own rendezvous; torchrun sets each of them itself.
RENDEZVOUS_VARIABLES = frozenset({"MASTER_ADDR", "MASTER_PORT", "RANK", "WORLD_SIZE", "LOCAL_RANK", "LOCAL_WORLD_SIZE"})
# torch.multiprocessing.spawn's and start_processes' parameters, in order.
_SIGNATURE = ("fn", "args", "nprocs", "join", "daemon", "start_method")
# What the script's own numbers become: torchrun's, or a world of one without it.
LOCAL_WORLD_SIZE = 'int(os.environ.get("LOCAL_WORLD_SIZE", 1))'
WORLD_SIZE = 'int(os.environ.get("WORLD_SIZE", 1))'
RANK = 'int(os.environ.get("RANK", 0))'
# init_process_group's keywords that torchrun's environment replaces.
_RENDEZVOUS_KEYWORDS = ("init_method", "world_size", "rank")
# Helpers of other projects that start the workers themselves (detectron2's and YOLOX's `launch`).
_LAUNCH_HELPERS = ("launch", "spawn", "start_processes")


@dataclass(frozen=True)
class Rebinding:
    """An assignment whose value torchrun's environment now gives: `ngpus = <value>`."""

    statement: cst.SimpleStatementLine
    target: str  # as the script spells it: "args.rank"
    value: str  # what it is assigned now: `int(os.environ.get("RANK", 0))`
    variable: str  # torchrun's variable it reads: RANK, WORLD_SIZE or LOCAL_WORLD_SIZE
    what: str  # for the change message: "the rank", "the world size", "nprocs"


@dataclass(frozen=True)
class SpawnSite:
    """One mp.spawn call and everything that changes with it."""

    call: cst.Call
    statement: cst.SimpleStatementLine  # `mp.spawn(...)` alone on its line
    scope: ScopeOwner  # the function (or the module) the spawn runs in
    worker: str  # the spawned function's name
    arguments: Tuple[str, ...]  # what the worker gets after its process index, as code
    init: cst.Call
    init_statement: cst.SimpleStatementLine
    init_arguments: Tuple[str, ...]  # init_process_group's arguments but the rendezvous ones, as code
    init_method: Optional[str]  # the dropped init_method (`args.dist_url`), as code
    rebindings: Tuple[Rebinding, ...]
    environment: Tuple[cst.SimpleStatementLine, ...]  # os.environ["MASTER_PORT"] = ... : dropped
    one_machine: bool  # the process index is the rank (or nprocs the world size): one machine only
    imports: Tuple[Tuple[str, Optional[str], Optional[str]], ...]  # torch.multiprocessing imports it may leave unused


@dataclass(frozen=True)
class SpawnDecline:
    node: cst.CSTNode
    reason: str


@dataclass(frozen=True)
class SpawnFacts:
    """What --spawn does with the file: one site to migrate, or the declines (then nothing changes)."""

    site: Optional[SpawnSite] = None
    declines: Tuple[SpawnDecline, ...] = ()


class _Declined(Exception):
    def __init__(self, node: cst.CSTNode, reason: str) -> None:
        super().__init__(reason)
        self.decline = SpawnDecline(node, reason)


def spawn_facts(analysis) -> Optional[SpawnFacts]:
    """None when the file starts no workers of its own."""
    calls = analysis.calls_of(SPAWN)
    inits = analysis.calls_of(N.INIT_PROCESS_GROUP)
    processes = analysis.calls_of(PROCESS) if inits else []
    if not calls and not processes:
        helper = _launch_helper(analysis)
        return SpawnFacts(declines=(helper,)) if helper is not None else None
    declines = [
        SpawnDecline(call, "its workers are started with mp.Process, each with its own rank: start them with torchrun "
                           "and read RANK, LOCAL_RANK and WORLD_SIZE from the environment by hand")
        for call in processes
    ]
    if len(calls) > 1:
        declines += [
            SpawnDecline(call, f"one of {len(calls)} mp.spawn calls in this file; torchrun starts one set of processes "
                               "per run: keep one spawn, then run --spawn again")
            for call in calls
        ]
    if declines:
        return SpawnFacts(declines=tuple(declines))
    try:
        return SpawnFacts(site=_Reader(analysis, calls[0], inits).site())
    except _Declined as declined:
        return SpawnFacts(declines=(declined.decline,))


def _launch_helper(analysis) -> Optional[SpawnDecline]:
    """`launch(main, num_gpus, ...)` from another package (detectron2, YOLOX): it spawns the workers."""
    functions = {f.name.value for f in analysis.module.body if isinstance(f, cst.FunctionDef)}
    for call in analysis.index.calls:
        name = call.func.value if isinstance(call.func, cst.Name) else N.attribute_name(call.func)
        first = call.args[0].value if call.args and call.args[0].keyword is None else None
        if name not in _LAUNCH_HELPERS or name in functions or not isinstance(first, cst.Name) or first.value not in functions:
            continue
        qualified = analysis.index.resolve(call.func) or ""
        if qualified.startswith("torch."):
            continue
        source = f" (from {qualified.rsplit('.', 1)[0]})" if "." in qualified else ""
        return SpawnDecline(call, f"its workers are started by `{code_of(call.func)}({first.value}, ...)`{source}, not by "
                                  f"torch.multiprocessing.spawn in this file: start `{first.value}` under torchrun by hand")
    return None


class _Reader:
    """Reads one spawn call; raises _Declined with the reason at the first thing it cannot make right."""

    def __init__(self, analysis, call: cst.Call, inits: Sequence[cst.Call]) -> None:
        self.a = analysis
        self.call = call
        self.inits = list(inits)
        self.functions: Dict[str, cst.FunctionDef] = {
            f.name.value: f for f in analysis.module.body if isinstance(f, cst.FunctionDef)
        }
        self.classes: Dict[str, cst.ClassDef] = {c.name.value: c for c in analysis.module.body if isinstance(c, cst.ClassDef)}
        self.rebindings: List[Rebinding] = []
        self.one_machine = False
        self.world_is_nprocs = False  # init_process_group's world size is what the worker got for nprocs
        self.helper_call: Optional[cst.Call] = None  # the worker's call of the helper holding init_process_group

    def site(self) -> SpawnSite:
        statement = self._alone(self.call, "mp.spawn's result is used (`ctx = mp.spawn(...)`): torchrun cannot hand it back")
        spawn = self._spawn_arguments()
        scope = self._launcher(statement)
        worker = self._worker(spawn.get("fn"))
        if not self._trains(worker):
            raise _Declined(self.call, f"`{worker.name.value}` trains nothing (no backward pass or optimizer in it or in "
                                       "the functions it calls): only a training worker becomes a torchrun script")
        arguments = self._worker_arguments(spawn.get("args"))
        params = _positional_params(worker)
        if not params:
            raise _Declined(self.call, f"`{worker.name.value}` takes no process index")
        if len(params) < 1 + len(arguments) and worker.params.star_arg is None:
            raise _Declined(self.call, f"`{worker.name.value}` takes {len(params)} arguments, mp.spawn passes {1 + len(arguments)}")
        nprocs = spawn.get("nprocs")
        n_code = code_of(nprocs) if nprocs is not None else None
        receivers = {params[1 + i] for i, a in enumerate(arguments) if n_code is not None and a == n_code and 1 + i < len(params)}
        init, helper, anchor = self._init(worker)
        init_statement = self._alone(init, "init_process_group's result is used: migrate it by hand")
        kept, rendezvous = self._init_arguments(init)
        process_index = params[0]
        launcher_names = self._launcher_names(worker, spawn.get("args"))
        environment = self._environment()
        by_hand = self._set_by_hand(environment, helper)
        rank = self._in_worker(rendezvous.get("rank", by_hand.get("RANK")), helper, worker)
        world = self._in_worker(rendezvous.get("world_size", by_hand.get("WORLD_SIZE")), helper, worker)
        method = rendezvous.get("init_method")
        for value in (rank, world, self._in_worker(method, helper, worker) if dotted_name(method) else None):
            self._not_set_per_environment(self._in_launcher(value, launcher_names), scope)
        self._rank(rank, process_index, worker, anchor)
        self._world(world, receivers, worker, anchor, scope, statement, launcher_names, n_code)
        if nprocs is not None and dotted_name(nprocs) is not None:
            self._rebind_nprocs(nprocs, scope, statement)
        if nprocs is not None and dotted_name(nprocs) is None and (self.world_is_nprocs or not isinstance(nprocs, cst.Integer)):
            # `nprocs=torch.cuda.device_count()` with the same call in args, or `nprocs=2, args=(2,)`
            # where that 2 is init_process_group's world size: the worker gets torchrun's count.
            arguments = tuple(LOCAL_WORLD_SIZE if a == n_code else a for a in arguments)
        return SpawnSite(
            call=self.call, statement=statement, scope=scope, worker=worker.name.value, arguments=arguments,
            init=init, init_statement=init_statement, init_arguments=kept,
            init_method=code_of(method) if method is not None else None,
            rebindings=tuple(self.rebindings), environment=environment, one_machine=self.one_machine,
            imports=self._imports(),
        )

    # -- the spawn call ------------------------------------------------------------------
    def _alone(self, call: cst.Call, reason: str) -> cst.SimpleStatementLine:
        statement = self.a.statement_of(call)
        if (isinstance(statement, cst.SimpleStatementLine) and len(statement.body) == 1
                and isinstance(statement.body[0], cst.Expr) and statement.body[0].value is call):
            return statement
        raise _Declined(call, reason)

    def _spawn_arguments(self) -> Dict[str, cst.BaseExpression]:
        found: Dict[str, cst.BaseExpression] = {}
        for position, arg in enumerate(self.call.args):
            if arg.star:
                raise _Declined(self.call, "mp.spawn's arguments are unpacked (`*args`, `**kwargs`): migrate it by hand")
            name = arg.keyword.value if arg.keyword is not None else (_SIGNATURE[position] if position < len(_SIGNATURE) else "")
            found[name] = arg.value
        join = found.get("join")
        if join is not None and not N.is_name(join, "True"):
            raise _Declined(self.call, "join=False: the script goes on while its workers run, which a direct call cannot do")
        return found

    def _launcher(self, statement: cst.SimpleStatementLine) -> ScopeOwner:
        scope = self.a.owner_of(statement)
        for anc in self.a.ancestors(statement):
            if anc is scope:
                break
            if isinstance(anc, (cst.For, cst.While)):
                raise _Declined(self.call, "mp.spawn runs in a loop: torchrun starts the processes once per run")
            if isinstance(anc, cst.If) and not N.is_main_guard(anc.test):
                raise _Declined(self.call, f"mp.spawn runs only when `{code_of(anc.test)}`, and the script does something "
                                           "else otherwise: make the spawn unconditional (one way to run), then run --spawn again")
        return scope

    def _worker(self, fn: Optional[cst.BaseExpression]) -> cst.FunctionDef:
        if isinstance(fn, cst.Lambda):
            raise _Declined(self.call, "the worker is a lambda: make it a function of this file")
        if isinstance(fn, cst.Attribute):
            raise _Declined(self.call, f"the worker `{code_of(fn)}` is a method: make it a function of this file")
        if not isinstance(fn, cst.Name) or fn.value not in self.functions:
            shown = code_of(fn) if fn is not None else "?"
            raise _Declined(self.call, f"the worker `{shown}` is not a function of this file")
        if any(isinstance(call.func, cst.Name) and call.func.value == fn.value for call in self.a.index.calls):
            raise _Declined(self.call, f"`{fn.value}` is also called without mp.spawn (another way to run it, with its own setup)")
        return self.functions[fn.value]

    def _worker_arguments(self, args: Optional[cst.BaseExpression]) -> Tuple[str, ...]:
        if args is None:
            return ()
        if not isinstance(args, cst.Tuple) or any(isinstance(e, cst.StarredElement) for e in args.elements):
            raise _Declined(self.call, f"mp.spawn's args `{code_of(args)}` is not a literal tuple: the tool cannot tell what "
                                       "the worker gets")
        return tuple(code_of(element.value) for element in args.elements)

    # -- the worker's init_process_group -------------------------------------------------
    def _init(self, worker: cst.FunctionDef) -> Tuple[cst.Call, cst.FunctionDef, cst.CSTNode]:
        """The one init_process_group, in the worker or in a helper it calls once: (the call, the
        function holding it, the worker's statement it runs at)."""
        if len(self.inits) != 1:
            where = "none" if not self.inits else f"{len(self.inits)}"
            raise _Declined(self.call, f"this file has {where} init_process_group calls; the worker's own is rewritten, "
                                       "so there must be exactly one")
        init = self.inits[0]
        holder = self.a.enclosing_function(init)
        if holder is worker:
            return init, worker, self.a.statement_of(init)
        name = holder.name.value if holder is not None else ""
        calls = [c for c in self.a.index.calls if isinstance(c.func, cst.Name) and c.func.value == name and name]
        if holder is None or self.functions.get(name) is not holder or len(calls) != 1 or self.a.enclosing_function(calls[0]) is not worker:
            raise _Declined(init, f"init_process_group is not called by `{worker.name.value}` or by a function of this file "
                                  "it calls once: migrate it by hand")
        self.helper_call = calls[0]
        return init, holder, self.a.statement_of(calls[0])

    def _init_arguments(self, init: cst.Call) -> Tuple[Tuple[str, ...], Dict[str, cst.BaseExpression]]:
        kept: List[str] = []
        rendezvous: Dict[str, cst.BaseExpression] = {}
        for position, arg in enumerate(init.args):
            if arg.star or (arg.keyword is None and position > 0):
                raise _Declined(init, "init_process_group is given more than its backend positionally: migrate it by hand")
            keyword = arg.keyword.value if arg.keyword is not None else None
            if keyword == "store":
                raise _Declined(init, "init_process_group is given a store of its own: migrate it by hand")
            if keyword in _RENDEZVOUS_KEYWORDS:
                rendezvous[keyword] = arg.value
            else:
                kept.append(f"{keyword}={code_of(arg.value)}" if keyword else code_of(arg.value))
        return tuple(kept), rendezvous

    def _in_worker(self, value, holder: cst.FunctionDef, worker: cst.FunctionDef) -> Optional[str]:
        """`value` (in the function holding init_process_group) as the worker spells it."""
        if value is None:
            return None
        if not isinstance(value, cst.CSTNode):
            return value  # already the worker's spelling
        code = code_of(value)
        if holder is worker:
            return code
        params = _positional_params(holder)
        dotted = dotted_name(value)
        if dotted is None:
            if any(name.value in params for name in descendants(value, cst.Name)):
                raise _Declined(value, f"init_process_group's `{code}` is computed from the helper's parameters: migrate it by hand")
            return code
        head, _, rest = dotted.partition(".")
        if head not in params:
            return code  # a global
        given = _argument_for(self.helper_call, holder, head)
        if given is None or (rest and dotted_name(given) is None):
            raise _Declined(value, f"`{head}` of `{holder.name.value}` is not passed as a plain value: migrate it by hand")
        return f"{code_of(given)}.{rest}" if rest else code_of(given)

    def _launcher_names(self, worker: cst.FunctionDef, args: Optional[cst.BaseExpression]) -> Dict[str, str]:
        """The worker's parameters -> the launcher's names for what it passes (`args` -> `opts`)."""
        params = _positional_params(worker)
        elements = list(args.elements) if isinstance(args, cst.Tuple) else []
        return {params[1 + i]: code_of(e.value) for i, e in enumerate(elements) if 1 + i < len(params) and dotted_name(e.value)}

    @staticmethod
    def _in_launcher(code: Optional[str], names: Dict[str, str]) -> Optional[str]:
        if code is None:
            return None
        head, dot, rest = code.partition(".")
        return names[head] + dot + rest if head in names else code

    # -- the rank, the world size, nprocs --------------------------------------------------
    def _rank(self, rank: Optional[str], index: str, worker: cst.FunctionDef, anchor: cst.CSTNode) -> None:
        if rank is None:
            return
        if rank == index:
            self.one_machine = True
            return
        found = self._assigned(rank, worker, anchor) if _is_dotted(rank) else []
        computed = [s for s in found if self._reads(s.body[0].value, index)]
        if len(found) != 1 or not computed:
            raise _Declined(self.call, f"the rank given to init_process_group, `{rank}`, is not computed once from the process "
                                       f"index `{index}` in `{worker.name.value}`: migrate it by hand")
        self._rebind(found[0], rank, RANK, "the rank", worker)

    def _reads(self, value: cst.CSTNode, name: str) -> bool:
        """Does `value` read the variable `name` (not an attribute called so)?"""
        return any(
            n.value == name and not (isinstance(self.a.parents.get(n), cst.Attribute) and self.a.parents.get(n).attr is n)
            for n in descendants(value, cst.Name)
        )

    def _world(self, world: Optional[str], receivers: Set[str], worker: cst.FunctionDef, anchor: cst.CSTNode,
               scope: ScopeOwner, spawn_statement: cst.CSTNode, names: Dict[str, str], nprocs: Optional[str]) -> None:
        if world is None:
            return
        if world in receivers:
            self.one_machine = self.world_is_nprocs = True  # nprocs is the world size: one machine
            return
        if not _is_dotted(world):
            raise _Declined(self.call, f"the world size given to init_process_group, `{world}`, is not a variable the tool can "
                                       "give torchrun's WORLD_SIZE: migrate it by hand")
        outside = self._in_launcher(world, names)
        if outside == nprocs:
            self.one_machine = True
            return
        found = [*self._assigned(outside, scope, spawn_statement), *self._assigned(world, worker, anchor)]
        if not found:
            raise _Declined(self.call, f"the world size `{world}` is taken as given (the command line, a caller): the tool "
                                       "cannot tell whether it counts machines or processes: migrate it by hand")
        for statement in found:
            self._rebind(statement, code_of(_target(statement)), WORLD_SIZE, "the world size", self.a.owner_of(statement))

    def _rebind_nprocs(self, nprocs: cst.BaseExpression, scope: ScopeOwner, spawn_statement: cst.CSTNode) -> None:
        code = code_of(nprocs)
        found = self._assigned(code, scope, spawn_statement)
        if len(found) != 1:
            raise _Declined(self.call, f"nprocs `{code}` is not assigned once before the spawn: the tool cannot give it "
                                       "torchrun's LOCAL_WORLD_SIZE: migrate it by hand")
        self._rebind(found[0], code, LOCAL_WORLD_SIZE, "nprocs", scope)

    def _rebind(self, statement: cst.SimpleStatementLine, target: str, value: str, what: str, scope) -> None:
        small = statement.body[0]
        if not isinstance(small, (cst.Assign, cst.AugAssign)) or (isinstance(small, cst.Assign) and len(small.targets) != 1):
            raise _Declined(statement, f"`{target}` is assigned along with other names: migrate it by hand")
        if not _top_level(self.a, statement, scope):
            raise _Declined(statement, f"{what} `{target}` is set under a condition here (a rendezvous of the script's "
                                       "own, per environment), which torchrun's replaces: migrate it by hand")
        if any(r.statement is statement for r in self.rebindings):
            return
        self.rebindings.append(Rebinding(statement, target, value, value.split('"')[1], what))

    def _assigned(self, target: Optional[str], scope: ScopeOwner, before: cst.CSTNode) -> List[cst.SimpleStatementLine]:
        """`target = ...` / `target += ...` statements in `scope` above `before`, in source order."""
        if target is None:
            return []
        limit = self.a.index.order.get(before, 0)
        return [
            statement for code, statement in self.a.index.assignments
            if code == target and len(statement.body) == 1 and self.a.owner_of(statement) is scope
            and self.a.index.order.get(statement, 0) < limit and code_of(_target(statement) or cst.Name("_")) == target
        ]

    def _not_set_per_environment(self, target: Optional[str], scope: ScopeOwner) -> None:
        """barlowtwins: `if "SLURM_JOB_ID" in os.environ: args.rank = ...; args.dist_url = ...`."""
        if target is None or not _is_dotted(target):
            return
        for code, statement in self.a.index.assignments:
            if code == target and self.a.owner_of(statement) is scope and not _top_level(self.a, statement, scope):
                condition = next(anc for anc in self.a.ancestors(statement) if isinstance(anc, (cst.If, cst.For, cst.While)))
                shown = f"under `if {code_of(condition.test)}:`" if isinstance(condition, cst.If) else "in a loop"
                raise _Declined(statement, f"the launcher sets `{target}` {shown}, a rendezvous of its own (per "
                                           "environment, several machines) that the tool cannot map onto torchrun's: "
                                           "migrate it by hand")

    # -- what else goes ----------------------------------------------------------------------
    def _environment(self) -> Tuple[cst.SimpleStatementLine, ...]:
        """`os.environ["MASTER_PORT"] = "29500"`, `os.environ.setdefault("MASTER_ADDR", ...)`: torchrun's to set."""
        found: List[cst.SimpleStatementLine] = []
        for _, statement in self.a.index.assignments:
            small = statement.body[0]
            if len(statement.body) == 1 and isinstance(small, cst.Assign) and len(small.targets) == 1:
                target = small.targets[0].target
                if isinstance(target, cst.Subscript) and self._environ_key(target.value, target.slice[0].slice if len(target.slice) == 1 else None):
                    found.append(statement)
        for call in self.a.calls_of(frozenset({"os.environ.setdefault", "os.putenv"})):
            statement = self.a.statement_of(call)
            key = call.args[0].value if call.args else None
            if (isinstance(key, cst.SimpleString) and key.evaluated_value in RENDEZVOUS_VARIABLES
                    and isinstance(statement, cst.SimpleStatementLine)
                    and len(statement.body) == 1 and isinstance(statement.body[0], cst.Expr)):
                found.append(statement)
        return tuple(sorted(set(found), key=lambda s: self.a.index.order.get(s, 0)))

    def _set_by_hand(self, environment, holder: cst.FunctionDef) -> Dict[str, cst.BaseExpression]:
        """`os.environ["RANK"] = str(rank)` next to an `env://` init_process_group with no rank of its
        own (in the function holding it): the value that is its rank (or world size)."""
        found: Dict[str, cst.BaseExpression] = {}
        for statement in environment:
            small = statement.body[0]
            if not isinstance(small, cst.Assign) or self.a.enclosing_function(statement) is not holder:
                continue
            key = small.targets[0].target.slice[0].slice.value.evaluated_value
            value = small.value
            if isinstance(value, cst.Call) and N.is_name(value.func, "str") and len(value.args) == 1:
                value = value.args[0].value
            elif isinstance(value, cst.FormattedString) and len(value.parts) == 1 and isinstance(value.parts[0], cst.FormattedStringExpression):
                value = value.parts[0].expression
            found.setdefault(key, value)
        return found

    def _environ_key(self, environ: cst.BaseExpression, index) -> bool:
        if self.a.index.resolve(environ) != "os.environ" or not isinstance(index, cst.Index):
            return False
        key = index.value
        return isinstance(key, cst.SimpleString) and key.evaluated_value in RENDEZVOUS_VARIABLES

    def _imports(self) -> Tuple[Tuple[str, Optional[str], Optional[str]], ...]:
        found = []
        for node in self.a.index.import_statements:
            if isinstance(node, cst.Import):
                for alias in node.names:
                    if dotted_name(alias.name) == "torch.multiprocessing" and alias.asname is not None:
                        found.append(("torch.multiprocessing", None, alias.asname.name.value))
            elif (not node.relative and node.module is not None and dotted_name(node.module) == "torch.multiprocessing"
                  and not isinstance(node.names, cst.ImportStar)):
                for alias in node.names:
                    name = dotted_name(alias.name)
                    if name in ("spawn", "start_processes"):
                        found.append(("torch.multiprocessing", name, alias.asname.name.value if alias.asname is not None else None))
        return tuple(found)

    def _trains(self, worker: cst.FunctionDef) -> bool:
        """Does the worker (or this file's code it calls) train, or build an optimizer for a
        project function to train with?"""
        optimizers = {call for call, _ in self.a.index.optimizer_calls} | set(self.a.index.optimizer_helpers)
        return self.a.flow.trains(worker) or any(call in optimizers for call in descendants(worker, cst.Call))


# -- small helpers ---------------------------------------------------------------------------
def _positional_params(function: cst.FunctionDef) -> List[str]:
    return [p.name.value for p in (*function.params.posonly_params, *function.params.params)]


def _argument_for(call: cst.Call, function: cst.FunctionDef, name: str) -> Optional[cst.BaseExpression]:
    """What `call` passes for `function`'s parameter `name` (None: a default, or unpacked)."""
    params = _positional_params(function)
    for position, arg in enumerate(call.args):
        if arg.star:
            return None
        if arg.keyword is not None and arg.keyword.value == name:
            return arg.value
        if arg.keyword is None and position < len(params) and params[position] == name:
            return arg.value
    return None


def _target(statement: cst.SimpleStatementLine) -> Optional[cst.BaseExpression]:
    small = statement.body[0]
    if isinstance(small, cst.Assign) and len(small.targets) == 1:
        return small.targets[0].target
    if isinstance(small, cst.AugAssign):
        return small.target
    return None


def _is_dotted(code: str) -> bool:
    return all(part.isidentifier() for part in code.split("."))


def _top_level(analysis, statement: cst.CSTNode, scope: ScopeOwner) -> bool:
    """Does `statement` run whenever `scope` runs (no condition or loop around it in there)?"""
    for anc in analysis.ancestors(statement):
        if anc is scope:
            return True
        if isinstance(anc, (cst.For, cst.While)) or (isinstance(anc, cst.If) and not N.is_main_guard(anc.test)):
            return False
    return True
