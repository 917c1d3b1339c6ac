"""DDP003: a loss trained with the model is wrapped only when it has parameters to train.

A module whose parameters join another model's optimizer, that is applied to what the model
computes and to the target, and whose result is what backward() runs on, is a loss (or a head):
it may have no parameter at all (awd-lstm-lm's SplitCrossEntropyLoss below 75,000 words), and DDP
refuses such a module. Networks chained to the model, or fed its output and a code of their own
whose result goes on into another call, keep the plain wrap and `.module`. At run time:
fixtures/loss_module_without_parameters and tests/test_runtime.py.
"""
from __future__ import annotations

from migrator import migrate

SETUP = '''import torch
import torch.nn as nn


class Loss(nn.Module):
    def forward(self, output, target):
        return nn.functional.mse_loss(output, target)


def main():
    x, y = torch.randn(8, 4), torch.randn(8, 4)
'''
FOOTER = '''

if __name__ == "__main__":
    main()
'''


def _migrated(body: str) -> str:
    return migrate(SETUP + body + FOOTER).code


GUARD = "any(p.requires_grad for p in {}.parameters())"


def test_a_loss_of_the_model_is_wrapped_only_with_parameters_and_unwrapped_by_isinstance():
    code = _migrated('''    model = nn.Linear(4, 4)
    criterion = Loss()
    optimizer = torch.optim.SGD(list(model.parameters()) + list(criterion.parameters()), lr=0.1)
    for step in range(2):
        output = model(x)
        loss = criterion(output, y)
        loss = loss + 0.0
        loss.backward()
        optimizer.step()
    torch.save(criterion.state_dict(), "loss.pt")
''')
    assert f"if {GUARD.format('criterion')}:" in code
    assert "model = DDP(model" in code and f"if {GUARD.format('model')}" not in code
    assert "(criterion.module if isinstance(criterion, DDP) else criterion).state_dict()" in code


def test_a_network_chained_to_the_model_keeps_the_plain_wrap():
    # CycleGAN's shape: one optimizer for both generators, G_BA applied to G_AB's output alone.
    code = _migrated('''    g_ab, g_ba = nn.Linear(4, 4), nn.Linear(4, 4)
    optimizer = torch.optim.SGD(list(g_ab.parameters()) + list(g_ba.parameters()), lr=0.1)
    for step in range(2):
        fake = g_ab(x)
        loss = nn.functional.mse_loss(g_ba(fake), x)
        loss.backward()
        optimizer.step()
    torch.save(g_ba.state_dict(), "g_ba.pt")
''')
    assert "requires_grad for p" not in code
    assert "g_ba = DDP(g_ba" in code and "g_ba.module.state_dict()" in code


def test_a_decoder_fed_the_models_output_and_a_code_keeps_the_plain_wrap():
    # MUNIT's shape: the decoder also takes a style code, and its result goes into a loss call.
    code = _migrated('''    encoder, decoder = nn.Linear(4, 4), nn.Bilinear(4, 4, 4)
    optimizer = torch.optim.SGD(list(encoder.parameters()) + list(decoder.parameters()), lr=0.1)
    for step in range(2):
        content = encoder(x)
        rebuilt = decoder(content, torch.randn(8, 4))
        loss = nn.functional.mse_loss(rebuilt, x)
        loss.backward()
        optimizer.step()
''')
    assert "requires_grad for p" not in code
    assert "decoder = DDP(decoder" in code
