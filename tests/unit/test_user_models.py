"""A user's own layers and models: register_model, Trainer(model=), the exactness guard, check_exact."""
from __future__ import annotations

import pytest
import torch
from torch import nn
from torch.nn import functional as F

from cherry.cli import main
from cherry.execution import ExactnessError, Trainer, check_exact, guard_model
from cherry.models import BlockModel, ExactDropout, ModelSpec, build_model, register_model
from cherry.models.registry import unregister_model
from cherry.ops import aggregate_block
from cherry.spec import SpecError, make_spec


class GINLayer(nn.Module):
    """GIN: MLP((1 + eps) h_dst + sum of in-neighbours), with a dropout inside (made exact by the guard)."""

    def __init__(self, in_dim, out_dim, dropout=0.0, norm=None):
        super().__init__()
        self.eps = nn.Parameter(torch.zeros(()))
        self.mlp = nn.Sequential(nn.Linear(in_dim, out_dim), nn.ReLU(), nn.Dropout(dropout), nn.Linear(out_dim, out_dim))
        self.norm = norm

    def forward(self, block, h):
        out = self.mlp((1 + self.eps) * h[: block.num_dst] + aggregate_block(block, h, "sum"))
        return self.norm(out) if self.norm is not None else out


class WholeModel(nn.Module):
    """A model written as model(blocks, x), with a functional hook to test the guard."""

    def __init__(self, in_dim, classes, functional_dropout=False):
        super().__init__()
        self.l1, self.l2 = nn.Linear(in_dim, 16), nn.Linear(16, classes)
        self.functional_dropout = functional_dropout

    def forward(self, blocks, x):
        h = x
        for block, lin in zip(blocks.layers, (self.l1, self.l2)):
            h = lin(aggregate_block(block, h, "mean") + h[: block.num_dst])
            if self.functional_dropout:
                h = F.dropout(h, 0.5, self.training)
        return h


@pytest.fixture
def gin():
    register_model("gin-test", layer=lambda dims: GINLayer(dims.in_dim, dims.out_dim, dropout=0.3))
    yield "gin-test"
    unregister_model("gin-test")


def test_registered_layer_trains_through_spec_and_evaluates(synth_tiny, gin):
    spec = make_spec(dataset="synth-tiny", model=gin, hidden=16, fanouts=(5, 5), batch_size=300,
                     max_steps_per_epoch=2, num_microbatches=3, dropout=0.2)
    trainer = Trainer(synth_tiny, spec)
    try:
        assert isinstance(trainer.model, BlockModel)
        assert all(isinstance(l.mlp[2], ExactDropout) for l in trainer.model.layers)  # replaced by the guard
        result = trainer.run_epoch(0)
        assert result.loss > 0 and 0 <= result.valid_acc <= 1
    finally:
        trainer.close()
    with pytest.raises(SpecError, match="unknown model 'gin-nope'"):
        make_spec(dataset="synth-tiny", model="gin-nope")


def test_guarded_dropout_is_exact_and_plain_dropout_is_not(synth_tiny):
    torch.manual_seed(0)
    spec = ModelSpec("sage", synth_tiny.feature_dim, 16, synth_tiny.num_classes, 2)
    layers = [GINLayer(synth_tiny.feature_dim, 16, 0.5), GINLayer(16, synth_tiny.num_classes, 0.5)]
    model = BlockModel(spec, layers)
    report = check_exact(model, synth_tiny, num_microbatches=4, batch_size=200)
    assert report.ok and report.max_rel_diff < 1e-5
    # the same model with nn.Dropout left in place (the guard bypassed) is not exact
    from cherry.execution.verify import compare_gradients
    from cherry.planning import MemoryModel
    from cherry.sampling import NeighborSampler, sampling_generator

    for layer in model.layers:
        layer.mlp[2] = nn.Dropout(0.5)
    blocks = NeighborSampler(synth_tiny.graph, [5, 5]).sample(synth_tiny.train_idx[:200], sampling_generator(0))
    diffs = compare_gradients(model, MemoryModel.for_model(spec), blocks, synth_tiny.features, synth_tiny.labels, 4)
    assert max(d.max_rel_diff for d in diffs) > 1e-3


def test_guard_refuses_batchnorm_and_functional_dropout_in_one_line(synth_tiny):
    spec = ModelSpec("sage", synth_tiny.feature_dim, 16, synth_tiny.num_classes, 2)
    bn = BlockModel(spec, [GINLayer(synth_tiny.feature_dim, 16, norm=nn.BatchNorm1d(16)),
                           GINLayer(16, synth_tiny.num_classes)])
    with pytest.raises(ExactnessError, match=r"layers\.0\.norm \(BatchNorm1d\).*LayerNorm") as info:
        guard_model(bn)
    assert "\n" not in str(info.value)
    bn.layers[0].norm.eval()  # frozen statistics are exact
    guard_model(bn)
    with pytest.raises(ExactnessError, match="calls dropout"):
        check_exact(WholeModel(synth_tiny.feature_dim, synth_tiny.num_classes, functional_dropout=True), synth_tiny)
    assert check_exact(WholeModel(synth_tiny.feature_dim, synth_tiny.num_classes), synth_tiny).ok


def test_trainer_takes_a_model_object_and_evaluates_it_with_full_neighbours(synth_tiny):
    spec = make_spec(dataset="synth-tiny", fanouts=(5, 5), batch_size=300, max_steps_per_epoch=2,
                     num_microbatches=2, lr=0.01)
    torch.manual_seed(0)
    model = WholeModel(synth_tiny.feature_dim, synth_tiny.num_classes)
    trainer = Trainer(synth_tiny, spec, model=model)
    try:
        assert trainer.model is model
        results = [trainer.run_epoch(e) for e in range(2)]
        assert results[1].loss < results[0].loss and results[1].valid_acc > 0.2
    finally:
        trainer.close()
    with pytest.raises(TypeError, match="model must be a torch.nn.Module"):
        Trainer(synth_tiny, spec, model="gin")


def test_exact_dropout_refuses_rows_that_are_not_nodes(synth_tiny):
    from cherry.models import node_rows
    from cherry.sampling import NeighborSampler, sampling_generator

    block = NeighborSampler(synth_tiny.graph, [5]).sample(synth_tiny.train_idx[:10], sampling_generator(0)).layers[0]
    drop = ExactDropout(0.5)
    drop.step_seed = 1
    with node_rows(block, 0):
        assert drop(torch.ones(block.num_dst, 3)).shape == (block.num_dst, 3)
        with pytest.raises(ValueError, match="only node rows"):
            drop(torch.ones(block.num_edges + block.num_src, 3))


def test_cli_verify_on_a_plugin_model(synth_tiny, data_root, tmp_path, monkeypatch, capsys):
    plugin = tmp_path / "my_layers.py"
    plugin.write_text(
        "import torch\nfrom torch import nn\nfrom cherry.models import register_model\nfrom cherry.ops import aggregate_block\n"
        "class Lin(nn.Module):\n"
        "    def __init__(self, d):\n        super().__init__(); self.fc = nn.Linear(d.in_dim, d.out_dim); self.drop = nn.Dropout(0.5)\n"
        "    def forward(self, block, h):\n        return self.drop(self.fc(aggregate_block(block, h, 'max')))\n"
        "register_model('plugin-lin', layer=Lin, replace=True)\n")
    monkeypatch.setenv("CHERRY_PLUGINS", str(plugin))
    try:
        code = main(["verify", "--dataset", "synth-tiny", "--root", str(data_root), "--model", "plugin-lin",
                     "--hidden", "8", "--fanouts", "4,4", "--batch-size", "120", "--microbatches", "5"])
        assert code == 0, capsys.readouterr()
        assert "within tolerance" in capsys.readouterr().out
    finally:
        unregister_model("plugin-lin")
