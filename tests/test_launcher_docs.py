"""Launch commands as documentation writes them for people (issue 13): prompts, placeholders,
fence languages, stray continuation blanks, launchers named by path, comments in Python."""
import pytest

from migrator import migrate
from migrator.launcher import LAUNCHER_UNSAFE
from test_launcher import migrated as migrate_launcher  # idempotent, and nothing but launch lines changed


def _md(block: str, language: str = "bash") -> str:
    return f"# Training\n\n```{language}\n{block}\n```\n"


@pytest.mark.parametrize("language", ["bash", "sh", "console", "powershell", "ps1", "cmd", "bat", "text", "", "shel", "zsh"])
def test_every_common_fence_language_holds_commands(language):
    result = migrate_launcher(_md("python -m torch.distributed.launch --nproc_per_node=2 train.py", language), "markdown")
    assert "torchrun --nproc_per_node=2 train.py" in result.code
    assert not result.diagnostics


@pytest.mark.parametrize("prompt", ["$ ", "> ", "% ", "PS> ", "PS C:\\src> ", "(venv) $ "])
def test_prompts_are_not_part_of_the_command(prompt):
    text = _md(f"{prompt}python -m torch.distributed.launch --nproc_per_node 8 --use_env main.py\nepoch 1 done", "console")
    result = migrate_launcher(text, "markdown")
    assert f"{prompt}torchrun --nproc_per_node 8 main.py\nepoch 1 done" in result.code
    assert not result.diagnostics


def test_placeholders_are_words_and_every_other_byte_stays():
    line = "python -m torch.distributed.launch --nproc_per_node <num-of-gpus-to-use> --master_port 12345 main.py --cfg <config-file>"
    result = migrate_launcher(_md(line), "markdown")
    assert "torchrun --nproc_per_node <num-of-gpus-to-use> --master_port 12345 main.py --cfg <config-file>" in result.code
    assert not result.diagnostics


def test_a_backslash_with_stray_blanks_still_continues():
    text = _md("python -m torch.distributed.launch --nproc_per_node=2 \\  \n    --use_env train.py --local_rank=0")
    result = migrate_launcher(text, "markdown")
    assert "torchrun --nproc_per_node=2 \\  \n    train.py" in result.code
    assert {c.code for c in result.changes} == {"DDP201", "DDP202", "DDP203"}


def test_prose_that_names_the_launcher_stays():
    text = "We used to start it with torch.distributed.launch, which torchrun replaced.\n"
    result = migrate_launcher(text, "markdown")
    assert result.code == text and not result.diagnostics


@pytest.mark.parametrize("launcher", [
    '$(python -c "import torch.distributed.launch as l; print(l.__file__)")',
    "/opt/conda/lib/python3.8/site-packages/torch/distributed/launch.py",
])
def test_a_launcher_named_by_its_path_becomes_torchrun(launcher):
    result = migrate_launcher(f"python {launcher} --nproc_per_node=2 --use_env train.py\n", "shell")
    assert result.code == "torchrun --nproc_per_node=2 train.py\n"


def test_a_launcher_path_after_another_interpreter_is_reported_with_its_reason():
    text = "/opt/conda/bin/python /opt/conda/lib/python3.8/site-packages/torch/distributed/launch.py --nproc_per_node=2 train.py\n"
    result = migrate_launcher(text, "shell")
    assert result.code == text
    [finding] = result.diagnostics
    assert finding.code == "DDP204" and "named by its path" in finding.message and "/opt/conda/bin/python" in finding.message


def test_the_unsafe_hint_reads_as_a_sentence():
    assert not LAUNCHER_UNSAFE.fix.strip().startswith("None")


COMMENTED = '''\
# Usage: python -m torch.distributed.launch --nproc_per_node=8 train.py --epochs 10
#   or:  $ python -m torch.distributed.launch --nproc_per_node <ngpus> --use_env train.py
# python -m torch.distributed.launch --nproc_per_node=2 \\
#     --use_env train.py
import os

print(os.getcwd())  # see the README for python -m torch.distributed.launch
'''


def test_launch_commands_in_python_comments():
    result = migrate(COMMENTED)
    lines = result.code.splitlines()
    assert lines[0] == "# Usage: torchrun --nproc_per_node=8 train.py --epochs 10"
    assert lines[1] == "#   or:  $ torchrun --nproc_per_node <ngpus> train.py"
    assert lines[2:4] == COMMENTED.splitlines()[2:4]  # continued with a flag on the next line: left
    assert lines[-1] == COMMENTED.splitlines()[-1]  # prose
    assert [c.line for c in result.changes] == [1, 2] and not result.diagnostics
    assert migrate(result.code).code == result.code


# Code blocks where markdown-it finds them: fences of any length or marker, in lists and blockquotes,
# indented blocks; each one read as its language says, and everything else as prose.
L = "python -m torch.distributed.launch"

MARKDOWN_BLOCKS = [
    # (id, before, after, codes)
    (
        "fence-in-a-blockquote-with-a-prompt-and-continuations",
        f"> **Note**\n> ```console\n> $ {L} \\\n>     --use_env train.py\n> epoch 1\n> ```\n",
        "> **Note**\n> ```console\n> $ torchrun \\\n>     train.py\n> epoch 1\n> ```\n",
        ["DDP201", "DDP202"],
    ),
    (
        "fence-in-a-nested-list",  # eight spaces in: no fence to a line-by-line reader
        f"- Set up\n    - Launch:\n\n        ```bash\n        srun {L} --use_env train.py\n        ```\n",
        "- Set up\n    - Launch:\n\n        ```bash\n        srun torchrun train.py\n        ```\n",
        ["DDP201", "DDP202"],
    ),
    (
        "fence-in-a-blockquote-in-a-list",
        f"1. Train:\n\n   > ```sh\n   > cd src && {L} \\\n   >   --use_env train.py\n   > ```\n",
        "1. Train:\n\n   > ```sh\n   > cd src && torchrun \\\n   >   train.py\n   > ```\n",
        ["DDP201", "DDP202"],
    ),
    (
        "indented-code-block",
        f"Run:\n\n    nohup {L} --use_env train.py > log.txt &\n\nDone.\n",
        "Run:\n\n    nohup torchrun train.py > log.txt &\n\nDone.\n",
        ["DDP201", "DDP202"],
    ),
    (
        "one-line-triple-backticks-are-inline-code",  # not a fence: a backtick fence's info has no backticks
        f"Test with:\n```{L} --use_env test.py```\n\nThen `{L} --use_env eval.py` to evaluate.\n",
        "Test with:\n```torchrun test.py```\n\nThen `torchrun eval.py` to evaluate.\n",
        ["DDP201", "DDP202", "DDP201", "DDP202"],
    ),
    (
        "longer-fence-keeps-a-shorter-one-inside",
        f"````bash\n{L} --use_env a.py\n```\n{L} --use_env b.py\n````\n",
        "````bash\ntorchrun a.py\n```\ntorchrun b.py\n````\n",
        ["DDP201", "DDP202", "DDP201", "DDP202"],
    ),
    (
        "tilde-fence-with-backticks-in-its-info",
        f"~~~ bash `run`\n{L} --use_env a.py\n~~~\n",
        "~~~ bash `run`\ntorchrun a.py\n~~~\n",
        ["DDP201", "DDP202"],
    ),
    (
        "unclosed-fence-runs-to-the-end",
        f"```\n{L} --use_env a.py\n\nmore\n",
        "```\ntorchrun a.py\n\nmore\n",
        ["DDP201", "DDP202"],
    ),
    (
        "unclosed-fence-at-the-end-of-a-text-without-a-last-newline",
        f"Run:\n\n```bash\n{L} --use_env a.py",
        "Run:\n\n```bash\ntorchrun a.py",
        ["DDP201", "DDP202"],
    ),
    (
        "old-mac-line-endings",  # markdown-it ends a line at a lone \r too
        f"Run:\r\r```bash\r{L} --use_env a.py\r```\r",
        "Run:\r\r```bash\rtorchrun a.py\r```\r",
        ["DDP201", "DDP202"],
    ),
]


@pytest.mark.parametrize("before, after, expected", [pytest.param(*case[1:], id=case[0]) for case in MARKDOWN_BLOCKS])
def test_markdown_code_blocks_where_markdown_it_finds_them(before, after, expected):
    result = migrate_launcher(before, "markdown")
    assert result.code == after
    assert [c.code for c in result.changes] == expected
    assert not result.diagnostics


def test_a_python_block_in_a_list_is_python():
    text = f"- Or from Python:\n\n    ```python\n    os.system(\"{L} --use_env train.py\")\n    ```\n"
    result = migrate_launcher(text, "markdown")
    assert result.code == text and not result.changes
    assert [(d.code, d.line, d.col) for d in result.diagnostics] == [("DDP204", 4, 26)]
    assert "in this python block" in result.diagnostics[0].message


def test_a_blockquote_line_markdown_it_reads_with_a_tab_expanded_is_read_as_prose():
    text = f">\t```bash\n>\t\t{L} --use_env a.py\n>\t```\n"
    result = migrate_launcher(text, "markdown")
    assert result.code == ">\t```bash\n>\t\ttorchrun a.py\n>\t```\n"
    assert [c.code for c in result.changes] == ["DDP201", "DDP202"]
