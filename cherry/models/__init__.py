"""GNN models on `Blocks`: GraphSAGE (mean, pool, lstm), GCN, GAT."""
