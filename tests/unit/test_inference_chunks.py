"""Layer-wise evaluation halves its chunk from the one that ran out of memory: a default chunk far
above the node count costs one failed attempt, and the logits do not depend on the chunking."""
import torch

from cherry.data.graph import Graph
from cherry.models.inference import layerwise_inference


class _Mean(torch.nn.Module):
    """A one-layer mean over in-neighbours that runs out of memory above ``limit`` destinations."""

    def __init__(self, limit: int) -> None:
        super().__init__()
        self.spec = type("Spec", (), {"num_layers": 1, "uses_graph": True})()
        self.limit, self.tried = limit, []

    def forward_layer(self, layer, block, h):
        self.tried.append(block.num_dst)
        if block.num_dst > self.limit:
            raise torch.OutOfMemoryError("emulated")
        dst = torch.repeat_interleave(torch.arange(block.num_dst), block.in_degrees())
        out = torch.zeros(block.num_dst, h.shape[1]).index_add_(0, dst, h.index_select(0, block.indices))
        return out / block.in_degrees().clamp(min=1).unsqueeze(1)


def test_the_halving_starts_from_the_failed_chunk():
    n = 100
    gen = torch.Generator().manual_seed(0)
    graph = Graph.from_edges(torch.randint(0, n, (400,), generator=gen), torch.randint(0, n, (400,), generator=gen), n)
    features = torch.randn(n, 4, generator=gen)
    whole = layerwise_inference(_Mean(n), graph, features)
    model = _Mean(20)
    chunked = layerwise_inference(model, graph, features)  # default chunk: 65,536 destinations
    assert torch.allclose(whole, chunked)
    # 100 (all), 50 and 25 fail once each, then 12-row chunks; halving the default would fail 10 more times
    assert model.tried[:4] == [100, 50, 25, 12] and max(model.tried[3:]) <= 20
