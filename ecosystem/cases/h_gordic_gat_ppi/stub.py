# Stub for gordicaleksa/pytorch-GAT training_script_ppi.py (run by the probe in every process before the script).
#
# Replaces only what comes from outside the repository's code:
#   * the PPI data set (utils/data_loading.py downloads https://data.dgl.ai/dataset/ppi.zip into data/ppi the first
#     time, when data/ppi does not exist): the files that zip holds are written here, small, seeded and
#     synthetic, into data/ppi (relative to the start folder, the repository root) before the script runs, so
#     the script's own reader loads them and the download branch is not taken:
#       {split}_feats.npy (NS, 50) float32, {split}_labels.npy (NS, 121) 0/1 int64,
#       {split}_graph_id.npy (NS,) int64, {split}_graph.json (NetworkX node-link data)
#     for split in train (8 graphs, ids 1..8), valid (2 graphs, ids 9..10), test (2 graphs, ids 11..12); each
#     graph has 16..28 nodes with consecutive global node ids, a self edge on every node (as PPI has) and ~3
#     random undirected edges per node. The node-link file carries its edge list under both "links" (the key in
#     the real DGL file, read by networkx < 3.4) and "edges" (the key networkx >= 3.4, installed here, reads by
#     default; with only "links" the upstream reader raises KeyError: 'edges' on the real file too).
#     Every process writes the same bytes through a temporary name and os.replace, so concurrent ranks are safe.
#   * the third-party package tensorboard (not installed; utils/constants.py builds a module-level
#     SummaryWriter()): a stand-in module "torch.utils.tensorboard" whose SummaryWriter ignores every call and
#     writes nothing.
#   * the third-party package GitPython ("git", not installed): Repo(search_parent_directories=True)
#     .head.object.hexsha is the upstream commit this tree was taken from (the scratch folders are not git
#     checkouts).
#   * the third-party package python-igraph ("igraph", not installed): an empty stand-in module;
#     utils/visualizations.py imports it at the top, only --should_visualize (not used) calls it.
import json
import os
import sys
import types

UPSTREAM_COMMIT = "39c8f0ee634477033e8b1a6e9a6da3c7ed71bbd1"
SPLITS = (("train", 1, 8), ("valid", 9, 2), ("test", 11, 2))
NUM_FEATURES, NUM_CLASSES = 50, 121


def _write_atomic(path, write):
    tmp = "%s.tmp%d" % (path, os.getpid())
    write(tmp)
    os.replace(tmp, path)


def _make_ppi(root):
    import numpy as np

    os.makedirs(root, exist_ok=True)
    rng = np.random.RandomState(1234)
    for split, first_id, n_graphs in SPLITS:
        feats, labels, ids, edges = [], [], [], []
        offset = 0
        for g in range(n_graphs):
            n = int(rng.randint(16, 29))
            feats.append(rng.normal(0, 1, size=(n, NUM_FEATURES)).astype(np.float32))
            labels.append((rng.uniform(size=(n, NUM_CLASSES)) < 0.3).astype(np.int64))
            ids.append(np.full(n, first_id + g, dtype=np.int64))
            pairs = {(i, i) for i in range(n)}
            for _ in range(3 * n):
                a, b = rng.randint(0, n, size=2)
                if a != b:
                    pairs.add((int(min(a, b)), int(max(a, b))))
            edges += [{"source": offset + a, "target": offset + b} for a, b in sorted(pairs)]
            offset += n
        graph = {"directed": False, "multigraph": False, "graph": {},
                 "nodes": [{"id": i} for i in range(offset)], "links": edges, "edges": edges}
        base = os.path.join(root, split)

        def _npy(arr):
            def write(tmp):
                with open(tmp, "wb") as fh:
                    np.save(fh, arr)
            return write

        def _json(tmp):
            with open(tmp, "w") as fh:
                json.dump(graph, fh)

        _write_atomic(base + "_feats.npy", _npy(np.concatenate(feats)))
        _write_atomic(base + "_labels.npy", _npy(np.concatenate(labels)))
        _write_atomic(base + "_graph_id.npy", _npy(np.concatenate(ids)))
        _write_atomic(base + "_graph.json", _json)


class SummaryWriter(object):
    def __init__(self, log_dir=None, *args, **kwargs):
        self.log_dir = log_dir

    def _ignore(self, *args, **kwargs):
        pass

    add_scalar = add_scalars = add_image = add_images = add_histogram = add_text = flush = close = _ignore


def _add_tensorboard(torch):
    tb = types.ModuleType("torch.utils.tensorboard")
    tb.__file__ = __file__
    tb.SummaryWriter = SummaryWriter
    sys.modules["torch.utils.tensorboard"] = tb


class _Repo(object):
    def __init__(self, path=None, search_parent_directories=False, **kwargs):
        self.head = types.SimpleNamespace(object=types.SimpleNamespace(hexsha=UPSTREAM_COMMIT))


_git = types.ModuleType("git")
_git.__file__ = __file__
_git.Repo = _Repo
sys.modules["git"] = _git

_igraph = types.ModuleType("igraph")
_igraph.__file__ = __file__
sys.modules["igraph"] = _igraph

when_imported("torch", _add_tensorboard)  # noqa: F821 (provided by the probe)
_make_ppi(os.path.join("data", "ppi"))
