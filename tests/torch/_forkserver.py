"""The forkserver the torch tests start child processes from.

A spawned child imports torch anew (~3 s of CPU on the 2-core machine); a
child of this server forks from a process that already imported torch,
aioflux.torch, every backend's packages and the tests' child modules, so it
starts in milliseconds. The server is one per process and starts with the
preload list of its first user: every user asks for the same list.

A child of the server gets the server's environment (from when it
started), not the test's: give it what it needs as arguments.
"""

from __future__ import annotations

import multiprocessing
import multiprocessing.context

# A module missing here (an extra not installed) is skipped: the server
# ignores a preload that fails to import.
PRELOAD = ["torch", "torch.distributed", "aioflux.torch",
           "botocore.session", "botocore.credentials", "botocore.configprovider",
           "awscrt.auth", "awscrt.http", "lxml.etree", "azure.storage.blob",
           "tests.torch._ckpt_child", "tests.torch._dcp_worker", "tests.torch._ddp_epochs",
           "tests.torch._resume_util"]


def forkserver() -> multiprocessing.context.ForkServerContext:
    """The forkserver context, its server preloading :data:`PRELOAD`."""
    ctx = multiprocessing.get_context("forkserver")
    ctx.set_forkserver_preload(PRELOAD)
    return ctx
