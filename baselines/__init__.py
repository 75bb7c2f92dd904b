"""The systems Cherry is compared with; each an adapter with the same interface."""
