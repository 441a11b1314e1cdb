"""The forkserver the torch tests start child processes from.

A spawned child imports torch anew (~3 s of CPU on the 2-core machine); a
child of this server forks from a process that already imported torch,
aioflux.torch, every backend's packages and the tests' child modules, so it
starts in milliseconds. The server is one per process and starts with the
preload list of its first user: every user asks for the same list.

A child of the server gets the server's environment (from when it
started), not the test's: give it what it needs as arguments. The server
starts without the variables that point a store at a server
(:data:`ENDPOINT_VARIABLES`), whichever test starts it: a child that
finds its store from what it was given cannot fall back on them.
"""

from __future__ import annotations

import functools
import multiprocessing
import multiprocessing.context
import multiprocessing.forkserver
import os

# A module missing here (an extra not installed) is skipped: the server
# ignores a preload that fails to import.
PRELOAD = ["torch", "torch.distributed", "aioflux.torch",
           "botocore.session", "botocore.credentials", "botocore.configprovider",
           "awscrt.auth", "awscrt.http", "lxml.etree", "azure.storage.blob",
           "tests.torch._ckpt_child", "tests.torch._dcp_worker", "tests.torch._ddp_epochs",
           "tests.torch._resume_util"]


ENDPOINT_VARIABLES = ("STORAGE_EMULATOR_HOST", "AWS_ENDPOINT_URL", "AWS_ENDPOINT_URL_S3",
                      "AZURE_STORAGE_CONNECTION_STRING", "AZURE_STORAGE_ACCOUNT_NAME",
                      "AZURE_STORAGE_ACCOUNT_KEY", "AZURE_STORAGE_KEY",
                      "AZURE_STORAGE_SAS_TOKEN")


def forkserver() -> multiprocessing.context.ForkServerContext:
    """The forkserver context, its server preloading :data:`PRELOAD` and
    running without :data:`ENDPOINT_VARIABLES`."""
    ctx = multiprocessing.get_context("forkserver")
    ctx.set_forkserver_preload(PRELOAD)
    saved = {name: os.environ.pop(name) for name in ENDPOINT_VARIABLES if name in os.environ}
    try:
        multiprocessing.forkserver.ensure_running()
    finally:
        os.environ.update(saved)
    return ctx


def with_environment(names: tuple[str, ...]) -> functools.partial[None]:
    """A DataLoader ``worker_init_fn`` that sets ``names`` in a forkserver's
    worker as they are in this process now: the environment a spawned worker
    would inherit, for a store the worker finds through it."""
    return functools.partial(_set_environment, {n: os.environ[n] for n in names
                                                if n in os.environ})


def _set_environment(values: dict[str, str], worker_id: int) -> None:
    del worker_id
    os.environ.update(values)
