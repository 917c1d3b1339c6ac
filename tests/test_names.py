"""The nn.Module API list is kept in the tool (it never imports torch); torch checks it here."""
import pytest

from migrator import names

torch = pytest.importorskip("torch")


def test_nn_module_api_covers_dir_of_nn_module():
    public_api = {n for n in dir(torch.nn.Module) if not (n.startswith("__") and n.endswith("__"))}
    missing = public_api - names.NN_MODULE_API
    assert not missing, f"add to names.NN_MODULE_API: {sorted(missing)}"


def test_instance_attributes_of_a_module_are_known():
    layer = torch.nn.Linear(2, 2)
    own = {"in_features", "out_features", "weight", "bias"}  # Linear's own, not nn.Module's
    missing = set(vars(layer)) - own - names.NN_MODULE_API
    assert not missing, f"add to names.NN_MODULE_API: {sorted(missing)}"


def test_ddp_public_api_stays_on_the_wrapper():
    ddp = torch.nn.parallel.DistributedDataParallel
    for name in ("no_sync", "join", "register_comm_hook", "module"):
        assert hasattr(ddp, name) or name == "module"
        assert name in names.NN_MODULE_API
