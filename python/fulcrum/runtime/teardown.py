"""The end of a distributed rank's process."""

import os
import sys

import torch.distributed as dist


def end_rank(exit_code: int = 0) -> None:
    """Waits for every rank, destroys the default process group and leaves the process without the
    interpreter's teardown.

    Call it last on every rank. With gloo, the interpreter's teardown can destroy a joinable background thread
    and abort the process ("terminate called without an active exception") after its work is done and written:
    torchrun then reports the rank failed. Leaving with ``os._exit`` after flushing skips that teardown."""
    if dist.is_initialized():
        dist.barrier()  # no rank tears its connections down while another still uses them
        dist.destroy_process_group()
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(exit_code)
