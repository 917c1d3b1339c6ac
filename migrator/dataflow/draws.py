"""Random draws that decide which samples a loader reads, and whether every rank draws the same.

A split drawn from a generator that nothing seeded (`random_split(ds, [n1, n2])`, `Subset(ds,
torch.randperm(n)[:k])`, `np.random.shuffle(idx)`) is drawn apart in each process under torchrun:
each rank then shards a training set of its own. The draws are a table (names.RANDOM_DRAWS, by
qualified name); what a draw decides is its value followed through the file's value flow with
`derived` edges (migrator.graph.flow) to the datasets the loaders are built on; and "is this
family's generator seeded, with a value every rank shares, before here" is one question.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import FrozenSet, Tuple

import libcst as cst

from migrator import names as N
from migrator.dataflow.core import FlowBase, LoaderFact
from migrator.graph.flow import DERIVED


@dataclass(frozen=True)
class SplitDraw:
    """A random draw, from a generator nothing seeded, that decides which samples `loaders` read."""

    call: cst.Call
    qname: str  # `torch.utils.data.random_split`, as resolved through the file's imports
    draw: N.RandomDraw
    loaders: Tuple[LoaderFact, ...]


class DrawFlow(FlowBase):
    """The draws of the file that split the data differently on each rank."""

    def split_draws(self, loaders: Tuple[LoaderFact, ...]) -> Tuple[SplitDraw, ...]:
        found = []
        for call in self.a.calls(frozenset(N.RANDOM_DRAWS)):
            qname = self.c.resolve(call.func)
            draw = N.RANDOM_DRAWS[qname]
            if _own_generator(call, draw) or self.seeded(draw.family, call):
                continue
            decided = self.loaders_decided_by(call, draw, loaders)
            if decided:
                found.append(SplitDraw(call, qname, draw, decided))
        return tuple(found)

    def loaders_decided_by(self, call: cst.Call, draw: N.RandomDraw, loaders: Tuple[LoaderFact, ...]) -> Tuple[LoaderFact, ...]:
        """The loaders whose dataset is computed from what `call` draws: its result, or the list it
        shuffles in place, followed through names, slices, Subsets, arguments and returns."""
        if draw.in_place:
            first = call.args[0].value if call.args and call.args[0].keyword is None and not call.args[0].star else None
            seeds = list(self.c.refers.get(first, ())) if first is not None else []
        else:
            seeds = self.values.derived(call)
        value = self.values.follow(seeds, DERIVED, every=False)
        datasets = {loader.dataset: loader for loader in loaders if loader.dataset is not None}
        held = [call, *value.references()]
        for node in list(held):
            self.values.derived(node, returned=held)  # `split(ds)` where split returns a Subset of it
        found = []
        for node in held:
            for anc in (node, *self.a.ancestors(node)):
                if anc in datasets:
                    found.append(datasets[anc])
                    break
                if isinstance(anc, (cst.BaseSmallStatement, cst.BaseStatement)):
                    break
        return tuple(sorted(dict.fromkeys(found), key=lambda loader: self.c.order.get(loader.call, 0)))

    def seeded(self, family: str, node: cst.CSTNode, seen: FrozenSet[cst.CSTNode] = frozenset()) -> bool:
        """Is `family`'s generator seeded on every path to `node`, with a value every rank shares?
        A seed of that family (names.SEEDS, or a call of the file's function whose body makes one)
        in a statement before `node` in a block that holds it; inside a function, before each of
        its calls in the file (a function the file never calls is not seeded)."""
        child = node
        for anc in self.a.ancestors(node):
            if isinstance(anc, (cst.Module, cst.IndentedBlock)):
                for statement in anc.body:
                    if statement is child:
                        break
                    if self._seeds(statement, family, seen):
                        return True
            elif isinstance(anc, (cst.FunctionDef, cst.Lambda)):
                sites = self.values.call_sites(anc)
                return anc not in seen and bool(sites) and all(self.seeded(family, site, seen | {anc}) for site in sites)
            child = anc
        return False

    def _seeds(self, statement: cst.CSTNode, family: str, seen: FrozenSet[cst.CSTNode]) -> bool:
        """Does running `statement` (a simple one: a compound one may skip it) seed `family`?"""
        if not isinstance(statement, (cst.SimpleStatementLine, cst.SimpleStatementSuite)):
            return False
        for call in self.a.call_graph.calls_in(statement):
            if any(N.mentions_rank(arg.value) for arg in call.args):
                continue  # `torch.manual_seed(args.seed + rank)`: a value of each rank's own
            if family in N.SEEDS.get(self.c.resolve(call.func) or "", ()):
                return True
            function = self.callee(call)
            if function is not None and function not in seen:
                body = function.body.body if isinstance(function.body, cst.IndentedBlock) else (function.body,)
                if any(self._seeds(inner, family, seen | {function}) for inner in body):
                    return True
        return False


def _own_generator(call: cst.Call, draw: N.RandomDraw) -> bool:
    """Is the draw handed a generator (or a seed) of its own, or may it be (`**kwargs`)?"""
    if any(arg.star for arg in call.args):
        return True
    if draw.keyword is not None and any(arg.keyword is not None and arg.keyword.value == draw.keyword for arg in call.args):
        return True
    positional = [arg for arg in call.args if arg.keyword is None]
    return draw.position is not None and len(positional) > draw.position

