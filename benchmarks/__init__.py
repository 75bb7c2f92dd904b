"""Side-by-side benchmarks behind `cherry bench <name>`; each module exposes ``register(subparsers)``."""
