"""Static checks that scripts/survey.py runs on the engine's output (and, for a few, its input).

Each check takes an `ast` tree (or source text) and returns a list of problems, one sentence
each, empty when the check passes. They read the code as written, lexically, without running or
resolving it: they are a measuring stick for the survey, not a second engine, so they prefer
simple rules that a reader can verify by eye over completeness.

Two families:
  - "wrong" checks (`WRONG_CHECKS`, plus parse, idempotence and DataParallel-left, which need
    more than a tree): the output is broken; a correct tool never produces it.
  - "property" checks (`PROPERTY_CHECKS`): something a full DDP migration has. A missing property
    is fine only when the engine said why (`EXPLAINED_BY`).

Blind spots, on purpose: wraps are keyed by the target's text within one scope (a model wrapped
in one function and again in its caller is not seen), a single wrap inside a loop is not counted
twice, and only `if` arms count as exclusive paths (not try/except, not early returns).
"""
from __future__ import annotations

import ast
from typing import Callable, Dict, Iterator, List, Optional, Sequence, Tuple

Problems = List[str]

WRAPPERS = frozenset({"DDP", "DistributedDataParallel"})
MOVES = frozenset({"to", "cuda"})
# An `if` whose test mentions one of these is taken to run on one rank only (lower-cased text).
RANK_WORDS = ("rank", "is_main", "master")
# A loader assigned to a name with one of these (lower-cased) is an evaluation loader: shuffled
# or not, it needs no DistributedSampler (every rank may evaluate the whole set).
EVAL_WORDS = ("val", "test", "eval")

# Which diagnostics explain a missing property: a change the engine did not make is fine
# (PARTIAL) when it reported one of these codes, and a GAP when it said nothing. One place,
# so the survey and its tests agree on what "explained" means.
EXPLAINED_BY: Dict[str, Tuple[str, ...]] = {
    "process group": ("DDP101",),
    "LOCAL_RANK": ("DDP101",),
    "DDP wrap": ("DDP101", "DDP103", "DDP104", "DDP105"),
    "sampler": ("DDP106", "DDP107", "DDP108"),
    "set_epoch": ("DDP109",),
    "rank-0 save": ("DDP110", "DDP115"),
}


# ---------------------------------------------------------------- small helpers


def callee_name(call: ast.Call) -> str:
    """The last name of what is called: `DDP` for `DDP(...)` and for `nn.parallel.DDP(...)`."""
    func = call.func
    if isinstance(func, ast.Attribute):
        return func.attr
    return func.id if isinstance(func, ast.Name) else ""


def calls(tree: ast.AST, name: str) -> Iterator[ast.Call]:
    """Every call in `tree` whose callee's last name is `name`."""
    return (n for n in ast.walk(tree) if isinstance(n, ast.Call) and callee_name(n) == name)


def is_wrap(node: Optional[ast.AST]) -> bool:
    return isinstance(node, ast.Call) and callee_name(node) in WRAPPERS


def parents(tree: ast.AST) -> Dict[ast.AST, ast.AST]:
    """Child -> parent for every node (ast keeps no back links)."""
    return {child: node for node in ast.walk(tree) for child in ast.iter_child_nodes(node)}


def mentions(node: ast.AST, text: str) -> bool:
    """Does a name or attribute chain spelled exactly `text` occur in `node`?"""
    return any(
        isinstance(n, (ast.Name, ast.Attribute)) and ast.unparse(n) == text for n in ast.walk(node)
    )


# ---------------------------------------------------------------- scopes and paths

# A statement's path: the (compound statement, arm) pairs above it inside its scope. Two
# statements are on a common path unless their paths first part at an `if`, one in each arm.
Path = Tuple[Tuple[ast.AST, str], ...]
SCOPES = (ast.Module, ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)


def scope_statements(scope: ast.AST) -> Iterator[Tuple[ast.stmt, Path]]:
    """The statements of one scope in source order, not descending into nested defs."""

    def walk(body: Sequence[ast.stmt], path: Path) -> Iterator[Tuple[ast.stmt, Path]]:
        for stmt in body:
            yield stmt, path
            if isinstance(stmt, SCOPES):
                continue
            for arm in ("body", "orelse", "finalbody"):
                yield from walk(getattr(stmt, arm, None) or (), path + ((stmt, arm),))
            for i, part in enumerate(getattr(stmt, "handlers", None) or getattr(stmt, "cases", None) or ()):
                yield from walk(part.body, path + ((stmt, f"part{i}"),))

    return walk(scope.body, ())


def exclusive(a: Path, b: Path) -> bool:
    """Are two statements in different arms of one `if` (so never both run)?"""
    for (node_a, arm_a), (node_b, arm_b) in zip(a, b):
        if node_a is not node_b:
            return False  # sibling statements: one runs after the other
        if arm_a != arm_b:
            return isinstance(node_a, ast.If)
    return False  # one contains the other


def wrap_target(stmt: ast.stmt) -> Optional[str]:
    """`X` for `X = DDP(...)` (also `self.x = ...`, annotated), else None."""
    if isinstance(stmt, (ast.Assign, ast.AnnAssign)) and is_wrap(stmt.value):
        targets = stmt.targets if isinstance(stmt, ast.Assign) else [stmt.target]
        return ast.unparse(targets[0])
    return None


def resets(stmt: ast.stmt, key: str, rebinders: Sequence[str] = ()) -> bool:
    """Does `stmt` bind `key` to a new object (`model = Net()`, or a call of a function of the file
    that rebinds the global: `model_load(path)` with `global model` in it), ending what wrapped it
    before?"""
    if isinstance(stmt, ast.Expr) and isinstance(stmt.value, ast.Call) and isinstance(stmt.value.func, ast.Name):
        return stmt.value.func.id in rebinders
    if not isinstance(stmt, (ast.Assign, ast.AnnAssign)) or stmt.value is None or is_wrap(stmt.value):
        return False
    targets = stmt.targets if isinstance(stmt, ast.Assign) else [stmt.target]
    return any(ast.unparse(t) == key for t in targets) and not mentions(stmt.value, key)


def moved(stmt: ast.stmt) -> Optional[str]:
    """`X` for `X.to(...)`, `X.cuda()` or `X = X.to(...)`, else None."""
    value = stmt.value if isinstance(stmt, (ast.Expr, ast.Assign)) else None
    if isinstance(value, ast.Call) and isinstance(value.func, ast.Attribute) and value.func.attr in MOVES:
        receiver = ast.unparse(value.func.value)
        if isinstance(stmt, ast.Expr) or ast.unparse(stmt.targets[0]) == receiver:
            return receiver
    return None


Done = List[Tuple[str, int]]  # (wrapped target, index of its statement in the scope)


def live_wrap(key: str, here: int, done: Done, scope: Sequence[Tuple[ast.stmt, Path]],
              rebinders: Sequence[str] = ()) -> Optional[ast.stmt]:
    """An earlier wrap of `key` on a common path with statement `here`, not reset in between."""
    for wrapped, at in reversed(done):
        if wrapped != key or exclusive(scope[at][1], scope[here][1]):
            continue
        if not any(resets(stmt, key, rebinders) for stmt, _ in scope[at + 1 : here]):
            return scope[at][0]
    return None


def global_rebinders(tree: ast.AST, key: str) -> List[str]:
    """The module's functions that declare `global key` and assign it (a resume helper)."""
    return [
        node.name for node in getattr(tree, "body", ())
        if isinstance(node, ast.FunctionDef)
        and any(isinstance(n, ast.Global) and key in n.names for n in ast.walk(node))
        and any(isinstance(n, ast.Name) and n.id == key and isinstance(n.ctx, ast.Store) for n in ast.walk(node))
    ]


# ---------------------------------------------------------------- "wrong" checks


def parse_problems(source: str) -> Problems:
    """The output must be Python."""
    try:
        ast.parse(source)
    except SyntaxError as err:
        return [f"output does not parse: line {err.lineno}: {err.msg}"]
    return []


def idempotence_problems(source: str, migrate: Callable[[str], str]) -> Problems:
    """A second run must change nothing (`migrate` returns the new text)."""
    again = migrate(source)
    if again == source:
        return []
    old, new = source.splitlines(), again.splitlines()
    first = next((i for i, (a, b) in enumerate(zip(old, new)) if a != b), min(len(old), len(new)))
    return [f"not idempotent: a second run changes line {first + 1}"]


def after_wraps(
    tree: ast.AST, keys_of: Callable[[ast.stmt], Sequence[str]]
) -> Iterator[Tuple[ast.stmt, str, ast.stmt]]:
    """(statement, key, earlier wrap) for each statement one of whose `keys_of` was wrapped in
    DDP earlier on a common path in the same scope (see `live_wrap`)."""
    for scope in (n for n in ast.walk(tree) if isinstance(n, SCOPES)):
        statements = list(scope_statements(scope))
        done: Done = []
        for here, (stmt, _) in enumerate(statements):
            for key in keys_of(stmt):
                earlier = live_wrap(key, here, done, statements, global_rebinders(tree, key) if scope is tree else ())
                if earlier:
                    yield stmt, key, earlier
                    break
            target = wrap_target(stmt)
            if target:
                done.append((target, here))


def wrap_keys(stmt: ast.stmt) -> Sequence[str]:
    """For `X = DDP(Y, ...)`: X and Y (`model = DDP(model)` twice, or `b = DDP(a)` after `a = DDP(...)`)."""
    target = wrap_target(stmt)
    if target is None:
        return ()
    arg = ast.unparse(stmt.value.args[0]) if stmt.value.args else None
    return tuple(dict.fromkeys(k for k in (target, arg) if k))


def double_wrap_problems(tree: ast.AST) -> Problems:
    """One DDP per model per path: no second wrap of a target, no DDP around a DDP."""
    nested = [
        f"line {call.lineno}: DDP around a DDP call"
        for name in WRAPPERS
        for call in calls(tree, name)
        if call.args and is_wrap(call.args[0])
    ]
    return nested + [
        f"line {stmt.lineno}: {key} wrapped in DDP again (first at line {earlier.lineno})"
        for stmt, key, earlier in after_wraps(tree, wrap_keys)
    ]


def move_after_wrap_problems(tree: ast.AST) -> Problems:
    """A wrapped model is not moved again (`.to()`/`.cuda()` on the DDP object)."""
    return [
        f"line {stmt.lineno}: {key} moved after its DDP wrap (line {earlier.lineno})"
        for stmt, key, earlier in after_wraps(tree, lambda stmt: tuple(filter(None, [moved(stmt)])))
    ]


def dataparallel_problems(tree: ast.AST, exempt_functions: Sequence[str] = ()) -> Problems:
    """No DataParallel call left, except as an isinstance/issubclass argument or inside
    `exempt_functions` (code the engine reported as outside training, DDP111)."""
    names = {"DataParallel"} | {
        alias.asname for node in ast.walk(tree) if isinstance(node, ast.ImportFrom)
        for alias in node.names if alias.name == "DataParallel" and alias.asname
    }
    up = parents(tree)

    def excused(node: ast.AST) -> bool:
        while node in up:
            node = up[node]
            if isinstance(node, ast.Call) and callee_name(node) in ("isinstance", "issubclass"):
                return True
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) and node.name in exempt_functions:
                return True
        return False

    return [
        f"line {n.lineno}: {ast.unparse(n.func)}(...) left"
        for n in ast.walk(tree)
        if isinstance(n, ast.Call) and callee_name(n) in names and not excused(n)
    ]


def extra_process_group_problems(before: ast.AST, after: ast.AST) -> Problems:
    """A script that sets up its own process group must not get a second one."""
    old, new = (len(list(calls(t, "init_process_group"))) for t in (before, after))
    return [f"init_process_group calls went from {old} to {new}"] if new > old else []


def spawn_problems(tree: ast.AST) -> Problems:
    """A script `--spawn` migrated: no mp.spawn left, and every init_process_group reads torchrun's
    environment (no init_method; a rank and a world size only for the world of one, with a store)."""
    problems = [f"line {c.lineno}: {callee_name(c)}(...) is still called" for c in
                (*calls(tree, "spawn"), *calls(tree, "start_processes"))]
    for call in calls(tree, "init_process_group"):
        keywords = {k.arg for k in call.keywords}
        if "init_method" in keywords or ({"rank", "world_size"} & keywords and "store" not in keywords):
            problems.append(f"line {call.lineno}: init_process_group keeps a rendezvous of its own ({', '.join(sorted(keywords))})")
    return problems


# Names the migration's setup uses at module level: each must be bound (imported, assigned) above
# its first module-level use, or the script dies with NameError on every rank.
SETUP_NAMES = ("os", "torch", "dist", "local_rank", "DDP", "DistributedSampler")


def unbound_setup_name_problems(tree: ast.AST) -> Problems:
    """`local_rank = int(os.environ...)` above `try: import os` (a NameError at start-up).

    Module-level code only, in source order through if/try/with/for blocks; function bodies run
    later and are skipped (their names are bound by then, or the script was broken before)."""
    problems: List[str] = []
    bound: set = set()

    def expressions(node: ast.stmt) -> List[ast.AST]:
        # The parts of a compound statement that run before its blocks.
        if isinstance(node, (ast.If, ast.While)):
            return [node.test]
        if isinstance(node, (ast.For, ast.AsyncFor)):
            return [node.iter]
        if isinstance(node, (ast.With, ast.AsyncWith)):
            return [item.context_expr for item in node.items]
        return []

    def visit(statements: Sequence[ast.stmt]) -> None:
        for stmt in statements:
            if isinstance(stmt, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
                bound.add(stmt.name)
                continue
            blocks = [getattr(stmt, field, None) for field in ("body", "orelse", "finalbody")]
            blocks += [handler.body for handler in getattr(stmt, "handlers", [])]
            heads = expressions(stmt) if any(blocks) else [stmt]
            for head in heads:
                used = {n.id for n in ast.walk(head) if isinstance(n, ast.Name) and isinstance(n.ctx, ast.Load)}
                problems.extend(f"line {stmt.lineno}: `{name}` used before it is imported or assigned"
                                for name in SETUP_NAMES if name in used and name not in bound)
            if not any(blocks):
                for node in ast.walk(stmt):
                    if isinstance(node, (ast.Import, ast.ImportFrom)):
                        bound.update((alias.asname or alias.name).split(".")[0] for alias in node.names)
                    elif isinstance(node, ast.Name) and isinstance(node.ctx, ast.Store):
                        bound.add(node.id)
            else:
                for target in ast.walk(stmt) if isinstance(stmt, (ast.For, ast.With)) else ():
                    if isinstance(target, ast.Name) and isinstance(target.ctx, ast.Store):
                        bound.add(target.id)
                for block in blocks:
                    visit(block or [])

    visit(getattr(tree, "body", []))
    return problems


WRONG_CHECKS: Tuple[Callable[[ast.AST], Problems], ...] = (
    double_wrap_problems, move_after_wrap_problems, unbound_setup_name_problems,
)


# ---------------------------------------------------------------- property checks


def process_group_problems(tree: ast.AST) -> Problems:
    return [] if any(calls(tree, "init_process_group")) else ["no init_process_group call"]


def local_rank_problems(tree: ast.AST) -> Problems:
    """LOCAL_RANK is read: the string appears inside a call or a subscript (os.environ[...])."""
    up = parents(tree)
    for node in ast.walk(tree):
        if isinstance(node, ast.Constant) and node.value == "LOCAL_RANK":
            while node in up and not isinstance(node, (ast.Call, ast.Subscript)):
                node = up[node]
            if isinstance(node, (ast.Call, ast.Subscript)):
                return []
    return ["LOCAL_RANK never read"]


def wrap_problems(tree: ast.AST) -> Problems:
    return [] if any(is_wrap(n) for n in ast.walk(tree)) else ["no DDP wrap"]


def sampler_problems(tree: ast.AST) -> Problems:
    """Every shuffled training DataLoader has a sampler (the engine's rewrite passes `sampler=`).
    Shuffled means `shuffle=` is anything but a literal False/None; a loader assigned to a name
    with an EVAL_WORDS word is not a training loader."""
    up = parents(tree)
    problems = []
    for call in calls(tree, "DataLoader"):
        keywords = {k.arg: k.value for k in call.keywords if k.arg}
        shuffle = keywords.get("shuffle")
        unshuffled = shuffle is None or (isinstance(shuffle, ast.Constant) and shuffle.value in (False, None))
        if unshuffled or {"sampler", "batch_sampler"} & keywords.keys() or evaluation(up.get(call)):
            continue
        problems.append(f"line {call.lineno}: shuffled DataLoader without a sampler")
    return problems


def evaluation(assignment: Optional[ast.AST]) -> bool:
    """Is this the assignment of an evaluation loader (`val_loader = DataLoader(...)`)?"""
    if not isinstance(assignment, (ast.Assign, ast.AnnAssign)):
        return False
    targets = assignment.targets if isinstance(assignment, ast.Assign) else [assignment.target]
    return any(word in ast.unparse(t).lower() for t in targets for word in EVAL_WORDS)


def _shuffle_false(call: ast.Call) -> bool:
    return any(k.arg == "shuffle" and isinstance(k.value, ast.Constant) and k.value.value is False for k in call.keywords)


def set_epoch_problems(tree: ast.AST) -> Problems:
    """A file that builds a shuffling DistributedSampler calls set_epoch somewhere (with
    `shuffle=False` the order never changes, and set_epoch has nothing to do)."""
    shuffling = [c for c in calls(tree, "DistributedSampler") if not _shuffle_false(c)]
    if not shuffling or any(calls(tree, "set_epoch")):
        return []
    return ["DistributedSampler built but set_epoch never called"]


def rank_zero_save_problems(tree: ast.AST) -> Problems:
    """Every torch.save runs on one rank: lexically under an `if` whose test mentions a rank
    word, or inside a function every same-file call of which is so guarded (transitively)."""
    up = parents(tree)
    functions = {n.name: n for n in ast.walk(tree) if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef))}

    def guarded(node: ast.AST, seen: frozenset) -> bool:
        while node in up:
            child, node = node, up[node]
            if isinstance(node, ast.If) and child is not node.test:
                if any(word in ast.unparse(node.test).lower() for word in RANK_WORDS):
                    return True
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                sites = list(calls(tree, node.name)) if functions.get(node.name) is node else []
                return node.name not in seen and bool(sites) and all(
                    guarded(site, seen | {node.name}) for site in sites
                )
        return False

    return [
        f"line {call.lineno}: torch.save runs on every rank"
        for call in calls(tree, "save")
        if ast.unparse(call.func) == "torch.save" and not guarded(call, frozenset())
    ]


PROPERTY_CHECKS: Dict[str, Callable[[ast.AST], Problems]] = {
    "process group": process_group_problems,
    "LOCAL_RANK": local_rank_problems,
    "DDP wrap": wrap_problems,
    "sampler": sampler_problems,
    "set_epoch": set_epoch_problems,
    "rank-0 save": rank_zero_save_problems,
}
