"""DDP118 and DDP119: backward passes DDP cannot synchronise (a gradient penalty trained alone, a second
backward through a retained graph). Report only: the file is left unchanged."""
from __future__ import annotations

from migrator.analysis import ScriptFacts
from migrator.edits import Plan
from migrator.rule import Example, Rule
from migrator.types import Diagnostic

RULE = Rule(
    code="DDP118",
    name="gradient-penalty-backward",
    summary=("a gradient penalty trained in a backward pass of its own cannot run under DDP; the file is left "
             "unchanged: add the penalty to the loss computed from the model's outputs (one backward pass)"),
    what="""
`grad = torch.autograd.grad(outputs=D(x_hat), inputs=x_hat, create_graph=True)[0]`, a penalty
computed from `grad` alone, then `penalty.backward()` and an optimizer step (a WGAN-GP critic
trained in two updates). The file is left unchanged, and this says where.""",
    why="""
In that backward pass the parameters that do not shape the gradient with respect to the input
(the last layer's bias) get no gradient. DDP waits for every parameter's gradient before it
averages them, so the next forward fails with "Expected to have finished reduction in the prior
iteration", with `find_unused_parameters=True` too. A penalty added to a loss computed from the
model's outputs (`d_loss = d_loss_real + d_loss_fake + lambda_gp * d_loss_gp; d_loss.backward()`)
gives every parameter its gradient, and is migrated.""",
    fix="Add the penalty to the critic's loss before its backward pass, then run ddp-migrate again.",
    fix_safety="Not fixable automatically: it changes the optimization (one step instead of two).",
    fixable=False,
    examples=(
        Example(
            id="penalty-in-an-update-of-its-own",
            before='''import torch


def main():
    critic = torch.nn.Sequential(torch.nn.Linear(4, 8), torch.nn.LeakyReLU(0.1), torch.nn.Linear(8, 1))
    optimizer = torch.optim.Adam(critic.parameters())
    for step in range(4):
        real, fake = torch.randn(8, 4), torch.randn(8, 4)
        loss = critic(fake).mean() - critic(real).mean()
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        mixed = torch.randn(8, 4, requires_grad=True)
        out = critic(mixed)
        grad = torch.autograd.grad(outputs=out, inputs=mixed, grad_outputs=torch.ones_like(out), create_graph=True)[0]
        penalty = ((grad.norm(2, dim=1) - 1) ** 2).mean()
        optimizer.zero_grad()
        penalty.backward()
        optimizer.step()


if __name__ == "__main__":
    main()
''',
            diagnostics=("DDP118",),
        ),
        Example(
            id="penalty-added-to-the-loss",
            fires=False,
            before='''import torch


def main():
    critic = torch.nn.Sequential(torch.nn.Linear(4, 8), torch.nn.LeakyReLU(0.1), torch.nn.Linear(8, 1))
    optimizer = torch.optim.Adam(critic.parameters())
    for step in range(4):
        real, fake = torch.randn(8, 4), torch.randn(8, 4)
        mixed = torch.randn(8, 4, requires_grad=True)
        out = critic(mixed)
        grad = torch.autograd.grad(outputs=out, inputs=mixed, grad_outputs=torch.ones_like(out), create_graph=True)[0]
        penalty = ((grad.norm(2, dim=1) - 1) ** 2).mean()
        # The penalty joins the loss of the critic's outputs: one backward pass for both.
        loss = critic(fake).mean() - critic(real).mean() + 10 * penalty
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()


if __name__ == "__main__":
    main()
''',
            after='''import torch
import os
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel as DDP


def main():
    # torchrun starts one process per device and sets LOCAL_RANK for each.
    local_rank = int(os.environ.get("LOCAL_RANK", 0))
    if torch.cuda.is_available():
        torch.cuda.set_device(local_rank)
    backend = "cpu:gloo,cuda:nccl" if torch.cuda.is_available() else "gloo"
    if "RANK" in os.environ:  # started by torchrun
        dist.init_process_group(backend=backend)
    else:  # `python train.py`: one process, a world of one on an in-process store (no port to bind)
        dist.init_process_group(backend=backend, store=dist.HashStore(), rank=0, world_size=1)
    critic = torch.nn.Sequential(torch.nn.Linear(4, 8), torch.nn.LeakyReLU(0.1), torch.nn.Linear(8, 1))
    critic = DDP(critic, device_ids=None)
    optimizer = torch.optim.Adam(critic.parameters())
    for step in range(4):
        real, fake = torch.randn(8, 4), torch.randn(8, 4)
        mixed = torch.randn(8, 4, requires_grad=True)
        out = critic(mixed)
        grad = torch.autograd.grad(outputs=out, inputs=mixed, grad_outputs=torch.ones_like(out), create_graph=True)[0]
        penalty = ((grad.norm(2, dim=1) - 1) ** 2).mean()
        # The penalty joins the loss of the critic's outputs: one backward pass for both.
        loss = critic(fake).mean() - critic(real).mean() + 10 * penalty
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()


if __name__ == "__main__":
    try:
        main()
    finally:
        if dist.is_initialized():
            dist.destroy_process_group()
''',
        ),
    ),
)


RETAINED = Rule(
    code="DDP119",
    name="second-backward-retained-graph",
    summary=("a backward pass that keeps its graph (retain_graph=True) for a second one: DDP averages the gradients "
             "of the first only; the file is left unchanged: sum the losses into one backward pass"),
    what="""
`loss_G.backward(retain_graph=True)` and then, before the next forward, another backward through
the same graph (`loss_z.backward()`: BicycleGAN's generator trained again through the encoder's
loss). The file is left unchanged, and this says where.""",
    why="""
DDP averages the gradients across processes while the first backward runs, once per forward. What
the second backward adds to the same parameters is never averaged: each process steps with its own
gradients and the replicas drift apart, with no error. (DDP's static-graph and no_sync modes do not
change that.)""",
    fix="""
Add the losses and call backward once (`(loss_G + loss_z).backward()`; where a network must not get
the second loss's gradient, detach its input or freeze it before the forward), then run
ddp-migrate again.""",
    fix_safety="Not fixable automatically: which network each loss may train is the model's design.",
    fixable=False,
    examples=(
        Example(
            id="second-backward-through-the-generator",
            before='''import torch


def main():
    generator, encoder = torch.nn.Linear(4, 4), torch.nn.Linear(4, 2)
    optimizer = torch.optim.Adam([*generator.parameters(), *encoder.parameters()])
    for step in range(4):
        z = torch.randn(8, 4)
        fake = generator(z)
        optimizer.zero_grad()
        fake.pow(2).mean().backward(retain_graph=True)
        (encoder(fake) - z[:, :2]).abs().mean().backward()
        optimizer.step()


if __name__ == "__main__":
    main()
''',
            diagnostics=("DDP119",),
        ),
        Example(
            id="one-backward-of-the-sum",
            fires=False,
            before='''import torch


def main():
    generator, encoder = torch.nn.Linear(4, 4), torch.nn.Linear(4, 2)
    optimizer = torch.optim.Adam([*generator.parameters(), *encoder.parameters()])
    for step in range(4):
        z = torch.randn(8, 4)
        fake = generator(z)
        optimizer.zero_grad()
        loss = fake.pow(2).mean() + (encoder(fake) - z[:, :2]).abs().mean()
        loss.backward(retain_graph=False)
        optimizer.step()
''',
        ),
    ),
)


def plan(facts: ScriptFacts, plan: Plan) -> None:
    if facts.already_distributed:
        return
    for call in facts.penalty_backwards:
        line, col = facts.line_col(call)
        plan.diagnostics.append(Diagnostic(RULE.code, line, col, RULE.summary))
    for call in facts.retained_backwards:
        line, col = facts.line_col(call)
        plan.diagnostics.append(Diagnostic(RETAINED.code, line, col, RETAINED.summary))
