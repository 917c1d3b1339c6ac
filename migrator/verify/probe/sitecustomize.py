"""Runtime probe for migrated training scripts, loaded by Python's `site` module.

ddp-migrate verify (migrator/verify/runner.py) and the project's runtime tests
(tests/runtime_probe/harness.py) put this folder first on PYTHONPATH of a torchrun run and set
DDP_PROBE_DIR. Python then imports this file at start-up in every
process of the run, but it only arms itself in the training processes:

  * torchrun workers: RANK and LOCAL_RANK are set (the torchrun parent has neither);
  * a plain single-process run, when the harness also sets DDP_PROBE_SINGLE=1;
  * never in a process started by an armed one (spawned DataLoader workers and the like):
    the armed process leaves its pid in _DDP_PROBE_OWNER_PID for its children to see. (With
    DDP_PROBE_WATCH=1 a spawned DataLoader worker gets the watch's small part, WorkerWatch:
    its stack on SIGUSR1 and its init_process_group calls, no record.)

Armed, it registers its atexit handler before the script runs (so the handler runs LAST,
after the script's own atexit handlers and `finally` blocks), and waits for `import torch`
to finish before patching anything: no torch import of its own, no cost for processes that
never import torch. At exit it writes DDP_PROBE_DIR/rank<N>.json (format: RECORD_FORMAT
below; N is the RANK env var, 0 in single mode).

Everything the probe does is guarded: a probe bug is written to "probe_errors" in the
record and never changes what the script does.

With none of the settings below the probe only records (what the runtime tests need). ddp-migrate
verify sets them to keep a run short, without editing the script:

  DDP_PROBE_MAX_BATCHES=K  every pass over a DataLoader ends after K batches: the index sampler
                           raises StopIteration, so the loop ends as it does at the end of the data
                           (len(loader) is unchanged).
  DDP_PROBE_EPOCHS=E       the run ends after E epochs of the script's own loop. An epoch is a pass
                           over the training loader: the DataLoader whose batches are followed by
                           optimizer steps (one with a DistributedSampler first; loaders over the
                           same dataset count as one). When pass E+1 would start, iter(loader)
                           raises VerifyStop, a SystemExit with status 0: `except Exception` does
                           not catch it, `finally` blocks (destroy_process_group) run, the record is
                           written at exit and the process exits 0. Every rank takes the same steps,
                           so every rank stops at the same pass. A script whose own loop ends
                           earlier simply ends; code after its loop does not run when it stops.
  DDP_PROBE_WATCH=1        also what only verify needs (_ddp_probe_watch.py beside this file): files
                           opened for writing, output classified by who wrote it, stacks on SIGUSR1,
                           DataLoader worker processes that join the process group.
"""
from __future__ import annotations

import atexit
import hashlib
import json
import os
import sys
import threading
import time
import traceback
import weakref

PROBE_VERSION = 1

RECORD_FORMAT = """
{
  "probe_version": 1,
  "mode": "torchrun" | "single",
  "rank": int,                      # RANK env var (0 in single mode)
  "pid": int, "argv": [str], "cwd": str,
  "env": {"RANK": "0", "LOCAL_RANK": "0", "WORLD_SIZE": "2", ...},
  "init_process_group": [{"backend": "gloo", "world_size": 2, "rank": 0, "kwargs": {...}}],
  "destroy_process_group": [{"default_group": true}],
  "initialized_at_exit": bool,      # torch.distributed.is_initialized() when the process exits
  "ddp": [{"index": 0, "module_class": "Net", "device_ids": null, "device_ids_arg": null,
           "output_device": null, "param_names": [...], "param_checksum": sha256 hex,
           "param_digests": {name: 16 hex}, "param_devices": ["cpu"], "num_params": int,
           "buffer_names": [...], "buffer_checksum": sha256 hex,
           "syncs": int}],                # gradient bucket all-reduces; only with DDP_PROBE_COUNT_SYNCS=1
  "optimizers": [{"index": 0, "class": "SGD", "num_params": int, "param_checksum": sha256 hex,
                  "steps": int}],
  "optimizer_steps": int,           # optimizer.step() calls, all optimizers
  "saves": [{"path": abs path | null, "file": repr, "ok": bool, "rank": dist rank | null,
             "env_rank": int | null, "summary": {...}, "state_dict_keys": [...] | null,
             "nested_state_dict_keys": {"model": [...]}, "nested_optimizer_state_dicts": ["optimizer"]}],
  "loaders": [{"index": 0, "dataset_class": str, "dataset_len": int | null, "batch_size": int | null,
               "drop_last": bool, "num_workers": int, "sampler_class": str,
               "sampler_len": int | null, "sampler_replacement": bool | null,
               "sampler_index": int | null,   # into "samplers" when it (or the batch_sampler's
                                              # sampler) is a DistributedSampler
               "iterations": [{"epoch": int | null,
                               "indices": [int, ...],   # what the loop consumed (a prefix on `break`)
                               "batches": int,
                               "optimizer_steps": int,  # steps taken while this pass had drawn
                                                        # the latest batch: >0 on training loaders
                               "shard": [int, ...]}],   # DistributedSampler loaders only: the
                                                        # sampler's whole yield for this pass
               "subset_of": {"dataset_class": str, "dataset_len": int | null,  # a Subset's only: the
                             "indices": [int, ...]}}],  # sample of that dataset each index reads
  "samplers": [{"index": 0, "class": "DistributedSampler", "num_replicas": 2, "rank": 0,
                "shuffle": bool, "drop_last": bool, "seed": int, "dataset_len": int | null,
                "set_epoch": [0, 1, ...], "iterated": int}],
  "set_epoch_calls": [{"sampler_index": 0, "epoch": 0}],
  "exception": null | {"type": str, "message": str},   # uncaught exception in the main thread
  "probe_errors": [str],
  # Only with DDP_PROBE_MAX_BATCHES / DDP_PROBE_EPOCHS (ddp-migrate verify):
  "limits": {"max_batches": int | null, "epochs": int | null},
  "stop": null | {"epochs": int, "loader_index": int, "pass": int, "where": "train.py:41"},
  # loader records get "num_batches" (len(loader)) and each pass "cut": true when K ended it
  # Only with DDP_PROBE_WATCH=1: see _ddp_probe_watch.WATCH_FORMAT
  "probe_seconds": {"install": float, "exit": float}   # the probe's own cost
}
"""

_ENV_DIR = "DDP_PROBE_DIR"
_ENV_SINGLE = "DDP_PROBE_SINGLE"
_ENV_OWNER = "_DDP_PROBE_OWNER_PID"
_ENV_MAX_BATCHES = "DDP_PROBE_MAX_BATCHES"
_ENV_EPOCHS = "DDP_PROBE_EPOCHS"
_ENV_WATCH = "DDP_PROBE_WATCH"
_ENV_DL_PARENT = "_DDP_PROBE_DL_PARENT"  # set while an armed process starts DataLoader workers
_ENV_KEYS = ("RANK", "LOCAL_RANK", "WORLD_SIZE", "LOCAL_WORLD_SIZE", "GROUP_RANK",
             "MASTER_ADDR", "MASTER_PORT", "TORCHELASTIC_RUN_ID", "OMP_NUM_THREADS")


def _should_arm() -> bool:
    if not os.environ.get(_ENV_DIR):
        return False
    if os.environ.get(_ENV_OWNER):  # a child of an armed process
        return False
    if "RANK" in os.environ and "LOCAL_RANK" in os.environ:
        return True
    return os.environ.get(_ENV_SINGLE) == "1"


def _is_watched_worker() -> bool:
    """A DataLoader worker that an armed, watching process started with spawn or forkserver
    (a forked worker never runs site: it is a copy of its parent)."""
    return bool(os.environ.get(_ENV_DIR) and os.environ.get(_ENV_OWNER)
                and os.environ.get(_ENV_WATCH) == "1" and os.environ.get(_ENV_DL_PARENT) is not None)


def _positive_env(name: str):
    """A positive int from the environment, else None (unset, empty, not a number, < 1)."""
    try:
        value = int(os.environ.get(name, ""))
    except ValueError:
        return None
    return value if value > 0 else None


class VerifyStop(SystemExit):
    """Ends the run when pass E+1 over the training loader would start (DDP_PROBE_EPOCHS).

    A SystemExit with status 0, on purpose: user code's `except Exception` does not catch it,
    `finally` blocks and atexit handlers run, the interpreter prints nothing and exits 0."""

    def __init__(self, message: str) -> None:
        super().__init__(0)
        self.message = message


class _Probe:
    def __init__(self) -> None:
        self.lock = threading.RLock()
        self.out_dir = os.environ[_ENV_DIR]
        self.single = "RANK" not in os.environ
        self.rank = int(os.environ.get("RANK", "0") or 0)
        self.record = {
            "probe_version": PROBE_VERSION,
            "mode": "single" if self.single else "torchrun",
            "rank": self.rank,
            "pid": os.getpid(),
            "argv": list(sys.argv),
            "cwd": os.getcwd(),
            "env": {k: os.environ[k] for k in _ENV_KEYS if k in os.environ},
            "init_process_group": [],
            "destroy_process_group": [],
            "initialized_at_exit": None,
            "ddp": [],
            "optimizers": [],
            "optimizer_steps": 0,
            "saves": [],
            "loaders": [],
            "samplers": [],
            "set_epoch_calls": [],
            "exception": None,
            "probe_errors": [],
            "probe_seconds": {"install": None, "exit": None},
        }
        # Strong references, read at exit: the wrapped modules and the optimizers' params.
        self.ddp_modules = []  # (record, module)
        self.optimizer_params = []  # (record, [tensor])
        self.loader_records = weakref.WeakKeyDictionary()
        self.sampler_records = weakref.WeakKeyDictionary()
        self.drawing = None  # the loader pass whose iterator is drawing a batch right now
        self.iteration_samplers = {}  # id(loader pass) -> its DistributedSampler's index
        self.last_iteration = None  # the loader pass that drew the latest batch
        self.optimizer_records = weakref.WeakKeyDictionary()
        self.patched = False
        self.written = False
        # verify's settings (None: off)
        self.max_batches = _positive_env(_ENV_MAX_BATCHES)
        self.epochs = _positive_env(_ENV_EPOCHS)
        self.passes = {}  # id(dataset) -> passes started over loaders of that dataset
        self.loader_keys = {}  # loader record index -> id(its dataset)
        if self.max_batches or self.epochs:
            self.record["limits"] = {"max_batches": self.max_batches, "epochs": self.epochs}
            self.record["stop"] = None
        self.watch = None  # _ddp_probe_watch.Watch with DDP_PROBE_WATCH=1

    # -- bookkeeping -------------------------------------------------------------
    def error(self, where: str) -> None:
        try:
            self.record["probe_errors"].append(f"{where}: {traceback.format_exc(limit=3)}")
        except Exception:  # pragma: no cover - never let the probe raise
            pass

    def guard(self, where, fn, *args, **kwargs):
        try:
            return fn(*args, **kwargs)
        except Exception:
            self.error(where)
            return None

    # -- exit --------------------------------------------------------------------
    def at_exit(self) -> None:
        if self.written:
            return
        self.written = True
        started = time.perf_counter()
        torch = sys.modules.get("torch")
        if torch is not None:
            self.guard("initialized_at_exit", self._read_initialized, torch)
            for rec, module in self.ddp_modules:
                self.guard("ddp checksum", self._checksum_module, torch, rec, module)
            for rec, params in self.optimizer_params:
                self.guard("optimizer checksum", self._checksum_optimizer, torch, rec, params)
        self.record["probe_seconds"]["exit"] = round(time.perf_counter() - started, 4)
        self.guard("write", self._write)

    def _read_initialized(self, torch) -> None:
        dist = torch.distributed
        self.record["initialized_at_exit"] = bool(dist.is_available() and dist.is_initialized())

    def _write(self) -> None:
        os.makedirs(self.out_dir, exist_ok=True)
        path = os.path.join(self.out_dir, f"rank{self.rank}.json")
        tmp = f"{path}.{os.getpid()}.tmp"
        with open(tmp, "w") as fh:
            json.dump(self.record, fh, indent=1, default=repr)
        os.replace(tmp, path)

    # -- checksums ---------------------------------------------------------------
    @staticmethod
    def _tensor_bytes(torch, t) -> bytes:
        t = t.detach().to(device="cpu", dtype=torch.float64).contiguous()
        try:
            return t.numpy().tobytes()
        except Exception:  # numpy missing: slower but equivalent content
            import struct

            flat = t.reshape(-1).tolist()
            return struct.pack(f"<{len(flat)}d", *flat)

    def _digest(self, torch, named) -> tuple:
        total = hashlib.sha256()
        names, digests, devices = [], {}, set()
        for name, t in named:
            data = self._tensor_bytes(torch, t)
            total.update(name.encode() + b"\0" + repr(tuple(t.shape)).encode() + b"\0")
            total.update(data)
            names.append(name)
            digests[name] = hashlib.sha256(data).hexdigest()[:16]
            devices.add(str(t.device))
        return names, total.hexdigest(), digests, sorted(devices)

    def _checksum_module(self, torch, rec, module) -> None:
        params = sorted(module.named_parameters(), key=lambda kv: kv[0])
        names, checksum, digests, devices = self._digest(torch, params)
        rec.update(param_names=names, param_checksum=checksum, param_digests=digests,
                   param_devices=devices, num_params=sum(int(p.numel()) for _, p in params))
        buffers = sorted(module.named_buffers(), key=lambda kv: kv[0])
        bnames, bchecksum, _, _ = self._digest(torch, buffers)
        rec.update(buffer_names=bnames, buffer_checksum=bchecksum)

    def _checksum_optimizer(self, torch, rec, params) -> None:
        named = [(str(i), p) for i, p in enumerate(params)]
        _, checksum, _, _ = self._digest(torch, named)
        rec.update(param_checksum=checksum, num_params=sum(int(p.numel()) for p in params))

    # -- patches -----------------------------------------------------------------
    def install(self, torch) -> None:
        if self.patched:
            return
        self.patched = True
        started = time.perf_counter()
        self.guard("patch distributed", self._patch_distributed, torch)
        self.guard("patch ddp", self._patch_ddp, torch)
        self.guard("patch optimizer", self._patch_optimizer, torch)
        self.guard("patch save", self._patch_save, torch)
        self.guard("patch dataloader", self._patch_dataloader, torch)
        self.guard("patch sampler", self._patch_sampler, torch)
        if self.watch is not None:
            self.guard("watch torch", self.watch.install, torch)
        self.record["probe_seconds"]["install"] = round(time.perf_counter() - started, 4)

    def _patch_distributed(self, torch) -> None:
        dist = torch.distributed
        if not dist.is_available():
            return
        import torch.distributed.distributed_c10d as c10d

        probe = self
        orig_init = c10d.init_process_group
        orig_destroy = c10d.destroy_process_group

        def init_process_group(*args, **kwargs):
            result = orig_init(*args, **kwargs)
            probe.guard("record init", probe._record_init, dist, args, kwargs)
            return result

        def destroy_process_group(*args, **kwargs):
            group = args[0] if args else kwargs.get("group")
            probe.guard("record destroy", probe.record["destroy_process_group"].append,
                        {"default_group": group is None})
            return orig_destroy(*args, **kwargs)

        for fn, orig in ((init_process_group, orig_init), (destroy_process_group, orig_destroy)):
            fn.__wrapped__ = orig
            fn.__name__ = orig.__name__
            fn.__doc__ = orig.__doc__
            for mod in (c10d, dist):
                setattr(mod, orig.__name__, fn)

    def _record_init(self, dist, args, kwargs) -> None:
        call = {k: _jsonable(v) for k, v in kwargs.items()}
        if args:
            call["args"] = [_jsonable(a) for a in args]
        self.record["init_process_group"].append({
            "backend": str(dist.get_backend()),
            "world_size": dist.get_world_size(),
            "rank": dist.get_rank(),
            "kwargs": call,
        })

    def _patch_ddp(self, torch) -> None:
        from torch.nn.parallel import DistributedDataParallel as DDP

        probe = self
        orig = DDP.__init__

        def __init__(self, *args, **kwargs):
            orig(self, *args, **kwargs)
            probe.guard("record ddp", probe._record_ddp, self, args, kwargs)

        __init__.__wrapped__ = orig
        DDP.__init__ = __init__

    def _record_ddp(self, ddp, args, kwargs) -> None:
        device_ids_arg = kwargs.get("device_ids", args[1] if len(args) > 1 else None)
        rec = {
            "index": len(self.record["ddp"]),
            "module_class": type(ddp.module).__name__,
            "device_ids": _jsonable(getattr(ddp, "device_ids", None)),
            "device_ids_arg": _jsonable(device_ids_arg),
            "output_device": _jsonable(getattr(ddp, "output_device", None)),
        }
        self.record["ddp"].append(rec)
        self.ddp_modules.append((rec, ddp.module))
        if os.environ.get("DDP_PROBE_COUNT_SYNCS") == "1":
            self._count_syncs(ddp, rec)

    def _count_syncs(self, ddp, rec) -> None:
        """DDP_PROBE_COUNT_SYNCS=1: count the gradient all-reduces of this DDP model ("syncs": bucket
        reductions). A comm hook that counts and runs DDP's default all-reduce (same result); only
        when asked, since a script may register a comm hook of its own (only one is allowed)."""
        from torch.distributed.algorithms.ddp_comm_hooks.default_hooks import allreduce_hook

        rec["syncs"] = 0

        def counting_hook(state, bucket):
            rec["syncs"] += 1
            return allreduce_hook(state, bucket)

        ddp.register_comm_hook(None, counting_hook)

    def _patch_optimizer(self, torch) -> None:
        Optimizer = torch.optim.Optimizer
        probe = self
        orig = Optimizer.__init__

        def __init__(self, *args, **kwargs):
            orig(self, *args, **kwargs)
            probe.guard("record optimizer", probe._record_optimizer, self)

        __init__.__wrapped__ = orig
        Optimizer.__init__ = __init__

        def step_hook(optimizer, args, kwargs):
            probe.guard("record optimizer step", probe._record_step, optimizer)

        # A global hook after every Optimizer.step (GradScaler.step calls it unless it skips).
        from torch.optim.optimizer import register_optimizer_step_post_hook

        register_optimizer_step_post_hook(step_hook)

    def _record_optimizer(self, opt) -> None:
        params = [p for group in opt.param_groups for p in group["params"]]
        rec = {"index": len(self.record["optimizers"]), "class": type(opt).__name__, "steps": 0}
        self.record["optimizers"].append(rec)
        self.optimizer_params.append((rec, params))
        self.optimizer_records[opt] = rec

    def _record_step(self, optimizer) -> None:
        self.record["optimizer_steps"] += 1
        rec = self.optimizer_records.get(optimizer)
        if rec is not None:
            rec["steps"] += 1
        if self.last_iteration is not None:
            self.last_iteration["optimizer_steps"] += 1

    def _patch_save(self, torch) -> None:
        import torch.serialization as serialization

        probe = self
        orig = serialization.save

        def save(obj, f, *args, **kwargs):
            entry = probe.guard("record save", probe._record_save, torch, obj, f)
            try:
                result = orig(obj, f, *args, **kwargs)
            except BaseException:
                if entry is not None:
                    entry["ok"] = False
                raise
            return result

        save.__wrapped__ = orig
        save.__name__ = orig.__name__
        save.__doc__ = orig.__doc__
        serialization.save = save
        torch.save = save

    def _record_save(self, torch, obj, f):
        if isinstance(f, (str, bytes, os.PathLike)):
            path = os.path.abspath(os.fsdecode(os.fspath(f)))
        else:
            name = getattr(f, "name", None)
            path = os.path.abspath(name) if isinstance(name, str) else None
        dist = torch.distributed
        dist_rank = dist.get_rank() if dist.is_available() and dist.is_initialized() else None
        summary = _summarize(torch, obj)
        nested = {}
        optimizers = []
        for key, sub in (summary.get("items") or {}).items():
            if sub.get("state_dict"):
                nested[key] = sub["keys"]
            elif sub.get("optimizer_state_dict"):
                optimizers.append(key)
        entry = {
            "path": path,
            "file": repr(f)[:200],
            "ok": True,
            "rank": dist_rank,
            "env_rank": None if self.single else self.rank,
            "summary": summary,
            "state_dict_keys": summary.get("keys") if summary.get("state_dict") else summary.get("state_dict_keys"),
            "nested_state_dict_keys": nested,
            "nested_optimizer_state_dicts": optimizers,
        }
        self.record["saves"].append(entry)
        return entry

    def _patch_dataloader(self, torch) -> None:
        # One "iteration" per pass over a DataLoader: a new iterator (base __init__) or a
        # persistent-workers iterator being reset for the next pass (base _reset with
        # first_iter False). Both hooks run right after the sampler iterator is (re)made and
        # before a multi-process iterator prefetches, so every index lands in its own pass.
        from torch.utils.data import dataloader as dl

        probe = self
        Base = dl._BaseDataLoaderIter
        orig_init, orig_reset, orig_next_index = Base.__init__, Base._reset, Base._next_index

        def __init__(self, loader, *args, **kwargs):
            if probe.epochs:  # before the base init: no worker is started for a pass that never runs
                probe.stop_if_done(loader)
            orig_init(self, loader, *args, **kwargs)
            probe.guard("record loader iteration", probe._start_iteration, loader, self)

        def _reset(self, *args, **kwargs):
            loader = args[0] if args else kwargs.get("loader")
            first_iter = args[1] if len(args) > 1 else kwargs.get("first_iter", False)
            if probe.epochs and loader is not None and not first_iter:  # persistent workers' next pass
                probe.stop_if_done(loader)
            orig_reset(self, *args, **kwargs)
            if loader is not None and not first_iter:
                probe.guard("record loader iteration", probe._start_iteration, loader, self)

        def _next_index(self):
            current = self.__dict__.get("_ddp_probe_iteration")
            if probe.max_batches and current is not None and current["batches"] >= probe.max_batches:
                current["cut"] = True
                raise StopIteration  # the pass ends here, as at the end of the data
            # The batch sampler iterates a DistributedSampler lazily, inside the first
            # _next_index of a pass: _record_shard files its yield under `probe.drawing`.
            previous, probe.drawing = probe.drawing, current
            try:
                index = orig_next_index(self)  # StopIteration passes through
            finally:
                probe.drawing = previous
            if current is not None:
                probe.guard("record indices", _extend_indices, current, index)
                probe.last_iteration = current
            return index

        for fn, orig in ((__init__, orig_init), (_reset, orig_reset), (_next_index, orig_next_index)):
            fn.__wrapped__ = orig
            setattr(Base, orig.__name__, fn)

    def _loader_record(self, loader) -> dict:
        rec = self.loader_records.get(loader)
        if rec is None:
            dataset = loader.dataset
            try:
                dataset_len = len(dataset)
            except Exception:
                dataset_len = None
            sampler = _effective_sampler(loader)
            try:
                sampler_len = len(sampler)
            except Exception:
                sampler_len = None
            replacement = getattr(sampler, "replacement", None)
            rec = {
                "index": len(self.record["loaders"]),
                "dataset_class": type(dataset).__name__,
                "dataset_len": dataset_len,
                "batch_size": loader.batch_size,
                "drop_last": bool(loader.drop_last),
                "num_workers": int(loader.num_workers),
                "sampler_class": type(sampler).__name__,
                "sampler_len": sampler_len,
                "sampler_replacement": replacement if isinstance(replacement, bool) else None,
                "sampler_index": self._sampler_index(sampler),
                "iterations": [],
            }
            subset = self.guard("record subset", _subset_of, dataset)
            if subset is not None:
                rec["subset_of"] = subset
            if self.max_batches or self.epochs:
                rec["num_batches"] = _len_or_none(loader)
            self.record["loaders"].append(rec)
            self.loader_records[loader] = rec
            self.loader_keys[rec["index"]] = id(dataset)
        return rec

    def _start_iteration(self, loader, it) -> None:
        rec = self._loader_record(loader)
        sampler = _effective_sampler(loader)
        if rec["sampler_index"] is None:
            rec["sampler_index"] = self._sampler_index(sampler)
        epoch = getattr(sampler, "epoch", None)
        iteration = {"epoch": epoch if isinstance(epoch, int) else None, "indices": [], "batches": 0,
                     "optimizer_steps": 0}
        rec["iterations"].append(iteration)
        it.__dict__["_ddp_probe_iteration"] = iteration
        key = self.loader_keys.get(rec["index"])
        self.passes[key] = self.passes.get(key, 0) + 1
        if rec["sampler_index"] is not None:
            self.iteration_samplers[id(iteration)] = rec["sampler_index"]

    # -- verify's stop after E epochs -------------------------------------------------
    def stop_if_done(self, loader) -> None:
        """Raise VerifyStop when `loader` would start pass E+1 over the training data."""
        stop = self.guard("verify stop", self._stop_for, loader)
        if stop is not None:
            raise stop

    def _stop_for(self, loader):
        rec = self._loader_record(loader)
        key = self.loader_keys.get(rec["index"])
        done = self.passes.get(key, 0)
        if done < self.epochs or key != self._training_key():
            return None
        self.record["stop"] = {"epochs": self.epochs, "loader_index": rec["index"], "pass": done + 1,
                               "where": _user_frame(sys._getframe(1))}
        return VerifyStop(f"ddp-migrate verify: stopped before pass {done + 1} over the training loader")

    def _training_key(self):
        """The dataset of the training loader: the first loader whose batches were followed by
        optimizer steps, one with a DistributedSampler first. None until a step was taken."""
        fed = [rec for rec in self.record["loaders"]
               if any(it.get("optimizer_steps") for it in rec["iterations"])]
        if not fed:
            return None
        sharded = [rec for rec in fed if rec["sampler_index"] is not None]
        return self.loader_keys.get((sharded or fed)[0]["index"])

    def _patch_sampler(self, torch) -> None:
        from torch.utils.data.distributed import DistributedSampler

        probe = self
        orig_init = DistributedSampler.__init__
        orig_set_epoch = DistributedSampler.set_epoch
        orig_iter = DistributedSampler.__iter__

        def __init__(self, *args, **kwargs):
            orig_init(self, *args, **kwargs)
            probe.guard("record sampler", probe._sampler_record, self)

        def set_epoch(self, epoch, *args, **kwargs):
            result = orig_set_epoch(self, epoch, *args, **kwargs)
            probe.guard("record set_epoch", probe._record_set_epoch, self, epoch)
            return result

        def __iter__(self):
            # DistributedSampler.__iter__ builds its whole index list eagerly and returns
            # iter(list): materialising it here changes nothing the script can see.
            indices = list(orig_iter(self))
            probe.guard("record shard", probe._record_shard, self, indices)
            return iter(indices)

        __init__.__wrapped__ = orig_init
        set_epoch.__wrapped__ = orig_set_epoch
        __iter__.__wrapped__ = orig_iter
        DistributedSampler.__init__ = __init__
        DistributedSampler.set_epoch = set_epoch
        DistributedSampler.__iter__ = __iter__
        self._distributed_sampler = DistributedSampler

    def _sampler_index(self, sampler):
        cls = getattr(self, "_distributed_sampler", None)
        if cls is None or not isinstance(sampler, cls):
            return None
        return self._sampler_record(sampler)["index"]

    def _sampler_record(self, sampler) -> dict:
        rec = self.sampler_records.get(sampler)
        if rec is None:
            try:
                dataset_len = len(sampler.dataset)
            except Exception:
                dataset_len = None
            rec = {
                "index": len(self.record["samplers"]),
                "class": type(sampler).__name__,
                "num_replicas": getattr(sampler, "num_replicas", None),
                "rank": getattr(sampler, "rank", None),
                "shuffle": getattr(sampler, "shuffle", None),
                "drop_last": getattr(sampler, "drop_last", None),
                "seed": getattr(sampler, "seed", None),
                "dataset_len": dataset_len,
                "set_epoch": [],
                "iterated": 0,
            }
            self.record["samplers"].append(rec)
            self.sampler_records[sampler] = rec
        return rec

    def _record_shard(self, sampler, indices) -> None:
        rec = self._sampler_record(sampler)
        rec["iterated"] += 1
        iteration = self.drawing
        if (iteration is not None and "shard" not in iteration
                and self.iteration_samplers.get(id(iteration)) == rec["index"]):
            iteration["shard"] = [_jsonable(i) for i in indices]

    def _record_set_epoch(self, sampler, epoch) -> None:
        rec = self._sampler_record(sampler)
        rec["set_epoch"].append(_jsonable(epoch))
        self.record["set_epoch_calls"].append({"sampler_index": rec["index"], "epoch": _jsonable(epoch)})


# -- helpers -----------------------------------------------------------------------
def _jsonable(value):
    if value is None or isinstance(value, (bool, int, float, str)):
        return value
    if isinstance(value, (list, tuple)):
        return [_jsonable(v) for v in value]
    if isinstance(value, dict):
        return {str(k): _jsonable(v) for k, v in value.items()}
    item = getattr(value, "item", None)  # 0-d tensors, numpy scalars
    if callable(item):
        try:
            return _jsonable(item())
        except Exception:
            pass
    return str(value)


_SUBSET_LIMIT = 200_000  # samples: a larger Subset is not recorded


def _subset_of(dataset):
    """A Subset (of a Subset...): the dataset it picks from, and which of its samples each of the
    loader's indices reads (`Subset(Subset(ds, a), b)`: ds[a[b[i]]]). Two ranks whose splits were
    drawn apart pick different samples under the same loader indices. None for any other dataset."""
    from torch.utils.data import Subset

    chain = []
    while isinstance(dataset, Subset):
        chain.append(dataset.indices)
        dataset = dataset.dataset
    if not chain or len(chain[0]) > _SUBSET_LIMIT:
        return None
    picked = list(range(len(chain[0])))
    for indices in chain:
        picked = [int(indices[i]) for i in picked]
    return {"dataset_class": type(dataset).__name__, "dataset_len": _len_or_none(dataset), "indices": picked}


def _len_or_none(obj):
    """len(obj), or None where it has none (a loader over an IterableDataset): not a probe error."""
    try:
        return len(obj)
    except Exception:
        return None


def _user_frame(frame) -> str:
    """file:line of the innermost frame outside torch and this probe (where the script is)."""
    here = os.path.dirname(os.path.abspath(__file__))
    while frame is not None:
        name = frame.f_globals.get("__name__", "") or ""
        filename = frame.f_code.co_filename
        if name.partition(".")[0] not in ("torch", "tqdm") and not filename.startswith(here):
            return f"{os.path.basename(filename)}:{frame.f_lineno}"
        frame = frame.f_back
    return "?"


def _effective_sampler(loader):
    """The loader's index sampler: loader.sampler, or the sampler inside a custom batch_sampler
    (DataLoader(ds, batch_sampler=BatchSampler(DistributedSampler(ds), ...)))."""
    batch_sampler = getattr(loader, "batch_sampler", None)
    inner = getattr(batch_sampler, "sampler", None)
    return inner if inner is not None else loader.sampler


def _extend_indices(iteration, index) -> None:
    iteration["batches"] += 1
    if isinstance(index, (list, tuple)):
        values = index
    else:
        tolist = getattr(index, "tolist", None)
        values = tolist() if callable(tolist) else [index]
        if not isinstance(values, list):
            values = [values]
    for v in values:
        if v is None:  # IterableDataset: the sampler yields no indices
            continue
        try:
            iteration["indices"].append(int(v))
        except Exception:
            iteration["indices"].append(repr(v))


def _summarize(torch, obj, depth: int = 0) -> dict:
    from collections.abc import Mapping

    if isinstance(obj, torch.Tensor):
        return {"type": "tensor", "shape": list(obj.shape), "dtype": str(obj.dtype)}
    if isinstance(obj, torch.nn.Module):
        return {"type": "module", "class": type(obj).__name__,
                "state_dict_keys": list(obj.state_dict().keys())}
    if isinstance(obj, Mapping):
        keys = [str(k) for k in obj.keys()]
        out = {"type": "mapping", "class": type(obj).__name__, "keys": keys}
        values = list(obj.values())
        if values and all(isinstance(v, torch.Tensor) for v in values):
            out["state_dict"] = True
        elif "state" in obj and "param_groups" in obj:
            out["optimizer_state_dict"] = True
        if depth < 2 and not out.get("state_dict"):
            items = {str(k): _summarize(torch, v, depth + 1) for k, v in obj.items()
                     if isinstance(v, (Mapping, torch.nn.Module))}
            if items:
                out["items"] = items
        return out
    if isinstance(obj, (list, tuple)):
        out = {"type": type(obj).__name__, "len": len(obj)}
        # `[model.state_dict(), optimizer.state_dict(), epoch, step, ema.state_dict()]`: each state
        # in it is read as a dict's item would be, by its index.
        items = {str(i): _summarize(torch, v, depth + 1) for i, v in enumerate(obj)
                 if isinstance(v, (Mapping, torch.nn.Module))} if depth < 2 else {}
        if items:
            out["items"] = items
        return out
    return {"type": type(obj).__name__}


# -- activation --------------------------------------------------------------------
class _TorchImportHook:
    """A meta path finder that runs `_PROBE.install(torch)` once `import torch` completes."""

    def __init__(self, probe: _Probe) -> None:
        self.probe = probe

    def find_spec(self, fullname, path=None, target=None):
        if fullname != "torch":
            return None
        import importlib.machinery

        spec = importlib.machinery.PathFinder.find_spec(fullname, path)
        if spec is None or spec.loader is None or not hasattr(spec.loader, "exec_module"):
            return spec
        spec.loader = _PatchingLoader(spec.loader, self.probe)
        return spec


class _PatchingLoader:
    def __init__(self, loader, probe: _Probe) -> None:
        self._loader = loader
        self._probe = probe

    def create_module(self, spec):
        return self._loader.create_module(spec)

    def exec_module(self, module):
        self._loader.exec_module(module)
        self._probe.guard("install", self._probe.install, module)
        try:
            sys.meta_path.remove(_HOOK)
        except ValueError:
            pass

    def __getattr__(self, name):  # get_resource_reader, is_package, ...
        return getattr(self._loader, name)


def _record_uncaught(probe: _Probe, previous):
    def hook(exc_type, exc, tb):
        try:
            probe.record["exception"] = {"type": exc_type.__name__, "message": str(exc)[:2000]}
            if probe.watch is not None:  # verify shows the traceback's tail of a failed rank
                text = "".join(traceback.format_exception(exc_type, exc, tb))
                probe.record["exception"]["traceback"] = text[-6000:]
        except Exception:
            pass
        previous(exc_type, exc, tb)

    return hook


def _chain_other_sitecustomize() -> None:
    """Run the sitecustomize this file shadows (e.g. the distribution's), if any."""
    import importlib.machinery
    import importlib.util

    here = os.path.dirname(os.path.abspath(__file__))
    rest = [p for p in sys.path if os.path.abspath(p or os.curdir) != here]
    spec = importlib.machinery.PathFinder.find_spec("sitecustomize", rest)
    if spec is None or spec.origin is None or os.path.abspath(spec.origin) == os.path.abspath(__file__):
        return
    try:
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
    except Exception:
        pass


def _start_watch(probe):
    """DDP_PROBE_WATCH=1: verify's watch (output, file writes, stacks), armed before the script runs."""
    import _ddp_probe_watch

    probe.watch = _ddp_probe_watch.Watch(probe, _ENV_DL_PARENT)
    probe.watch.start()


def _start_worker_watch():
    """In a DataLoader worker of a watching process: its stack on SIGUSR1, and its
    init_process_group calls written down at once (such a call blocks)."""
    import _ddp_probe_watch

    return _ddp_probe_watch.start_worker(os.environ[_ENV_DIR], os.environ[_ENV_DL_PARENT])


_PROBE = None
_HOOK = None

if _should_arm():
    _PROBE = _Probe()
    os.environ[_ENV_OWNER] = str(os.getpid())
    atexit.register(_PROBE.at_exit)  # first registered, so it runs last
    if os.environ.get(_ENV_WATCH) == "1":
        _PROBE.guard("watch", _start_watch, _PROBE)
    sys.excepthook = _record_uncaught(_PROBE, sys.excepthook)
    if "torch" in sys.modules:  # pragma: no cover - torch imported before site ran
        _PROBE.guard("install", _PROBE.install, sys.modules["torch"])
    else:
        _HOOK = _TorchImportHook(_PROBE)
        sys.meta_path.insert(0, _HOOK)
elif _is_watched_worker():
    try:
        _PROBE = _start_worker_watch()
        if _PROBE is not None and "torch" not in sys.modules:
            _HOOK = _TorchImportHook(_PROBE)
            sys.meta_path.insert(0, _HOOK)
    except Exception:  # a probe bug must not stop the worker
        pass

_chain_other_sitecustomize()
