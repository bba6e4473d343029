"""Fault injection for what this CPU machine cannot produce on demand: CUDA out-of-memory."""

import torch


def oom_above(run, limit: int, sizes: list):
    """run(loaded, batch), except that a batch of more than `limit` items raises CUDA OOM;
    every batch size tried is appended to `sizes`."""

    def flaky(loaded, batch):
        sizes.append(len(batch))
        if len(batch) > limit:
            raise torch.OutOfMemoryError("CUDA out of memory (injected)")
        return run(loaded, batch)

    return flaky
