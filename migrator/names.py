"""What torch things are called, and small syntactic predicates shared by the analysis.

Qualified names come from migrator.graph.bindings (names resolved through the file's imports), so
every import spelling of a name resolves to one of these strings. The tool never imports torch.
"""
from __future__ import annotations

import builtins
import re
from dataclasses import dataclass
from typing import Dict, FrozenSet, Optional

import libcst as cst

from migrator.graph.modules import NOT_PROJECT_PACKAGES  # noqa: F401 - re-exported: the rules ask it here

from migrator.tree import contains, descendants

DATAPARALLEL = frozenset(
    {
        "torch.nn.DataParallel",
        "torch.nn.parallel.DataParallel",
        "torch.nn.parallel.data_parallel.DataParallel",
    }
)
# nn.parallel.data_parallel(module, inputs, device_ids): DataParallel as a function, inside a forward.
FUNCTIONAL_DATAPARALLEL = frozenset(
    {"torch.nn.parallel.data_parallel", "torch.nn.parallel.data_parallel.data_parallel"}
)
DDP = frozenset(
    {
        "torch.nn.parallel.DistributedDataParallel",
        "torch.nn.parallel.distributed.DistributedDataParallel",
    }
)
INIT_PROCESS_GROUP = frozenset({"torch.distributed.init_process_group"})
# Calls every rank must make together (get_rank() and friends are local and harmless).
COLLECTIVES = frozenset(
    f"torch.distributed.{name}"
    for name in (
        "barrier", "monitored_barrier", "all_reduce", "all_gather", "all_gather_object", "all_gather_into_tensor",
        "broadcast", "broadcast_object_list", "reduce", "gather", "gather_object", "scatter", "scatter_object_list",
        "reduce_scatter", "reduce_scatter_tensor", "all_to_all", "all_to_all_single", "new_group",
        "init_process_group", "destroy_process_group",
    )
)
DESTROY_PROCESS_GROUP = frozenset({"torch.distributed.destroy_process_group"})
TORCH_DEVICE = frozenset({"torch.device"})
LAUNCH_MODULES_TEXT = "torch.distributed."  # prefilter for launch commands in strings (launch and run)
TORCH_SAVE = frozenset({"torch.save"})
BATCHNORM = frozenset(
    {f"torch.nn.{name}" for name in ("BatchNorm1d", "BatchNorm2d", "BatchNorm3d")}
    | {f"torch.nn.modules.batchnorm.{name}" for name in ("BatchNorm1d", "BatchNorm2d", "BatchNorm3d")}
)
# Other writes of training results: one writer, like checkpoints.
# Checkpoint housekeeping next to a save (keep the last N, copy the best): rank 0's files, so rank 0's job.
FILE_MUTATIONS = frozenset({
    "os.remove", "os.unlink", "os.rename", "os.replace", "os.symlink",
    "shutil.rmtree", "shutil.copyfile", "shutil.copy", "shutil.copy2", "shutil.move",
})
RESULT_WRITES = TORCH_SAVE | frozenset(
    {
        "torch.jit.save",
        "torch.onnx.export",
        "torchvision.utils.save_image",
        "matplotlib.pyplot.savefig",
        "numpy.save",
        "numpy.savez",
        "numpy.savez_compressed",
        "numpy.savetxt",
        "json.dump",
        "pickle.dump",
        "yaml.dump",
        "yaml.safe_dump",
    }
)
PROGRESS_BARS = frozenset(
    {"tqdm.tqdm", "tqdm.auto.tqdm", "tqdm.notebook.tqdm", "tqdm.trange", "tqdm.auto.trange", "tqdm.std.tqdm"}
)
TORCH_LOAD = frozenset({"torch.load"})
# An experiment tracker's run: started on every rank, it is one run per process on the dashboard.
TRACKER_RUNS = frozenset({"wandb.init"})
# Calls that fetch files from the network or unpack an archive into a folder: run by every rank,
# they write the same files at once.
DOWNLOADS = frozenset({
    "urllib.request.urlretrieve", "urllib.request.urlopen", "requests.get", "wget.download", "gdown.download",
    "torch.hub.download_url_to_file", "torchvision.datasets.utils.download_url",
    "torchvision.datasets.utils.download_and_extract_archive", "torchvision.datasets.utils.extract_archive",
    "torchvision.datasets.utils.download_file_from_google_drive", "tarfile.open", "zipfile.ZipFile",
    "shutil.unpack_archive",
})
# Checks that a file or folder is there (`if not os.path.exists(root): download(root)`).
PATH_CHECKS = frozenset({"exists", "isdir", "isfile", "is_dir", "is_file", "listdir"})
DATALOADER = frozenset({"torch.utils.data.DataLoader", "torch.utils.data.dataloader.DataLoader"})
DISTRIBUTED_SAMPLER = frozenset(
    {"torch.utils.data.DistributedSampler", "torch.utils.data.distributed.DistributedSampler"}
)
ITERABLE_DATASET = frozenset({"torch.utils.data.IterableDataset", "torch.utils.data.dataset.IterableDataset"})



@dataclass(frozen=True)
class RandomDraw:
    """A draw that can decide which samples go where (a split, a permutation or shuffle of indices).

    family: the generator it draws from when none is given, the one a seed call of that family
    seeds ("torch", "numpy", "random"). keyword / position: where a generator of its own (or a
    seed) is passed, when it takes one; instance: the class whose instances have the same function
    as a method, seeded when built (`numpy.random.RandomState(0).permutation(n)`), when it does not.
    in_place: it shuffles its first argument (the drawn value) instead of returning one."""

    family: str
    keyword: Optional[str] = None
    position: Optional[int] = None
    instance: Optional[str] = None
    in_place: bool = False


_TORCH_DRAW = RandomDraw("torch", keyword="generator")
RANDOM_DRAWS: Dict[str, RandomDraw] = {
    "torch.randperm": _TORCH_DRAW,
    "torch.utils.data.random_split": RandomDraw("torch", keyword="generator", position=2),
    "torch.utils.data.dataset.random_split": RandomDraw("torch", keyword="generator", position=2),
    "numpy.random.permutation": RandomDraw("numpy", instance="RandomState"),
    "numpy.random.choice": RandomDraw("numpy", instance="RandomState"),
    "numpy.random.shuffle": RandomDraw("numpy", instance="RandomState", in_place=True),
    "random.shuffle": RandomDraw("random", instance="Random", in_place=True),
    "random.sample": RandomDraw("random", instance="Random"),
    "sklearn.model_selection.train_test_split": RandomDraw("numpy", keyword="random_state"),
}
_EVERY_FAMILY = frozenset({"torch", "numpy", "random"})
# Calls that seed the generators of these families (the argument is the seed).
SEEDS: Dict[str, FrozenSet[str]] = {
    "torch.manual_seed": frozenset({"torch"}),
    "torch.random.manual_seed": frozenset({"torch"}),
    "numpy.random.seed": frozenset({"numpy"}),
    "random.seed": frozenset({"random"}),
    "pytorch_lightning.seed_everything": _EVERY_FAMILY,
    "lightning.seed_everything": _EVERY_FAMILY,
    "lightning.pytorch.seed_everything": _EVERY_FAMILY,
    "lightning.fabric.seed_everything": _EVERY_FAMILY,
    "transformers.set_seed": _EVERY_FAMILY,
    "accelerate.utils.set_seed": _EVERY_FAMILY,
}

# Methods that still "prepare" a model after it is built: the DDP wrap goes after them
# (DDP must see the module on its final device, and weights load without a `module.` prefix).
MOVE_METHODS = frozenset({"to", "cuda"})
PREPARE_METHODS = MOVE_METHODS | frozenset(
    {"load_state_dict", "apply", "float", "half", "double", "bfloat16", "train", "init_weights", "reset_parameters"}
)
# Methods that change which parameters a module has, or which of them train (`requires_grad_`), on the
# module or on a submodule of it. DDP registers the parameters that require grad when it is built.
SETS_PARAMETERS = frozenset({"requires_grad_", "add_module", "register_module", "register_parameter"})
# Methods whose results are parts of the module (its parameters, its submodules): a loop over them
# that sets `p.requires_grad` changes what trains.
MODULE_PARTS = frozenset({"parameters", "named_parameters", "modules", "named_modules", "children", "named_children"})

_NOT_OPTIMIZERS = ("torch.optim.lr_scheduler.", "torch.optim.swa_utils.")
_CUDA_DEVICE = re.compile(r"""^[rRuU]?(['"])cuda(:\d+)?\1$""")
# "cuda:{}".format(i), "cuda:%d" % i: a device string whose GPU index comes from the script.
_CUDA_TEMPLATE = re.compile(r"""^[rRuU]?(['"])cuda:(\{0?\}|%[dis])\1$""")
_CPU_DEVICE = re.compile(r"""^[rRuU]?(['"])cpu\1$""")

_MAIN_STRING = re.compile(r"^['\"]__main__['\"]$")
_ARGPARSE_METHODS = frozenset(
    {
        "ArgumentParser",
        "add_argument",
        "add_argument_group",
        "add_mutually_exclusive_group",
        "set_defaults",
        "parse_args",
        "parse_known_args",
    }
)
_LOG_FUNCTIONS = frozenset({
    "print", "info", "warning", "debug", "log", "write", "flush",
    # TensorBoard: one rank's curves, not N interleaved copies of them in the same run folder.
    "add_scalar", "add_scalars", "add_image", "add_images", "add_histogram", "add_text", "add_figure",
    "log_value",  # tensorboard_logger's
})


# Libraries whose functions never run a model's forward nor train it (`torch.save(model, f)`, `copy.deepcopy`)
LIBRARIES = frozenset({"torch", "numpy", "os", "copy", "pickle", "json", "shutil", "logging", "math", "sys", "io"})


def is_builtin(func: cst.BaseExpression) -> bool:
    """`print`, `len`, `str`, `isinstance`: Python's own, which never run a model's forward."""
    return isinstance(func, cst.Name) and hasattr(builtins, func.value)


def is_optimizer(qname: str) -> bool:
    """torch.optim.SGD and friends (their parameters are what is being trained)."""
    return qname.startswith("torch.optim.") and not qname.startswith(_NOT_OPTIMIZERS) and qname[12:13].isupper()


def is_optimizer_helper(func: cst.BaseExpression) -> bool:
    """`get_optimizer(cfg, model)`, `build_optimizer(model, cfg)`, `create_optimizer(args, model)`:
    a project's own function that builds the optimizer for the model it is given."""
    name = func.value if isinstance(func, cst.Name) else attribute_name(func) or ""
    lowered = name.lower()
    return lowered.endswith(("optimizer", "optimizers", "optim")) and lowered.startswith(("get_", "build_", "make_", "create_", "init_"))


SET_DEVICE = frozenset({"torch.cuda.set_device"})


def is_cuda_string(node: cst.SimpleString) -> bool:
    return bool(_CUDA_DEVICE.match(node.value))


def is_cuda_template(node: cst.SimpleString) -> bool:
    return bool(_CUDA_TEMPLATE.match(node.value))


def is_cuda_fstring(node: cst.FormattedString) -> bool:
    """f"cuda:{i}" with an index other than the setup's `local_rank`."""
    parts = node.parts
    return (
        len(parts) == 2
        and isinstance(parts[0], cst.FormattedStringText)
        and parts[0].value == "cuda:"
        and isinstance(parts[1], cst.FormattedStringExpression)
        and not is_name(parts[1].expression, "local_rank")
    )


def is_cpu_string(node: cst.BaseExpression) -> bool:
    return isinstance(node, cst.SimpleString) and bool(_CPU_DEVICE.match(node.value))


def is_name(node: Optional[cst.CSTNode], value: str) -> bool:
    return isinstance(node, cst.Name) and node.value == value


def attribute_name(node: Optional[cst.CSTNode]) -> Optional[str]:
    """`to` for `model.to`: the attribute an Attribute node reads (None for anything else)."""
    return node.attr.value if isinstance(node, cst.Attribute) else None


def is_main_guard(test: cst.BaseExpression) -> bool:
    """`__name__ == "__main__"`."""
    if not (isinstance(test, cst.Comparison) and isinstance(test.left, cst.Name) and test.left.value == "__name__"):
        return False
    if len(test.comparisons) != 1:
        return False
    target = test.comparisons[0]
    return (
        isinstance(target.operator, cst.Equal)
        and isinstance(target.comparator, cst.SimpleString)
        and bool(_MAIN_STRING.match(target.comparator.value))
    )


def _identifiers(node: cst.CSTNode):
    for found in descendants(node, (cst.Name, cst.SimpleString)):
        yield found.value.lower()


def mentions_cuda(test: cst.BaseExpression) -> bool:
    """`torch.cuda.is_available()`, `args.cuda`, `use_cuda`, `device.type == "cuda"`, `ngpu > 0`..."""
    return any("cuda" in word or "gpu" in word for word in _identifiers(test))


def mentions_rank(test: cst.BaseExpression) -> bool:
    """`rank == 0`, `dist.get_rank() == 0`, `args.local_rank in [-1, 0]`, `is_main_process()`, `is_main`..."""
    return any(
        "rank" in word or "main_process" in word or "is_master" in word or word == "is_main" for word in _identifiers(test)
    )


def is_gpu_count_test(test: cst.BaseExpression) -> bool:
    """`torch.cuda.device_count() > 1`, `ngpu > 1`, `len(args.gpus) > 1`, `args.multi_gpu`..."""
    return mentions_cuda(test)


# Calls that read a value already computed (`loss.item()`, `f"{acc:.3f}"`): writing what they give
# runs nothing every rank must run.
_AT_HAND = frozenset({"item", "cpu", "detach", "numpy", "tolist", "float", "int", "str", "round", "len", "format", "mean", "sum"})
FILE_WRITES = frozenset({"write", "writelines", "writerow", "writerows", "writeheader", "flush"})


def values_at_hand(call: cst.Call) -> bool:
    """Do `call`'s arguments compute nothing but values at hand (`loss.item()`, `'%d' % n`)? A
    forward or any other call of the project must stay on every rank."""
    for inner in (c for arg in call.args for c in descendants(arg.value, cst.Call)):
        name = inner.func.attr.value if isinstance(inner.func, cst.Attribute) else getattr(inner.func, "value", None)
        if name not in _AT_HAND:
            return False
    return True


def is_log_block(statement: cst.CSTNode) -> bool:
    """`with open(log_name, "a") as log:` whose body only writes values at hand to it, directly
    or through a csv writer of it (`w = csv.writer(log)`, `w.writerow([epoch, loss])`): a log
    file every rank would write (with "w", truncate) at once."""
    if not isinstance(statement, cst.With) or len(statement.items) != 1 or not isinstance(statement.body, cst.IndentedBlock):
        return False
    item = statement.items[0]
    opened = item.item
    if not (isinstance(opened, cst.Call) and is_name(opened.func, "open") and item.asname is not None
            and isinstance(item.asname.name, cst.Name) and opens_for_writing(opened)):
        return False
    handles = {item.asname.name.value}
    for line in statement.body.body:
        small = line.body[0] if isinstance(line, cst.SimpleStatementLine) and len(line.body) == 1 else None
        if isinstance(small, cst.Assign) and len(small.targets) == 1 and isinstance(small.targets[0].target, cst.Name) \
                and isinstance(small.value, cst.Call) and _csv_writer_of(small.value, handles):
            handles.add(small.targets[0].target.value)
        elif not (isinstance(small, cst.Expr) and isinstance(small.value, cst.Call) and values_at_hand(small.value)
                  and _writes_to(small.value.func, handles)):
            return False
    return True


def _writes_to(func: cst.BaseExpression, handles) -> bool:
    """`log.write`, `writer.writerow`, `csv.writer(log).writerow` on one of `handles`."""
    if not (isinstance(func, cst.Attribute) and func.attr.value in FILE_WRITES):
        return False
    target = func.value
    if isinstance(target, cst.Call):
        return _csv_writer_of(target, handles)
    return isinstance(target, cst.Name) and target.value in handles


def opens_for_writing(opened: cst.Call) -> bool:
    """`open(path, "a")`, `open(path, mode="w")`: a literal mode that writes and does not read."""
    mode = next((a.value for a in opened.args if a.keyword is not None and a.keyword.value == "mode"), None)
    positional = [a.value for a in opened.args if a.keyword is None and not a.star]
    mode = mode if mode is not None else positional[1] if len(positional) > 1 else None
    text = mode.evaluated_value if isinstance(mode, cst.SimpleString) else None
    return isinstance(text, str) and bool(set(text) & {"a", "w"}) and "+" not in text and "r" not in text


def _csv_writer_of(call: cst.Call, handles) -> bool:
    func = call.func
    spelled = func.attr.value if isinstance(func, cst.Attribute) else getattr(func, "value", None)
    first = call.args[0].value if call.args and call.args[0].keyword is None else None
    return spelled in ("writer", "DictWriter") and isinstance(first, cst.Name) and first.value in handles


def is_log_statement(statement: cst.CSTNode) -> bool:
    """A statement that only prints or logs (e.g. "Let's use 4 GPUs!")."""
    if not isinstance(statement, cst.SimpleStatementLine):
        return False
    return all(
        isinstance(small, cst.Expr)
        and isinstance(small.value, cst.Call)
        and (
            isinstance(small.value.func, cst.Name)
            and small.value.func.value in _LOG_FUNCTIONS
            or isinstance(small.value.func, cst.Attribute)
            and small.value.func.attr.value in _LOG_FUNCTIONS
        )
        for small in statement.body
    )


def _is_argparse(statement: cst.SimpleStatementLine) -> bool:
    for call in descendants(statement, cst.Call):
        func = call.func
        name = func.attr.value if isinstance(func, cst.Attribute) else getattr(func, "value", "")
        if name in _ARGPARSE_METHODS:
            return True
    return False


def is_preamble(statement: cst.CSTNode, module_level: bool) -> bool:
    """Statements the process-group setup may come after: docstrings, imports, argument parsing.

    At module level (flat scripts) definitions and constants are preamble too.
    """
    if isinstance(statement, cst.SimpleStatementLine):
        small = statement.body[0]
        if isinstance(small, (cst.Import, cst.ImportFrom, cst.Global, cst.Nonlocal, cst.Pass)):
            return True
        if isinstance(small, cst.Expr) and isinstance(small.value, (cst.SimpleString, cst.ConcatenatedString)):
            return True
        if _is_argparse(statement):
            return True
        if module_level and isinstance(small, (cst.Assign, cst.AnnAssign)):
            value = small.value
            return value is not None and not contains(value, cst.Call)
        return False
    if module_level and isinstance(statement, (cst.FunctionDef, cst.ClassDef)):
        return True
    if module_level and isinstance(statement, (cst.Try, cst.If)) and not contains(statement, cst.Call):
        return True
    if isinstance(statement, cst.Try) and _imports_only(statement.body):
        # `try: import torch ... except ImportError as e: print(e); raise`: the imports come first.
        return True
    return False


def _imports_only(block: cst.BaseSuite) -> bool:
    body = getattr(block, "body", ())
    return bool(body) and all(
        isinstance(statement, cst.SimpleStatementLine)
        and all(isinstance(small, (cst.Import, cst.ImportFrom)) for small in statement.body)
        for statement in body
    )


# What stays on the DDP wrapper: nn.Module's own API (tests/test_names.py checks this list
# against dir(torch.nn.Module), so it cannot drift), the attributes every module instance has,
# and DDP's own API. Anything else on a wrapped model (`model.encode(x)`, `model.num_classes`)
# belongs to the user's class and must go through `model.module`.
NN_MODULE_API = frozenset(
    """
    T_destination _apply _call_impl _compiled_call_impl _get_backward_hooks _get_backward_pre_hooks _get_name
    _load_from_state_dict _maybe_warn_non_full_backward_hook _named_members _register_load_state_dict_pre_hook
    _register_state_dict_hook _replicate_for_data_parallel _save_to_state_dict _slow_forward _version
    _wrapped_call_impl add_module apply bfloat16 buffers call_super_init children compile cpu cuda double
    dump_patches eval extra_repr float forward get_buffer get_extra_state get_parameter get_submodule half ipu
    load_state_dict modules mtia named_buffers named_children named_modules named_parameters parameters
    register_backward_hook register_buffer register_forward_hook register_forward_pre_hook
    register_full_backward_hook register_full_backward_pre_hook register_load_state_dict_post_hook
    register_load_state_dict_pre_hook register_module register_parameter register_state_dict_post_hook
    register_state_dict_pre_hook requires_grad_ set_extra_state set_submodule share_memory state_dict to
    to_empty train type xpu zero_grad
    training _parameters _buffers _modules _non_persistent_buffers_set _backward_hooks _backward_pre_hooks
    _forward_hooks _forward_pre_hooks _state_dict_hooks _load_state_dict_pre_hooks _forward_hooks_with_kwargs
    _forward_hooks_always_called _forward_pre_hooks_with_kwargs _is_full_backward_hook _load_state_dict_post_hooks
    _state_dict_pre_hooks
    module no_sync join join_hook register_comm_hook broadcast_buffers gather scatter device_ids output_device
    process_group
    """.split()
)
# nn.Module API that answers differently on the wrapper: `list(model.children())[-1]` is the whole
# model, `named_parameters()` names gain a `module.` prefix, `get_submodule("fc")` fails. Asked of a
# wrapped single-GPU model, they go through `.module` to keep their answers.
STRUCTURE_METHODS = frozenset({
    "children", "named_children", "named_modules", "named_parameters", "named_buffers",
    "get_submodule", "get_parameter", "get_buffer",
})
# Attributes whose meaning changes with the wrap: the checkpoint rule decides about them.
STATE_DICT_METHODS = frozenset({"state_dict", "load_state_dict"})


def manual_update_parameters(loop: cst.CSTNode) -> Optional[cst.Call]:
    """`model.parameters()` in a hand-written update, `for p in model.parameters(): p.data.add_(p.grad, ...)`.

    pytorch/examples' word language model trains this way, with no torch.optim optimizer: the
    model is trained all the same, and must be wrapped.
    """
    if not isinstance(loop, cst.For) or not isinstance(loop.target, cst.Name) or not isinstance(loop.iter, cst.Call):
        return None
    if attribute_name(loop.iter.func) != "parameters":
        return None
    param = loop.target.value
    reads_grad = any(
        attr.attr.value == "grad" and is_name(attr.value, param) for attr in descendants(loop.body, cst.Attribute)
    )
    return loop.iter if reads_grad else None


def is_training_function_name(name: str) -> bool:
    """`train(...)`, `train_one_epoch(...)`, `do_train(...)`, `fit(...)`: a function that trains."""
    return name in ("fit", "learn", "run_epoch", "train") or name.startswith("train_") or name.endswith("_train")


# Options a script declares when it sets up distributed training itself, through a helper
# (`utils.init_distributed_mode(args)`), mp.spawn, or a `--launcher pytorch|slurm` switch.
DISTRIBUTED_OPTIONS = frozenset(
    {
        "--dist-url", "--dist_url", "--dist-backend", "--dist_backend", "--world-size", "--world_size",
        "--multiprocessing-distributed", "--launcher",
    }
)
# Helpers that set up the process group (DeiT/DINO/DETR's `init_distributed_mode`, mmcv's `init_dist`).
from migrator.relevance import is_distributed_setup_name  # noqa: E402,F401 - shared with the triage (no LibCST there)


def declares_distributed_option(call: cst.Call) -> bool:
    """`parser.add_argument("--dist_url", ...)` and the like."""
    return attribute_name(call.func) == "add_argument" and any(
        isinstance(arg.value, cst.SimpleString) and arg.value.evaluated_value in DISTRIBUTED_OPTIONS
        for arg in call.args
        if arg.keyword is None
    )


# Top-level packages that never hold the user's training code.


def is_legacy_launch_module(dotted: str) -> bool:
    """`torch.distributed.launch` (and its submodules); not `torch.distributed.launcher`, the
    elastic API torchrun itself is built on."""
    return dotted == "torch.distributed.launch" or dotted.startswith("torch.distributed.launch.")


def stays_at_module_level(statement: cst.CSTNode) -> bool:
    """Definitions, imports and bare strings: what a move into the main guard leaves where it is."""
    if isinstance(statement, (cst.FunctionDef, cst.ClassDef)):
        return True
    return isinstance(statement, cst.SimpleStatementLine) and all(
        isinstance(small, (cst.Import, cst.ImportFrom))
        or isinstance(small, cst.Expr) and isinstance(small.value, (cst.SimpleString, cst.ConcatenatedString))
        for small in statement.body
    )
