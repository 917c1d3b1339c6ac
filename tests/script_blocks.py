"""Hypothesis strategies that compose complete single-process training scripts from the
building blocks real-world PyTorch scripts are made of (see fixtures/*/input.py).

    @given(script_blocks.scripts())
    def test_x(script): script.source, script.spec ...

Every composed script is valid Python 3, trains a tiny model on a synthetic TensorDataset for
2 epochs, and runs on a CPU as `python script.py` in a second or two. The choices:

  imports   `import torch.nn as nn` / `from torch import nn` / `import torch` only /
            `from torch.nn import DataParallel as DP`
  device    torch.device("cuda" if ... else "cpu") / "cuda:0" with fallback / a `use_cuda`
            flag from argparse / `.cuda()` under `if torch.cuda.is_available():`
  wrap      none / nn.DataParallel(model) / DataParallel under `if torch.cuda.device_count() > 1:`
            / torch.nn.parallel.DataParallel
  loaders   inline DataLoader(shuffle=True) / a kwargs dict / a helper returning the loaders;
            with a validation loader or not
  loop      inline epoch loop / train_one_epoch(model, loader, optimizer) helper / Trainer class
  checkpoint  none / torch.save(model.state_dict(), "model.pt") / save_checkpoint(state, filename)
            / a dict checkpoint every epoch
  entry     main() + guard / the guard's body / a flat module
  noise     comments in odd places, blank lines, quote style, trailing commas, a docstring, tabs
"""
from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Dict, List, Tuple

from hypothesis import strategies as st

IMPORTS = ("nn_alias", "from_torch", "torch_only", "dp_from_import")
DEVICES = ("device_ternary", "cuda0_fallback", "use_cuda_flag", "cuda_method")
WRAPS = ("none", "dp", "conditional_dp", "qualified_dp")
LOADERS = ("inline", "kwargs", "helper")
LOOPS = ("inline", "helper", "trainer")
CHECKPOINTS = ("none", "state_dict", "helper", "dict_each_epoch")
ENTRIES = ("main", "guard", "flat")

#: Where a noise comment may go (a subset is drawn).
COMMENT_SLOTS = (
    "after_imports", "before_class", "class_body_top", "eol_model", "inner_loop", "epoch_first",
    "col0_in_body", "eol_for", "end_of_file", "before_optimizer", "between_methods",
)
BLANK_SLOTS = ("after_imports", "before_class", "before_setup", "in_loop", "before_loop")


@dataclass(frozen=True)
class ScriptSpec:
    imports: str = "nn_alias"
    device: str = "device_ternary"
    wrap: str = "none"
    loaders: str = "inline"
    val: bool = False
    loop: str = "inline"
    checkpoint: str = "none"
    entry: str = "main"
    # noise
    comments: Tuple[str, ...] = ()
    blanks: Tuple[Tuple[str, int], ...] = ()
    single_quotes: bool = False
    trailing_commas: bool = False
    docstring: bool = False
    tabs: bool = False

    @property
    def has_device_var(self) -> bool:
        return self.device != "cuda_method"


@dataclass(frozen=True)
class Script:
    spec: ScriptSpec
    source: str
    #: Comment lines (stripped) the script contains: they must survive a migration.
    comments: Tuple[str, ...] = field(default=())

    def __repr__(self) -> str:  # hypothesis prints this for a falsifying example
        return f"Script(spec={self.spec!r})\n----- source -----\n{self.source}----- end -----"


def _indent(lines: List[str], levels: int = 1) -> List[str]:
    return [("    " * levels + line) if line.strip() else line for line in lines]


class _Renderer:
    def __init__(self, spec: ScriptSpec) -> None:
        self.s = spec
        self.comments: List[str] = []
        self.blanks: Dict[str, int] = dict(spec.blanks)

    # -- noise helpers ----------------------------------------------------------------
    def q(self, text: str) -> str:
        return f"'{text}'" if self.s.single_quotes else f'"{text}"'

    def comment(self, slot: str, text: str) -> List[str]:
        if slot not in self.s.comments:
            return []
        line = f"# {text} ({slot})"
        self.comments.append(line)
        return [line]

    def eol(self, slot: str, text: str) -> str:
        if slot not in self.s.comments:
            return ""
        line = f"# {text} ({slot})"
        self.comments.append(line)
        return "  " + line

    def blank(self, slot: str) -> List[str]:
        return [""] * self.blanks.get(slot, 0)

    def tc(self) -> str:
        return "," if self.s.trailing_commas else ""

    # -- names ------------------------------------------------------------------------
    @property
    def nn(self) -> str:
        return "torch.nn" if self.s.imports == "torch_only" else "nn"

    @property
    def dl(self) -> str:
        return "torch.utils.data.DataLoader" if self.s.imports == "torch_only" else "DataLoader"

    @property
    def tds(self) -> str:
        return "torch.utils.data.TensorDataset" if self.s.imports == "torch_only" else "TensorDataset"

    def dp_call(self) -> str:
        if self.s.wrap == "qualified_dp":
            return "torch.nn.parallel.DataParallel(model)"
        if self.s.imports == "dp_from_import":
            return "DP(model)"
        return f"{self.nn}.DataParallel(model)"

    # -- blocks -----------------------------------------------------------------------
    def imports(self) -> List[str]:
        out = []
        if self.s.device == "use_cuda_flag":
            out.append("import argparse")
        out.append("import torch")
        if self.s.imports in ("nn_alias", "dp_from_import"):
            out.append("import torch.nn as nn")
        elif self.s.imports == "from_torch":
            out.append("from torch import nn")
        if self.s.imports == "dp_from_import":
            out.append("from torch.nn import DataParallel as DP")
        if self.s.imports != "torch_only":
            out.append("from torch.utils.data import DataLoader, TensorDataset")
        return out

    def model_class(self) -> List[str]:
        nn = self.nn
        return [
            f"class Net({nn}.Module):",
            *_indent(self.comment("class_body_top", "a two-layer perceptron")),
            "    def __init__(self):",
            "        super(Net, self).__init__()",
            f"        self.fc1 = {nn}.Linear(10, 16)",
            f"        self.fc2 = {nn}.Linear(16, 3{self.tc()})",
            "",
            *_indent(self.comment("between_methods", "forward pass")),
            "    def forward(self, x):",
            "        return self.fc2(torch.relu(self.fc1(x)))",
        ]

    def move(self, dev: str) -> List[str]:
        if self.s.has_device_var:
            return [f"inputs, targets = inputs.to({dev}), targets.to({dev})"]
        return ["if torch.cuda.is_available():", "    inputs, targets = inputs.cuda(), targets.cuda()"]

    def dev_param(self, prefix: str = ", ") -> str:
        return f"{prefix}device" if self.s.has_device_var else ""

    def datasets(self) -> List[str]:
        out = [f"train_ds = {self.tds}(torch.randn(64, 10), torch.randint(0, 3, (64,)){self.tc()})"]
        if self.s.val:
            out.append(f"val_ds = {self.tds}(torch.randn(32, 10), torch.randint(0, 3, (32,)))")
        return out

    def loader_lines(self) -> List[str]:
        dl = self.dl
        if self.s.loaders == "kwargs":
            out = [f"train_kwargs = {{{self.q('batch_size')}: 8, {self.q('shuffle')}: True{self.tc()}}}",
                   f"train_loader = {dl}(train_ds, **train_kwargs)"]
        elif self.s.trailing_commas:
            out = [f"train_loader = {dl}(", "    train_ds,", "    batch_size=8,", "    shuffle=True,", ")"]
        else:
            out = [f"train_loader = {dl}(train_ds, batch_size=8, shuffle=True)"]
        if self.s.val:
            out.append(f"val_loader = {dl}(val_ds, batch_size=16, shuffle=False)")
        return out

    def loaders_helper(self) -> List[str]:
        ret = "train_loader, val_loader" if self.s.val else "train_loader"
        return ["def get_loaders():", *_indent(self.datasets() + self.loader_lines()), f"    return {ret}"]

    def evaluate_fn(self) -> List[str]:
        return [
            f"def evaluate(model, loader{self.dev_param()}):",
            "    model.eval()",
            "    correct = 0",
            "    with torch.no_grad():",
            "        for inputs, targets in loader:",
            *_indent(self.move("device"), 3),
            "            correct += (model(inputs).argmax(1) == targets).sum().item()",
            "    return correct / len(loader.dataset)",
        ]

    def save_checkpoint_fn(self) -> List[str]:
        return [f"def save_checkpoint(state, filename={self.q('checkpoint.pt')}):",
                "    torch.save(state, filename)"]

    def epoch_checkpoint(self, model: str, optimizer: str) -> List[str]:
        if self.s.checkpoint == "helper":
            return [f"save_checkpoint({{{self.q('epoch')}: epoch, {self.q('state_dict')}: {model}.state_dict()}}, "
                    f"{self.q('checkpoint.pt')})"]
        if self.s.checkpoint == "dict_each_epoch":
            return ["torch.save(", "    {",
                    f"        {self.q('epoch')}: epoch,",
                    f"        {self.q('model')}: {model}.state_dict(),",
                    f"        {self.q('optimizer')}: {optimizer}.state_dict(){self.tc()}",
                    "    },", f"    {self.q('ckpt.pt')},", ")"]
        return []

    def step_lines(self, model: str, optimizer: str, dev: str) -> List[str]:
        return [
            *self.move(dev),
            *self.comment("inner_loop", "standard step"),
            f"{optimizer}.zero_grad()",
            f"loss = {self.nn}.functional.cross_entropy({model}(inputs), targets)",
            *self.blank("in_loop"),
            "loss.backward()",
            f"{optimizer}.step()",
        ]

    def val_lines(self, model: str, loader: str, dev: str) -> List[str]:
        if not self.s.val:
            return []
        arg = f", {dev}" if self.s.has_device_var else ""
        return [f"acc = evaluate({model}, {loader}{arg})", f"print({self.q('val acc')}, acc)"]

    def train_one_epoch_fn(self) -> List[str]:
        return [
            f"def train_one_epoch(model, loader, optimizer{self.dev_param()}):",
            "    model.train()",
            "    for inputs, targets in loader:" + self.eol("eol_for", "one pass"),
            *_indent(self.step_lines("model", "optimizer", "device"), 2),
            "    return loss.item()",
        ]

    def trainer_class(self) -> List[str]:
        params = "model, loader, optimizer" + self.dev_param() + (", val_loader" if self.s.val else "")
        return [
            "class Trainer(object):",
            f"    def __init__(self, {params}):",
            "        self.model = model",
            "        self.loader = loader",
            "        self.optimizer = optimizer",
            *(["        self.device = device"] if self.s.has_device_var else []),
            *(["        self.val_loader = val_loader"] if self.s.val else []),
            "",
            "    def train_epoch(self, epoch):",
            "        self.model.train()",
            "        for inputs, targets in self.loader:" + self.eol("eol_for", "one pass"),
            *_indent(self.step_lines("self.model", "self.optimizer", "self.device"), 3),
            "        return loss.item()",
            "",
            "    def fit(self, epochs):",
            "        for epoch in range(epochs):",
            *_indent(self.comment("epoch_first", "one epoch"), 3),
            "            loss = self.train_epoch(epoch)",
            *_indent(self.val_lines("self.model", "self.val_loader", "self.device"), 3),
            f"            print({self.q('epoch')}, epoch, {self.q('loss')}, loss)",
            *_indent(self.epoch_checkpoint("self.model", "self.optimizer"), 3),
        ]

    def device_lines(self) -> List[str]:
        d = self.s.device
        if d == "device_ternary":
            return [f"device = torch.device({self.q('cuda')} if torch.cuda.is_available() else {self.q('cpu')})"]
        if d == "cuda0_fallback":
            return [f"device = torch.device({self.q('cuda:0')} if torch.cuda.is_available() else {self.q('cpu')})"]
        if d == "use_cuda_flag":
            return [
                "parser = argparse.ArgumentParser(description=" + self.q("toy") + ")",
                f"parser.add_argument({self.q('--no-cuda')}, action={self.q('store_true')}, default=False"
                f"{self.tc()})",
                "args = parser.parse_args()",
                "use_cuda = not args.no_cuda and torch.cuda.is_available()",
                f"device = torch.device({self.q('cuda')} if use_cuda else {self.q('cpu')})",
            ]
        return []

    def model_lines(self) -> List[str]:
        out = ["model = Net()" + self.eol("eol_model", "build the model")]
        if self.s.has_device_var:
            out.append("model.to(device)" if self.s.device != "cuda0_fallback" else "model = model.to(device)")
        else:
            out += ["if torch.cuda.is_available():", "    model = model.cuda()"]
        w = self.s.wrap
        if w == "conditional_dp":
            out += ["if torch.cuda.device_count() > 1:",
                    f"    print({self.q('using')}, torch.cuda.device_count(), {self.q('GPUs')})",
                    f"    model = {self.dp_call()}"]
        elif w != "none":
            out.append(f"model = {self.dp_call()}")
        return out

    def setup(self) -> List[str]:
        s = self.s
        out = [*self.device_lines(), "torch.manual_seed(0)"]
        if s.loaders == "helper":
            out.append(("train_loader, val_loader" if s.val else "train_loader") + " = get_loaders()")
        else:
            out += self.datasets() + self.loader_lines()
        out += self.model_lines()
        out += self.comment("before_optimizer", "plain SGD")
        out.append("optimizer = torch.optim.SGD(model.parameters(), lr=0.1)")
        out += self.blank("before_loop")
        dev = ", device" if s.has_device_var else ""
        if s.loop == "trainer":
            args = "model, train_loader, optimizer" + dev + (", val_loader" if s.val else "")
            out += [f"trainer = Trainer({args})", "trainer.fit(EPOCHS)"]
        else:
            out.append("for epoch in range(EPOCHS):" + (self.eol("eol_for", "epochs") if s.loop == "helper" else ""))
            body = self.comment("epoch_first", "one epoch")
            if s.loop == "helper":
                body += [f"loss = train_one_epoch(model, train_loader, optimizer{dev})"]
            else:
                body += ["model.train()",
                         "for inputs, targets in train_loader:" + self.eol("eol_for", "one pass"),
                         *_indent(self.step_lines("model", "optimizer", "device")),
                         "loss = loss.item()"]
            body += self.val_lines("model", "val_loader", "device")
            body.append(f"print({self.q('epoch')}, epoch, {self.q('loss')}, loss)")
            body += self.epoch_checkpoint("model", "optimizer")
            out += _indent(body)
        if s.checkpoint == "state_dict":
            out.append(f"torch.save(model.state_dict(), {self.q('model.pt')})")
        out.append(f"print({self.q('done')})")
        return out

    def render(self) -> str:
        s = self.s
        lines: List[str] = []
        if s.docstring:
            lines += ['"""A toy training script, composed by tests/script_blocks.py.', "",
                      "Runs on one device.", '"""']
        lines += self.imports()
        lines += self.blank("after_imports")
        lines += self.comment("after_imports", "settings")
        lines += ["", "EPOCHS = 2", "", ""]
        lines += self.blank("before_class")
        lines += self.comment("before_class", "the model")
        lines += self.model_class()
        helpers = []
        if s.loaders == "helper":
            helpers.append(self.loaders_helper())
        if s.val:
            helpers.append(self.evaluate_fn())
        if s.checkpoint == "helper":
            helpers.append(self.save_checkpoint_fn())
        if s.loop == "helper":
            helpers.append(self.train_one_epoch_fn())
        elif s.loop == "trainer":
            helpers.append(self.trainer_class())
        for h in helpers:
            lines += ["", ""] + h
        lines += ["", ""] + self.blank("before_setup")
        setup = self.setup() if s.entry == "flat" else _indent(self.setup())
        # a comment at column 0 in the middle of an indented body (valid Python)
        if "col0_in_body" in s.comments and s.entry != "flat":
            self.comments.append("# odd column (col0_in_body)")
            setup = setup[:2] + ["# odd column (col0_in_body)"] + setup[2:]
        if s.entry == "main":
            lines += ["def main():", *setup, "", "", 'if __name__ == "__main__":', "    main()"]
        elif s.entry == "guard":
            lines += ['if __name__ == "__main__":', *setup]
        else:
            lines += setup
        lines += self.comment("end_of_file", "the end")
        text = "\n".join(lines) + "\n"
        if s.tabs:
            text = re.sub(r"(?m)^((?:    )+)", lambda m: "\t" * (len(m.group(1)) // 4), text)
        return text


def render(spec: ScriptSpec) -> Script:
    r = _Renderer(spec)
    source = r.render()
    return Script(spec=spec, source=source, comments=tuple(dict.fromkeys(r.comments)))


@st.composite
def script_specs(draw) -> ScriptSpec:
    return ScriptSpec(
        imports=draw(st.sampled_from(IMPORTS)),
        device=draw(st.sampled_from(DEVICES)),
        wrap=draw(st.sampled_from(WRAPS)),
        loaders=draw(st.sampled_from(LOADERS)),
        val=draw(st.booleans()),
        loop=draw(st.sampled_from(LOOPS)),
        checkpoint=draw(st.sampled_from(CHECKPOINTS)),
        entry=draw(st.sampled_from(ENTRIES)),
        comments=tuple(draw(st.lists(st.sampled_from(COMMENT_SLOTS), unique=True, max_size=5))),
        blanks=tuple(draw(st.lists(st.tuples(st.sampled_from(BLANK_SLOTS), st.integers(1, 2)),
                                   unique_by=lambda t: t[0], max_size=3))),
        single_quotes=draw(st.booleans()),
        trailing_commas=draw(st.booleans()),
        docstring=draw(st.booleans()),
        tabs=draw(st.booleans()),
    )


def scripts() -> st.SearchStrategy[Script]:
    """A composed training script (its spec and source)."""
    return script_specs().map(render)
