"""ddp-migrate verify: prove a migration by running it, before the cluster does.

`ddp-migrate verify SCRIPT [-- ARGS]` runs SCRIPT as it is on disk, with the user's data,
arguments and working directory, under `python -m torch.distributed.run --standalone
--nproc_per_node=N` (gloo on CPU with CUDA hidden, or the visible GPUs), through a probe put
first on the workers' PYTHONPATH (probe/sitecustomize.py; the user's PYTHONPATH follows it and a
sitecustomize it shadows still runs). ddp-migrate's own process never imports torch: the probe's
records come back as JSON files.

How the run is kept short, without editing the script:

  * every pass over a DataLoader ends after K batches (--steps-per-epoch, default 3): the index
    sampler raises StopIteration, so the loop ends as at the end of its data;
  * an epoch is a pass over the training loader: the DataLoader whose batches are followed by
    optimizer steps (one with a DistributedSampler first; loaders over the same dataset count as
    one). When pass E+1 would start (--epochs, default 2), `iter(loader)` raises the probe's
    VerifyStop, a SystemExit with status 0: `except Exception` in the script does not catch it,
    its `finally` blocks (destroy_process_group) run, the probe writes its record at exit and the
    process exits 0. Every rank takes the same steps, so every rank stops at the same pass. A
    script whose own loop ends earlier simply ends; code after its loop runs only then;
  * a run still going after --timeout seconds is ended: each probed process dumps its stack
    (faulthandler, on SIGUSR1) and the run's whole process group is killed.

Modules, each importing only those above it:

  runner.py   Plan -> Run: the command, the environment, the wait, the end of the process group
  stacks.py   faulthandler dumps -> where each process was
  keys.py     torch.save'd objects -> their key structure, and how two differ
  checks/     Observed runs -> one Row per check (PASS, FAIL, SKIP, with evidence)
  report.py   Rows, ranks, timings -> Report (exit status, last line, JSON)
  command.py  the click command (migrator.cli.main dispatches `verify` to it); text via render.py
"""
