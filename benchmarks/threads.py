"""`keeps_threads`: a benchmark that sets torch's intra-op threads (``--threads``) gives the caller's
setting back when it returns, so a caller in the same process (a test, a notebook) keeps its own."""
from __future__ import annotations

import functools

import torch


def keeps_threads(run):
    """``run`` with torch's thread count restored after it, however it ends."""
    @functools.wraps(run)
    def wrapped(*args, **kwargs):
        threads_before = torch.get_num_threads()
        try:
            return run(*args, **kwargs)
        finally:
            torch.set_num_threads(threads_before)
    return wrapped
