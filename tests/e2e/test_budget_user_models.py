"""Users' DGL and PyG models within the budget on a real graph, every epoch, the first included.

Amazon-Computers (767 features; a random 20%/10% split), 2 layers, fanouts 10, 10, batches of 512,
an emulated device (`benchmarks.below_seed`): a DGL GAT (``dgl.nn.GATConv``, 4 heads, through
`from_dgl`) and a PyG GAT (through `from_pyg`), both with input dropout 0.5, priced by probes, at
five capacities from roomy (fractions of their own K = 1 peak) to below one seed (the budget under
what one seed per micro-batch peaks at unstreamed) never peak above the budget in any epoch, with no
out-of-memory re-plan. Below one seed the planner streams the input layer (its rows and their dropped
copy are what one seed's plain peak holds beyond the parameters' and the optimizer's bytes) and the
run trains. A DGL SAGE-pool at a capacity 10% above its K = 1 peak runs K <= 2 from its second epoch
on. Each test skips in one line where the graph or the model's library is absent.
About 4-5 minutes of CPU: marked slow.
"""
from __future__ import annotations

import pytest

from benchmarks import below_seed as bench
from tests.real_graphs import GRAPHS, needs_graph

FILE = "amazon_computers.npz"


@pytest.fixture(scope="module")
def computers(tmp_path_factory):
    from cherry.data import load_dataset

    return load_dataset(str(GRAPHS / FILE) + bench.SPLIT, str(tmp_path_factory.mktemp("data")))


def _available(name: str) -> None:
    from benchmarks.user_models import available

    ok, why = available(name)
    if not ok:
        pytest.skip(why)


@pytest.mark.slow
@needs_graph(FILE)
@pytest.mark.parametrize("name", ["dgl-gat", "pyg-gat"])
def test_user_gat_never_exceeds_the_budget_in_any_epoch(computers, name):
    _available(name)
    peaks = bench.reference_peaks(computers, name)
    points = bench.sweep(computers, name, peaks)
    failures = [f"{p.of} {p.fraction}: epoch {e} peak {over:.3f} of the budget, {oom} re-plans"
                for p in points for e, (over, oom) in enumerate(zip(p.peak_over_budget, p.oom_recoveries))
                if over > 1.0 or oom]
    assert not failures, (failures, points)
    below = [p for p in points if p.of == "seed"]
    assert len(below) == 2 and all(p.budget_bytes < peaks["seed"] for p in below), (peaks, below)
    # below one plain seed: trained (split, streamed, every loss finite)
    assert all(min(p.max_k) > 1 and p.streamed_steps == p.num_steps and p.losses_finite for p in below), below


@pytest.mark.slow
@needs_graph(FILE)
def test_dgl_sage_pool_ten_percent_above_its_k1_peak_runs_at_most_k2_from_epoch_one(computers):
    _available("dgl-sage-pool")
    k1 = bench.peak(bench.run(computers, "dgl-sage-pool", None, 1, num_microbatches=1)[0][0])
    epochs, budget = bench.run(computers, "dgl-sage-pool", int(1.1 * k1), 3)
    ks = [[s.num_microbatches for s in steps] for steps in epochs]
    assert all(k <= 2 for steps in ks[1:] for k in steps), ks
    assert all(bench.peak(steps) <= budget for steps in epochs), [bench.peak(s) / budget for s in epochs]
