"""DDP114: a script that trains but that nothing was done to is never passed over in silence.

Runs last, after every other rule: when a file shows training (a backward pass, an optimizer
step, a hand-written parameter update, or a training call in a script) and the migration
neither changed nor reported anything, the user would read "nothing to do". This reporter says
instead where the training is and why the tool did not migrate it, naming the module that
holds the training when it is imported from elsewhere.

Code that is already distributed (a process group, DDP, mp.spawn, a distributed launcher or
framework) is not reported here: the other rules own it, and a healthy repository gets no noise.
Library modules that only *build* an optimizer (`configure_optimizers`) are not training code.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Dict, Optional

import libcst as cst

from migrator.analysis import ScriptFacts, code_of
from migrator.edits import Plan
from migrator import names as N
from migrator.names import attribute_name, is_main_guard, is_training_function_name, manual_update_parameters
from migrator.rule import Example, Rule
from migrator.types import Diagnostic

RULE = Rule(
    code="DDP114",
    name="training-not-migrated",
    summary="this file trains, but ddp-migrate found nothing it could migrate safely; the message says why",
    what="""
The file shows training, a `backward()` pass, an optimizer `step()`, a hand-written update
(`p.data.add_(p.grad, ...)`), DataParallel beside `torch.optim`, or, in a script, a training call such as `trainer.train()` or
`agent.learn(batch)`, yet no rule rewrote or reported anything. The finding names the line and
the reason: the model or its optimizer is built in another module (named when it is imported),
the optimizer's parameters cannot be traced to a model, or the training runs in a library module
with no entry point.""",
    why="""
A file left unchanged with nothing said reads as "nothing to migrate". A script that trains on
one GPU still does after the run; under torchrun every process would train its own copy.""",
    fix="Migrate the module the message names (the one that builds the model and runs the loop), or that part by hand.",
    fix_safety="Not fixable automatically.",
    fixable=False,
    examples=(
        Example(
            id="training-in-another-module",
            before='''import argparse

import torch

from agent import Agent


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--steps", type=int, default=100)
    args = parser.parse_args()
    agent = Agent(torch.device("cuda" if torch.cuda.is_available() else "cpu"))
    for step in range(args.steps):
        agent.learn(step)


if __name__ == "__main__":
    main()
''',
            diagnostics=("DDP114",),
        ),
        Example(
            id="optimizer-from-the-model",
            before='''import torch


class Trainer:
    def __init__(self, model, config):
        self.model = model
        self.config = config

    def run(self, batches):
        optimizer = self.model.configure_optimizers(self.config)
        for x, y in batches:
            loss = torch.nn.functional.mse_loss(self.model(x), y)
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
''',
            diagnostics=("DDP114",),
        ),
        Example(
            id="library-builds-optimizer",
            fires=False,
            before='''import torch


class GPT(torch.nn.Module):
    def configure_optimizers(self, lr):
        return torch.optim.AdamW(self.parameters(), lr=lr)
''',
        ),
        Example(
            id="loss-scaler-helper",
            before='''"""Loss scaling for mixed-precision training, in the shape of timm's NativeScaler."""
import torch


class NativeScaler:
    def __init__(self):
        self._scaler = torch.amp.GradScaler("cuda")

    # The training loop hands in its loss and its optimizer: the model, the loader and
    # the loop live with the caller, and there is nothing to migrate here.
    def __call__(self, loss, optimizer, clip_grad=None, parameters=None):
        self._scaler.scale(loss).backward()
        if clip_grad is not None:
            self._scaler.unscale_(optimizer)
            torch.nn.utils.clip_grad_norm_(parameters, clip_grad)
        self._scaler.step(optimizer)
        self._scaler.update()

    def state_dict(self):
        return self._scaler.state_dict()

    def load_state_dict(self, state_dict):
        self._scaler.load_state_dict(state_dict)
''',
            fires=False,
        ),
        Example(
            id="hugging-face-trainer",
            before='''from datasets import load_dataset
from transformers import AutoModelForSequenceClassification, AutoTokenizer, Trainer, TrainingArguments


def main():
    tokenizer = AutoTokenizer.from_pretrained("distilbert-base-uncased")
    dataset = load_dataset("imdb", split="train[:1%]")
    dataset = dataset.map(lambda batch: tokenizer(batch["text"], truncation=True), batched=True)
    model = AutoModelForSequenceClassification.from_pretrained("distilbert-base-uncased", num_labels=2)
    # Trainer distributes itself: under torchrun it wraps the model in DDP and shards the data.
    trainer = Trainer(
        model=model,
        args=TrainingArguments(output_dir="out", per_device_train_batch_size=16, num_train_epochs=1),
        train_dataset=dataset,
        tokenizer=tokenizer,
    )
    trainer.train()
    trainer.save_model("out/final")


if __name__ == "__main__":
    main()
''',
            fires=False,
        ),
    ),
)

_SETUP = "DDP001"  # with the process-group setup off, nothing can be migrated, and that is no decline

# Method calls that run training in an object built elsewhere (`trainer.train()`, `agent.learn(m)`).
TRAINING_METHODS = frozenset(
    {"train", "fit", "learn", "update", "train_epoch", "train_one_epoch", "training", "train_step", "optimize",
     "optimize_parameters"}  # the last: pix2pix's BaseModel, and the GAN frameworks built on it
)
# Imports of code that distributes training itself: such a file is already distributed.
@dataclass(frozen=True)
class Signal:
    """One sign of training: what it is, and where."""

    what: str
    node: cst.CSTNode


def plan(facts: ScriptFacts, plan: Plan) -> None:
    if plan.changes or plan.diagnostics or facts.already_distributed or _SETUP not in plan.fixes:
        return  # migrated, reported, distributed already, or its setup is not selected: not a silent decline
    module = facts.module
    imports = _imported_modules(facts.import_statements)
    if _uses_torch_distributed(imports) or not (is_script(module) or _sets_up_training(facts.calls, imports)):
        return
    signal = _first_training_signal(facts)
    if signal is None:
        return
    line, col = facts.line_col(signal.node)
    reason = _reason(facts, imports, signal)
    plan.diagnostics.append(Diagnostic(RULE.code, line, col, f"{signal.what} at line {line}, but nothing was migrated: {reason}"))


# -- what counts as training ------------------------------------------------------------
def _first_training_signal(facts: ScriptFacts) -> Optional[Signal]:
    """The first training sign in source order; a training call counts only in a runnable script."""
    script = is_script(facts.module)
    optimizes = any(attr.attr.value == "optim" and code_of(attr) == "torch.optim" for attr in facts.attributes)
    loops = [loop for loop in facts.loops if isinstance(loop, cst.For)]
    for node in sorted((*facts.calls, *loops), key=lambda node: facts.order.get(node, 0)):
        if isinstance(node, cst.For):
            if manual_update_parameters(node) is not None:
                return Signal("a hand-written parameter update", node)
            continue
        method = attribute_name(node.func)
        if optimizes and (method or getattr(node.func, "value", "")) == "DataParallel":
            return Signal("a DataParallel model trained with torch.optim", node)
        if method == "backward":
            return Signal(f"a backward pass (`{code_of(node)}`)", node)
        if method == "step" and _looks_like_optimizer(node.func.value):  # type: ignore[attr-defined]
            return Signal(f"an optimizer step (`{code_of(node)}`)", node)
        if script and method in TRAINING_METHODS and _is_training_call(node):
            return Signal(f"training (`{_short(node)}`)", node)
        if script and isinstance(node.func, cst.Name) and is_training_function_name(node.func.value):
            return Signal(f"training (`{_short(node)}`)", node)
    return None


def _looks_like_optimizer(receiver: cst.BaseExpression) -> bool:
    last = code_of(receiver).split(".")[-1].lower()
    return "optim" in last or last in ("opt", "opt_g", "opt_d", "solver")


def _is_training_call(call: cst.Call) -> bool:
    """`trainer.train()`, `agent.learn(mem)`; not `model.train(False)` or `dict.update(x)`-like calls."""
    method = attribute_name(call.func)
    receiver = code_of(call.func.value).lower()  # type: ignore[attr-defined]
    if method == "update":
        return any(word in receiver for word in ("agent", "learner", "trainer", "policy", "algo"))
    if method == "train":
        return not call.args
    return True


def is_script(module: cst.Module) -> bool:
    """A file that runs something: a main guard, or loops/calls at module level."""
    for statement in module.body:
        if isinstance(statement, cst.If) and is_main_guard(statement.test):
            return True
        if isinstance(statement, (cst.For, cst.While)):
            return True
    return False


# -- already distributed -------------------------------------------------------------------
def _uses_torch_distributed(imports: Dict[str, str]) -> bool:
    """A module that talks to the process group (`import torch.distributed as dist`) is written
    for several processes, even when the setup is elsewhere (facts.distributed covers the rest)."""
    return any(source.startswith("torch.distributed") for source in imports.values())


def _sets_up_training(calls, imports: Dict[str, str]) -> bool:
    """Does this module build what it trains with: a DataLoader, or an optimizer? A helper that is
    handed a loss and an optimizer (`NativeScaler.__call__`, an optimizer wrapper's `step`, a
    trainer class given its loader) has nothing to migrate: its caller does."""
    for call in calls:
        name = attribute_name(call.func) or (call.func.value if isinstance(call.func, cst.Name) else "")
        head = code_of(call.func).split(".")[0]
        if name in ("DataLoader", "DataParallel", "configure_optimizers") or imports.get(head, "").startswith("torch.optim"):
            return True
        # `torch.optim.SGD(...)`, `getattr(torch.optim, name)(...)`, `get_instance(torch.optim, ...)`; not
        # `isinstance(x, torch.optim.Optimizer)` (an optimizer wrapper checking what it is given)
        if code_of(call.func).startswith("torch.optim") or any(code_of(arg.value) == "torch.optim" for arg in call.args):
            return True
    return False


# -- why -------------------------------------------------------------------------------------
def _reason(facts: ScriptFacts, imports: Dict[str, str], signal: Signal) -> str:
    elsewhere = _training_elsewhere(facts, imports)
    if elsewhere:
        return elsewhere
    if not is_script(facts.module):
        return (
            "no entry point in this module (no main guard, no module-level training): the model and its "
            "optimizer come from the caller; run ddp-migrate on the script that builds them, or migrate by hand"
        )
    built = _built_by_project(facts, imports)
    if built:
        return (
            f"no model could be traced from a torch.optim optimizer or a `model.parameters()` update to the "
            f"statement that builds it ({built}); wrap the model in DDP where it is built and shard its "
            "loader by hand"
        )
    return (
        "no model could be traced from a torch.optim optimizer or a `model.parameters()` update to the "
        "statement that builds it; wrap the model in DDP where it is built and shard its loader by hand"
    )


_MODEL_METHODS = ("cuda", "to", "train", "eval", "parameters", "state_dict", "module")


def _built_by_project(facts: ScriptFacts, imports: Dict[str, str]) -> Optional[str]:
    """`model = create_model(opt)` with `create_model` from the project's `models.models`, and
    `model` used as a module here: "the model `model` comes from `create_model(opt)` in module
    `models.models`" (the first such, in source order)."""
    used = {code_of(a.value) for a in facts.attributes if a.attr.value in _MODEL_METHODS}
    for assign in facts.assigns:
        if not (isinstance(assign.value, cst.Call) and len(assign.targets) == 1):
            continue
        target = code_of(assign.targets[0].target)
        func = assign.value.func
        head = func.value if isinstance(func, cst.Name) else code_of(func).split(".")[0]
        origin = _origin(head, imports)
        if origin and target in used:
            return f"the model `{target}` comes from `{_short(assign.value)}` in module `{origin}`"
    return None


def _training_elsewhere(facts: ScriptFacts, imports: Dict[str, str]) -> Optional[str]:
    """Name the imported module that builds the model, the optimizer or runs the training.

    `agent.learn(mem)` / `trainer.fit()` come before a bare `model.train()` (which only sets the
    training mode of something built elsewhere), and both before an imported `train(...)` function.
    """
    builders = _constructors(facts.assigns)
    calls = list(facts.calls)
    # `trainer = Trainer(config, model, data)` from the project, then `trainer.run()`: that module
    # trains, whatever its method is called (minGPT's Trainer.run, a Solver.solve).
    for call in reversed(calls):  # the last call on it runs the training (`trainer.run()` after set-up calls)
        if not isinstance(call.func, cst.Attribute):
            continue
        receiver = code_of(call.func.value)
        built_by = builders.get(receiver, "")
        origin = _origin(built_by, imports) if ("Trainer" in built_by or "Solver" in built_by) else None
        if origin:
            return (
                f"`{_short(call)}` trains through `{receiver}`, a `{built_by}` from module `{origin}`; the "
                f"optimizer and the loop live there: run ddp-migrate on the project (or migrate `{origin}`)"
            )
    methods = [c for c in calls if attribute_name(c.func) in TRAINING_METHODS and _is_training_call(c)]
    methods.sort(key=lambda c: attribute_name(c.func) == "train")
    for call in methods:
        receiver = code_of(call.func.value)  # type: ignore[attr-defined]
        origin = _origin(builders.get(receiver, receiver.split(".")[0]), imports)
        if origin:
            return (
                f"`{_short(call)}` trains through `{receiver}` from module `{origin}`; the model, its optimizer "
                f"and loop live there: migrate `{origin}` (or run ddp-migrate on the project)"
            )
    for call in calls:
        if isinstance(call.func, cst.Name) and is_training_function_name(call.func.value):
            origin = _origin(call.func.value, imports)
            if origin:
                return (
                    f"`{_short(call)}` runs the training in module `{origin}`: migrate `{origin}` "
                    "(or run ddp-migrate on the project)"
                )
    return None


def _constructors(assigns) -> Dict[str, str]:
    """`agent = Agent(...)` / `self.trainer = Trainer(...)`: receiver -> the name of what built it."""
    found: Dict[str, str] = {}
    for assign in assigns:
        if isinstance(assign.value, cst.Call) and len(assign.targets) == 1:
            func = assign.value.func
            head = func.value if isinstance(func, cst.Name) else code_of(func).split(".")[0]
            found.setdefault(code_of(assign.targets[0].target), head)
    return found


def _origin(name: str, imports: Dict[str, str]) -> Optional[str]:
    """The module a local name was imported from: the project's own, not the standard library or a
    well-known package (a `tqdm` progress bar's `update()` trains nothing)."""
    source = imports.get(name)
    if source is None or source.split(".")[0] in N.NOT_PROJECT_PACKAGES:
        return None
    return source


def _imported_modules(statements) -> Dict[str, str]:
    """Local name -> the module it comes from (`from agent import Agent` -> {"Agent": "agent"})."""
    found: Dict[str, str] = {}
    for node in statements:
        if isinstance(node, cst.Import):
            for alias in node.names:
                dotted = code_of(alias.name)
                local = code_of(alias.asname.name) if alias.asname else dotted.split(".")[0]
                found[local] = dotted
        elif not isinstance(node.names, cst.ImportStar):
            source = "." * len(node.relative) + (code_of(node.module) if node.module is not None else "")
            for alias in node.names:
                local = code_of(alias.asname.name) if alias.asname else code_of(alias.name)
                found[local] = source
    return found


def _short(call: cst.Call) -> str:
    text = " ".join(code_of(call).split())
    return text if len(text) <= 60 else text[:57] + "..."


