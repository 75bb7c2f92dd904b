"""`benchmarks.dropout_memory` reports the step's whole peak: a capacity of the reported peak fits the
step and one MiB less does not (the executor resets the tracker's running peak between windows)."""
import torch

from tests.real_graphs import GRAPHS, needs_graph

from benchmarks import dropout_memory as dm


@needs_graph(dm.GRAPH_FILE)
def test_reported_peak_is_the_capacity_the_step_needs(tmp_path):
    from cherry.sampling import NeighborSampler

    ds = dm.load_graph_npz(GRAPHS / dm.GRAPH_FILE, 4, 0, root=tmp_path)
    blocks = NeighborSampler(ds.graph, [-1, -1]).sample(ds.train_idx, torch.Generator().manual_seed(0))
    for p in (0.0, 0.5):
        peak = dm.one_step(ds, blocks, p)["peak_bytes"]
        assert dm.one_step(ds, blocks, p, peak + 64 * 1024)["fits"], f"p={p}: the reported peak does not fit"
        assert not dm.one_step(ds, blocks, p, peak - 2**20)["fits"], f"p={p}: a MiB below the peak fits"
