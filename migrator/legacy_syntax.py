"""DDP017: `x.cuda(async=True)`, PyTorch 0.3's keyword, made parseable before anything else.

PyTorch 0.4 renamed the keyword `non_blocking`; Python 3.7 made `async` a reserved word, so such
a file no longer parses at all and the engine could not even read it. The rename is done on the
token stream (Python's own tokenizer, which still reads `async` as a name): only an `async`
that is a keyword argument of a call (`(` or `,` before it, `=` after it, inside brackets) is
renamed, every other byte stays. The engine then migrates the result like any other file.
"""
from __future__ import annotations

import io
import tokenize
from typing import List, Optional, Tuple

from migrator.rule import Example, Rule

RULE = Rule(
    code="DDP017",
    name="async-keyword",
    summary="`.cuda(async=True)` (PyTorch 0.3) becomes `.cuda(non_blocking=True)` so the file parses again",
    what="""
A call with the keyword argument `async=...`, PyTorch 0.3's spelling of `non_blocking`
(`input.cuda(async=True)`, `tensor.to(device, async=True)`). Since Python 3.7 `async` is a
reserved word and the file does not parse; the keyword is renamed and the file is then migrated.""",
    why="""
Python 3 cannot run the file at all, and PyTorch has not accepted `async=` since 0.4. The rename
is the fix PyTorch's own release notes gave.""",
    fix="Rename the keyword argument to `non_blocking`.",
    fix_safety="Safe: the same argument under its current name.",
    fixable=True,
    examples=(
        Example(
            id="cuda-async",
            before='''import torch


def main():
    model = torch.nn.Linear(4, 1)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    for epoch in range(2):
        x = torch.randn(8, 4).cuda(async=True) if torch.cuda.is_available() else torch.randn(8, 4)
        model(x).sum().backward()
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
    model = torch.nn.Linear(4, 1)
    model = DDP(model, device_ids=None)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    for epoch in range(2):
        x = torch.randn(8, 4).cuda(non_blocking=True) if torch.cuda.is_available() else torch.randn(8, 4)
        model(x).sum().backward()
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

NEW_NAME = "non_blocking"

Position = Tuple[int, int]  # 1-based line, 0-based column


def rename_async_keywords(source: str) -> Tuple[str, List[Position]]:
    """The source with each `async=` keyword argument renamed, and where each one was."""
    if "async" not in source:
        return source, []
    positions = _async_keyword_positions(source)
    if not positions:
        return source, []
    lines = source.splitlines(keepends=True)
    for line, col in reversed(positions):
        text = lines[line - 1]
        lines[line - 1] = text[:col] + NEW_NAME + text[col + len("async") :]
    return "".join(lines), positions


def _async_keyword_positions(source: str) -> List[Position]:
    significant = _significant_tokens(source)
    if significant is None:
        return []
    found: List[Position] = []
    depth = 0
    for index, token in enumerate(significant):
        if token.type == tokenize.OP and token.string in "([{":
            depth += 1
        elif token.type == tokenize.OP and token.string in ")]}":
            depth = max(depth - 1, 0)
        elif token.type == tokenize.NAME and token.string == "async" and depth > 0 and 0 < index < len(significant) - 1:
            before, after = significant[index - 1], significant[index + 1]
            if before.string in ("(", ",") and after.string == "=":
                found.append(token.start)
    return found


def _significant_tokens(source: str) -> Optional[List[tokenize.TokenInfo]]:
    skipped = (tokenize.NL, tokenize.NEWLINE, tokenize.COMMENT, tokenize.INDENT, tokenize.DEDENT)
    try:
        return [t for t in tokenize.generate_tokens(io.StringIO(source).readline) if t.type not in skipped]
    except (tokenize.TokenError, IndentationError, SyntaxError):
        return None
