"""What the rank-0 rules take for a log: a statement that only prints or logs, and a `with open(...)`
block that only writes values at hand to a file it opens for writing (migrator.names)."""
from __future__ import annotations

import libcst as cst

from migrator.names import is_log_block, is_log_statement


def _statement(code: str):
    return cst.parse_module(code).body[0]


def test_log_statements_include_the_loggers_of_tensorboard_logger():
    assert is_log_statement(_statement("log_value('train_loss', losses.avg, epoch)\n"))
    assert is_log_statement(_statement("writer.add_scalar('loss', loss.item(), step)\n"))
    assert not is_log_statement(_statement("loss = criterion(model(x), y)\n"))


def test_a_log_block_only_writes_values_at_hand_to_a_file_it_opens_for_writing():
    assert is_log_block(_statement("with open(name, 'a') as f:\n    w = csv.writer(f)\n    w.writerow([epoch, loss.item()])\n"))
    assert is_log_block(_statement("with open(name, mode='w') as f:\n    csv.writer(f).writerow(['epoch', 'loss'])\n"))
    assert is_log_block(_statement("with open(name, 'a') as log:\n    log.write('%d\\n' % epoch)\n    log.flush()\n"))
    # read back, written with what a call computes, or a file it does not open for writing: not a log
    assert not is_log_block(_statement("with open(name, 'a+') as f:\n    f.write(line)\n"))
    assert not is_log_block(_statement("with open(name, 'w') as f:\n    f.write(evaluate(model))\n"))
    assert not is_log_block(_statement("with open(name, 'w') as f:\n    json.dump(config, f)\n"))
    assert not is_log_block(_statement("with open(name) as f:\n    f.write(line)\n"))
