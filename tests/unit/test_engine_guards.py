"""Engine entry points refuse values the native code or METIS cannot take, and a `Dataset` refuses
labels and splits training would trip over, each with one ValueError line naming the value."""
import pytest
import torch

from cherry.cli import main
from cherry.data import Dataset, Graph
from cherry.ops import sampling as ops_sampling
from cherry.planning import locality_rank
from cherry.sampling import NeighborSampler
from tests.unit.graphs import random_dataset

HUGE_FANOUT = 99999999999999999999


@pytest.fixture(scope="module")
def dataset():
    return random_dataset(num_nodes=200)


@pytest.mark.parametrize("fanout", [HUGE_FANOUT, 2**63, -2, 0])
def test_fanout_outside_native_range(fanout, dataset):
    with pytest.raises(ValueError) as info:
        NeighborSampler(dataset.graph, [5, fanout])
    assert str(fanout) in str(info.value) and "\n" not in str(info.value)
    seeds = torch.arange(4)
    with pytest.raises(ValueError, match="fanout must be positive or -1"):
        ops_sampling.sample_neighbors(dataset.graph.indptr, dataset.graph.indices, seeds, fanout, 0)


def test_largest_native_fanout_takes_every_neighbour(dataset):
    seeds = torch.arange(8)
    widest = NeighborSampler(dataset.graph, [2**63 - 1]).sample(seeds, torch.Generator().manual_seed(0))
    everything = NeighborSampler(dataset.graph, [-1]).sample(seeds, torch.Generator().manual_seed(0))
    assert torch.equal(widest.layers[0].indptr, everything.layers[0].indptr)


@pytest.mark.parametrize("seed", [18446744073709551616, 2**63, -1, True, 1.5, "0"])
@pytest.mark.parametrize("method", ["metis", "random"])
def test_ordering_seed_outside_range(seed, method, dataset):
    with pytest.raises(ValueError) as info:
        locality_rank(dataset.graph, method, seed=seed)
    assert repr(seed) in str(info.value) and "[0, 2**63 - 1]" in str(info.value)


def test_largest_ordering_seed_is_accepted(dataset):
    rank = locality_rank(dataset.graph, "metis", nodes_per_part=50, seed=2**63 - 1)
    assert torch.equal(torch.sort(rank).values, torch.arange(dataset.graph.num_nodes))


def _tiny(**changes):
    g = Graph.from_edges(torch.tensor([0, 1, 2]), torch.tensor([1, 2, 0]), 4)
    ok = dict(name="x", graph=g, features=torch.zeros(4, 2), labels=torch.tensor([0, 1, 1, -1]),
              train_idx=torch.tensor([0, 1]), valid_idx=torch.tensor([2]), test_idx=torch.tensor([], dtype=torch.int64),
              num_classes=2)
    return Dataset(**{**ok, **changes})


BAD_DATASETS = {
    "label-equal-to-num-classes": (dict(labels=torch.tensor([0, 2, 1, 0])), r"node 1 has label 2; expected a class in \[0, 2\)"),
    "label-below-missing-value": (dict(labels=torch.tensor([0, 1, -5, 0])), r"node 2 has label -5"),
    "split-node-unlabelled": (dict(valid_idx=torch.tensor([3])), r"valid split holds node 3, which is unlabelled"),
    "split-out-of-range": (dict(test_idx=torch.tensor([4])), r"test split names node 4; expected node ids in \[0, 4\)"),
    "split-negative": (dict(train_idx=torch.tensor([-1, 0])), r"train split names node -1"),
    "split-duplicate": (dict(train_idx=torch.tensor([0, 0])), r"train split lists node 0 2 times"),
    "split-overlap": (dict(test_idx=torch.tensor([1])), r"test split shares node 1 with the train split"),
    "train-empty": (dict(train_idx=torch.tensor([], dtype=torch.int64)), r"train split is empty"),
    "num-classes-float": (dict(num_classes=2.0), r"num_classes must be an int >= 1, got 2\.0"),
}


@pytest.mark.parametrize("case", sorted(BAD_DATASETS))
def test_dataset_refuses_what_training_would_trip_over(case):
    changes, expected = BAD_DATASETS[case]
    with pytest.raises(ValueError, match=expected):
        _tiny(**changes)


def test_unlabelled_node_outside_splits_is_valid():
    assert _tiny().labels[3] == -1


@pytest.mark.parametrize("argv, expected", [
    (["--seed", "18446744073709551616", "--microbatches", "2"], "18446744073709551616"),
    (["--fanouts", f"{HUGE_FANOUT},5", "--microbatches", "1"], str(HUGE_FANOUT)),
])
def test_train_cli_reports_engine_guard_in_one_line(argv, expected, synth_tiny, data_root, capsys):
    code = main(["train", "--dataset", "synth-tiny", "--root", str(data_root), "--epochs", "1",
                 "--max-steps", "1", "--no-eval", "--quiet", *argv])
    err = capsys.readouterr().err
    assert code == 2 and err.startswith("cherry: error: ") and err.count("\n") == 1 and expected in err
