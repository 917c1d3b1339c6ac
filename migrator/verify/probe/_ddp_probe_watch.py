"""ddp-migrate verify's watch over a probed process (DDP_PROBE_WATCH=1).

Imported by sitecustomize.py (this folder is first on sys.path there) only when verify asks, so
the runtime tests' records, made without it, are exactly what they were. Like the rest of the
probe it never imports torch itself and never lets its own failure reach the script: each piece
runs under the probe's guard, which files the error in "probe_errors".

What it adds, armed before the script's first line:

  * every file opened for writing or appending (builtins.open and io.open: open(), Path.open,
    shutil.copyfile, numpy.save, ...) under the working directory, with who opened it;
  * every write to sys.stdout / sys.stderr, classified by the Python frames that made it
    (see Watch.classify): the script's own print() apart from tqdm bars, logging and warnings;
  * its stack: faulthandler dumps every thread to stack-<pid>.txt on SIGUSR1, which verify sends
    when a run hangs, before it ends the run;
  * once torch is imported: the DataLoader worker processes each multi-process iterator starts,
    and, in a worker started with spawn or forkserver (a new interpreter that re-imports the
    script's module), an init_process_group call written to worker-init-<pid>.json before it
    is made (it joins the run's rendezvous as a copy of its parent's rank and blocks there).
"""
from __future__ import annotations

import builtins
import io
import json
import os
import sys
import tempfile

WATCH_FORMAT = """
  "cwd_real": str, "tmp_dir": str,
  "writes": {"out/log.txt": {"path": "out/log.txt", "modes": ["w"], "opens": int, "where": "train.py:40"}},
  "output": {KIND: {"writes": int, "lines": int, "chars": int,   # writes: non-blank ones
                    "samples": [{"stream": "stdout", "text": str, "where": "train.py:12" | null}]}},
      KIND: "print" (the script's own code wrote: print(), sys.stdout.write), "tqdm" (a tqdm frame
      is on the stack), "log" (a logging call from the script), "logging" (a library's),
      "warning" (warnings.showwarning), "other" (torch, the interpreter, tracebacks);
      blank writes (print's newline) are not counted
  "dataloader_workers": [{"loader_index": int | null, "start_method": str, "pids": [int]}],
  "exception": {..., "traceback": str}
Beside the records: alive-<pid>.json {"pid", "ppid", "role": "rank" | "dataloader_worker", "rank"},
stack-<pid>.txt (faulthandler, on SIGUSR1), worker-init-<pid>.json {"pid", "ppid", "parent_rank",
"where"} (a DataLoader worker's init_process_group, written before the call).
"""

_REAL_OPEN = builtins.open  # taken before the patch: the probe's own files are not the script's
_WRITE_MODES = ("w", "a", "x", "+")
_SAMPLES = 5
_STACK_DEPTH = 64
_HERE = os.path.dirname(os.path.realpath(__file__))


def _inside(path: str, root: str) -> bool:
    return path == root or path.startswith(root.rstrip(os.sep) + os.sep)


def _write_json(path: str, data: dict) -> None:
    tmp = f"{path}.tmp"
    with _REAL_OPEN(tmp, "w") as handle:
        json.dump(data, handle)
    os.replace(tmp, path)


def _announce(out_dir: str, role: str, rank) -> None:
    """alive-<pid>.json: verify signals the pids it finds here for their stacks on a hang."""
    _write_json(os.path.join(out_dir, f"alive-{os.getpid()}.json"),
                {"pid": os.getpid(), "ppid": os.getppid(), "role": role, "rank": rank})


def _arm_stacks(out_dir: str):
    """faulthandler writes every thread's stack to stack-<pid>.txt on SIGUSR1; returns the file,
    which must stay open. Where SIGUSR1 already has a handler, that one is called after the dump."""
    import faulthandler
    import signal

    if not hasattr(signal, "SIGUSR1"):  # pragma: no cover - Windows
        return None
    handle = _REAL_OPEN(os.path.join(out_dir, f"stack-{os.getpid()}.txt"), "w")
    chain = signal.getsignal(signal.SIGUSR1) not in (signal.SIG_DFL, None)  # SIG_DFL would kill
    faulthandler.register(signal.SIGUSR1, file=handle, all_threads=True, chain=chain)
    return handle


class _Stream:
    """Stands in for sys.stdout / sys.stderr: notes each write, then passes it on unchanged."""

    def __init__(self, inner, name: str, watch: "Watch") -> None:
        self.__dict__.update(_inner=inner, _name=name, _watch=watch)

    def write(self, text):
        self._watch.probe.guard("watch output", self._watch.note, self._name, text, sys._getframe(1))
        return self._inner.write(text)

    def writelines(self, lines):
        lines = list(lines)
        self._watch.probe.guard("watch output", self._watch.note, self._name,
                                "".join(x for x in lines if isinstance(x, str)), sys._getframe(1))
        return self._inner.writelines(lines)

    def __getattr__(self, name):  # flush, fileno, isatty, buffer, encoding, reconfigure, ...
        return getattr(self._inner, name)


class Watch:
    """The armed process's part: file writes, output, stacks, DataLoader workers."""

    def __init__(self, probe, dl_parent_env: str) -> None:
        self.probe = probe
        self.record = probe.record
        self.dl_parent_env = dl_parent_env
        self.cwd = os.path.realpath(os.getcwd())
        self.out_dir = os.path.realpath(probe.out_dir)
        self.user_root = None  # the script's folder, known once __main__ has a file
        self._user = {}  # co_filename -> is it the script's own code?
        self._lines = {}  # (kind, stream) -> (the line written so far, where its first part came from)
        self._stacks = None
        self.record.update(cwd_real=self.cwd, tmp_dir=os.path.realpath(tempfile.gettempdir()),
                           writes={}, output={}, dataloader_workers=[])

    def start(self) -> None:
        guard = self.probe.guard
        os.makedirs(self.probe.out_dir, exist_ok=True)
        self._stacks = guard("watch stacks", _arm_stacks, self.probe.out_dir)
        if self._stacks is not None:  # only a process that handles SIGUSR1 may be sent it
            guard("watch announce", _announce, self.probe.out_dir, "rank", self.probe.rank)
        guard("watch streams", self._wrap_streams)
        guard("watch open", self._patch_open)

    def install(self, torch) -> None:
        """Once torch is imported."""
        self.probe.guard("watch workers", self._patch_workers, torch)

    # -- files ----------------------------------------------------------------------
    def _patch_open(self) -> None:
        real = builtins.open
        guard, record = self.probe.guard, self._record_write

        def open(file, mode="r", *args, **kwargs):
            if isinstance(mode, str) and any(flag in mode for flag in _WRITE_MODES):
                guard("record write", record, file, mode, sys._getframe(1))
            return real(file, mode, *args, **kwargs)

        open.__wrapped__ = real
        open.__doc__ = real.__doc__
        builtins.open = open
        if io.open is real:  # pathlib and others call io.open
            io.open = open

    def _record_write(self, file, mode: str, frame) -> None:
        if isinstance(file, int):  # a file descriptor: no name to report
            return
        path = os.path.realpath(os.fsdecode(os.fspath(file)))
        if (not _inside(path, self.cwd) or _inside(path, self.out_dir)
                or "__pycache__" in path.split(os.sep)):
            return
        rel = os.path.relpath(path, self.cwd)
        entry = self.record["writes"].get(rel)
        if entry is None:
            entry = self.record["writes"][rel] = {"path": rel, "modes": [], "opens": 0,
                                                  "where": self._where(frame)}
        entry["opens"] += 1
        if mode not in entry["modes"]:
            entry["modes"].append(mode)

    # -- output ---------------------------------------------------------------------
    def _wrap_streams(self) -> None:
        for name in ("stdout", "stderr"):
            stream = getattr(sys, name, None)
            if stream is not None and not isinstance(stream, _Stream):
                setattr(sys, name, _Stream(stream, name, self))

    def note(self, stream: str, text, frame) -> None:
        """Count a write under its kind; its lines (print() writes each argument and the newline
        apart) are put together for the samples."""
        if not isinstance(text, str) or not text:
            return
        blank = not text.strip()  # print()'s separators and newline: part of a line, not writes
        kind, where = self.classify(frame)
        bucket = self.record["output"].get(kind)
        if bucket is None:
            bucket = self.record["output"][kind] = {"writes": 0, "lines": 0, "chars": 0, "samples": []}
        if not blank:
            bucket["writes"] += 1
            bucket["chars"] += len(text.strip())
        self._add_to_line(bucket, (kind, stream), text, where)

    def _add_to_line(self, bucket: dict, key, text: str, where) -> None:
        line, first_where = self._lines.get(key, ("", None))
        *complete, rest = (line + text).replace("\r", "\n").split("\n")
        for done in complete:
            self._count_line(bucket, key[1], done, first_where or where)
            first_where = None
        if len(rest) > 4096:  # a stream without newlines: counted as it is, never kept growing
            self._count_line(bucket, key[1], rest, first_where or where)
            rest = ""
        self._lines[key] = (rest, (first_where or where) if rest.strip() else None)

    @staticmethod
    def _count_line(bucket: dict, stream: str, line: str, where) -> None:
        if not line.strip():
            return
        bucket["lines"] += 1
        if len(bucket["samples"]) < _SAMPLES:
            bucket["samples"].append({"stream": stream, "text": line.strip()[:160], "where": where})

    def classify(self, frame):
        """(kind, file:line) of a write, from the frames that made it (WATCH_FORMAT's kinds).

        print() is a C function, so the frame calling write() is the code that printed. A tqdm
        frame anywhere on the stack makes a progress bar (tqdm.write too); below logging's
        frames, the first other frame is who logged."""
        in_logging = False
        f, depth = frame, 0
        while f is not None and depth < _STACK_DEPTH:
            name = f.f_globals.get("__name__") or ""
            top = name.partition(".")[0]
            if top == "tqdm":
                return "tqdm", self._where(f)
            if name == "warnings":
                return "warning", self._where(f)
            if top == "logging":
                in_logging = True
            elif in_logging:
                return ("log" if self.is_user(f.f_code.co_filename) else "logging"), self._where(f)
            elif depth == 0 and self.is_user(f.f_code.co_filename):
                return "print", f"{os.path.basename(f.f_code.co_filename)}:{f.f_lineno}"
            f, depth = f.f_back, depth + 1
        return "other", None

    def is_user(self, filename: str) -> bool:
        """Code of the script or of the modules in its folder, not of an installed package."""
        known = self._user.get(filename)
        if known is None:
            root = self._root()
            if root is None:
                return False  # not cached: the script's folder is not known yet
            known = self._user[filename] = self._judge(filename, root)
        return known

    @staticmethod
    def _judge(filename: str, root: str) -> bool:
        if not filename or filename.startswith("<"):
            return False
        path = os.path.realpath(filename)
        parts = path.split(os.sep)
        return (_inside(path, root) and not _inside(path, _HERE)
                and "site-packages" not in parts and "dist-packages" not in parts)

    def _root(self):
        if self.user_root is None:
            main = getattr(sys.modules.get("__main__"), "__file__", None)
            if main is None and sys.argv and os.path.isfile(sys.argv[0]):
                main = sys.argv[0]
            if main:
                self.user_root = os.path.dirname(os.path.realpath(main))
        return self.user_root

    def _where(self, frame):
        """file:line of the innermost frame of the script's own code, else None."""
        f, depth = frame, 0
        while f is not None and depth < _STACK_DEPTH:
            if self.is_user(f.f_code.co_filename):
                return f"{os.path.basename(f.f_code.co_filename)}:{f.f_lineno}"
            f, depth = f.f_back, depth + 1
        return None

    # -- DataLoader workers -------------------------------------------------------------
    def _patch_workers(self, torch) -> None:
        """Mark the environment while a multi-process iterator starts its workers, so a worker
        that starts a new interpreter (spawn, forkserver) knows what it is from its first line."""
        from torch.utils.data import dataloader as dl

        MP = dl._MultiProcessingDataLoaderIter
        orig = MP.__init__
        env, rank, guard, record = self.dl_parent_env, self.probe.rank, self.probe.guard, self._record_workers

        def __init__(it, loader, *args, **kwargs):
            previous = os.environ.get(env)
            os.environ[env] = str(rank)
            try:
                orig(it, loader, *args, **kwargs)
            finally:
                if previous is None:
                    os.environ.pop(env, None)
                else:
                    os.environ[env] = previous
            guard("record workers", record, loader, it)

        __init__.__wrapped__ = orig
        MP.__init__ = __init__

    def _record_workers(self, loader, it) -> None:
        context = getattr(loader, "multiprocessing_context", None)
        if context is None:
            import multiprocessing

            method = multiprocessing.get_start_method(allow_none=True) or "default"
        else:
            method = context if isinstance(context, str) else context.get_start_method()
        rec = self.probe.loader_records.get(loader)
        self.record["dataloader_workers"].append({
            "loader_index": rec["index"] if rec else None,
            "start_method": method,
            "pids": [getattr(w, "pid", None) for w in getattr(it, "_workers", [])],
        })


class WorkerWatch:
    """In a DataLoader worker of a watched process (spawn or forkserver): nothing is recorded
    but its stack (on SIGUSR1) and the init_process_group calls it makes, each written down
    before it is made. It has the probe's guard/install so sitecustomize's torch hook can call it."""

    def __init__(self, out_dir: str, parent_rank: str) -> None:
        self.out_dir = out_dir
        self.parent_rank = parent_rank
        self._stacks = None
        self.patched = False

    def guard(self, where, fn, *args, **kwargs):
        try:
            return fn(*args, **kwargs)
        except Exception:  # nowhere to report it: the worker must go on as it would
            return None

    def start(self) -> None:
        self._stacks = self.guard("stacks", _arm_stacks, self.out_dir)
        if self._stacks is not None:
            self.guard("announce", _announce, self.out_dir, "dataloader_worker", self.parent_rank)

    def install(self, torch) -> None:
        if self.patched:
            return
        self.patched = True
        self.guard("patch init", self._patch_init, torch)

    def _patch_init(self, torch) -> None:
        import torch.distributed.distributed_c10d as c10d

        orig = c10d.init_process_group
        guard, note = self.guard, self._note_init

        def init_process_group(*args, **kwargs):
            guard("note init", note, sys._getframe(1))
            return orig(*args, **kwargs)

        init_process_group.__wrapped__ = orig
        init_process_group.__name__ = orig.__name__
        for module in (c10d, torch.distributed):
            setattr(module, "init_process_group", init_process_group)

    def _note_init(self, frame) -> None:
        where = f"{os.path.basename(frame.f_code.co_filename)}:{frame.f_lineno}" if frame else None
        _write_json(os.path.join(self.out_dir, f"worker-init-{os.getpid()}.json"),
                    {"pid": os.getpid(), "ppid": os.getppid(), "parent_rank": self.parent_rank,
                     "where": where, "module": frame.f_globals.get("__name__") if frame else None})


def start_worker(out_dir: str, parent_rank: str):
    """The worker's watch, or None in multiprocessing's resource tracker (spawned beside the
    workers, with their environment, but no worker)."""
    if any("resource_tracker" in arg for arg in getattr(sys, "orig_argv", ())):
        return None
    worker = WorkerWatch(out_dir, parent_rank)
    worker.start()
    return worker
