"""Where the tests find the real graphs (``../shared/graphs`` beside the repository, or
``$CHERRY_GRAPHS``), and the one-line skip where they are absent."""
import pytest

from cherry.data.gnn_benchmark import graphs_dir

GRAPHS = graphs_dir()


def needs_graph(file_name: str):
    """Skip (one line) unless ``GRAPHS/file_name`` is there."""
    return pytest.mark.skipif(not (GRAPHS / file_name).is_file(), reason=f"no {file_name} in {GRAPHS}")
