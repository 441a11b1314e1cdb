"""The settings a filesystem takes: aioflux's, fsspec's, and the ones code
written for gcsfs and s3fs passes.

After ``register(["s3"])``, ``fsspec.filesystem("s3", endpoint_url=...)``
and pandas' ``storage_options`` reach aioflux with s3fs's names. fsspec
keeps any keyword it is given, so they were dropped without a word: a
store on MinIO went to AWS, to a bucket of the same name if the
credentials reached one. The endpoint and region are taken under their
peers' names, and so is the billing of requester-pays buckets (aioflux's
``user_project=`` on GCS and ``requester_pays=True`` on S3; gcsfs's
``requester_pays=True`` with ``project=``, or ``requester_pays="project"``;
s3fs's ``requester_pays=True``); any other setting is refused, saying what
to use instead.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from .._core.checks.arguments import Credentials
from .._core.errors import InvalidArgument

__all__ = ["FSSPEC_OPTIONS", "Settings", "settings_of"]

# fsspec's own (the instance cache, the listings cache, gather batches).
FSSPEC_OPTIONS = frozenset({"skip_instance_cache", "use_listings_cache",
                            "listings_expiry_time", "max_paths", "batch_size"})

_CREDENTIALS_HINT = {
    "gs": "GCS credentials come from credentials= (a google.auth Credentials, a bearer "
          "token, 'anonymous') or Application Default Credentials",
    "s3": "AWS credentials come from the AWS chain (AWS_ACCESS_KEY_ID / "
          "AWS_SECRET_ACCESS_KEY, AWS_PROFILE, instance metadata)",
    "az": "Azure credentials come from the Azure settings (AZURE_STORAGE_CONNECTION_STRING, "
          "an account key, a SAS, Entra ID)",
    "file": "local files take no credentials",
}


@dataclass(frozen=True)
class Settings:
    """What a filesystem's store is built with, and fsspec's own options."""

    endpoint: str | None
    credentials: Credentials
    region: str | None
    fsspec: dict[str, Any]
    #: The project GCS requests bill (requester-pays buckets), or None.
    user_project: str | None = None
    #: Whether S3 requests accept requester-pays charges (None: the environment's).
    requester_pays: bool | None = None


def _one(name: str, first: Any, second: Any, what: str) -> Any:
    if first is not None and second is not None and first != second:
        raise InvalidArgument(f"AiofluxFileSystem: {what} given twice, as {first!r} and "
                              f"{second!r} ({name})")
    return first if first is not None else second


def settings_of(scheme: str, endpoint: str | None, credentials: Credentials,
                region: str | None, options: dict[str, Any]) -> Settings:
    """Split a filesystem's keyword arguments into its store's settings and fsspec's.

    Args:
        scheme: the store.
        endpoint: ``endpoint=``.
        credentials: ``credentials=``.
        region: ``region=``.
        options: every other keyword argument.

    Returns:
        The settings.

    Raises:
        InvalidArgument: a setting aioflux does not take, naming what to use.
    """
    rest = dict(options)
    endpoint = _one("endpoint_url", endpoint, rest.pop("endpoint_url", None), "the endpoint")
    client_kwargs = rest.pop("client_kwargs", None) or {}
    if not isinstance(client_kwargs, dict):
        raise InvalidArgument(f"AiofluxFileSystem: client_kwargs must be a dict, got "
                              f"{type(client_kwargs).__name__}")
    client_kwargs = dict(client_kwargs)
    endpoint = _one("client_kwargs", endpoint, client_kwargs.pop("endpoint_url", None),
                    "the endpoint")
    region = _one("client_kwargs", region, client_kwargs.pop("region_name", None),
                  "the region")
    if region is not None and scheme != "s3":
        raise InvalidArgument(f"AiofluxFileSystem: a region is an S3 setting, not {scheme}'s")
    if client_kwargs:
        raise InvalidArgument(f"AiofluxFileSystem: client_kwargs "
                              f"{', '.join(sorted(map(repr, client_kwargs)))} are not "
                              "aioflux settings (it takes endpoint_url and region_name)")
    token = rest.pop("token", None)
    if scheme == "gs" and token in ("anon", "google_default"):
        # gcsfs's names of no credentials and of Application Default Credentials.
        credentials = _one("token", credentials, "anonymous" if token == "anon" else None,
                           "the credentials")
    elif token is not None:
        rest["token"] = token
    if rest.pop("anon", False) is not False:
        rest["anon"] = True
    user_project, requester_pays = _billing(scheme, rest)
    unknown = sorted(k for k in rest if k not in FSSPEC_OPTIONS)
    if unknown:
        raise InvalidArgument(
            f"AiofluxFileSystem({scheme!r}): {', '.join(map(repr, unknown))} "
            f"{'is not a setting' if len(unknown) == 1 else 'are not settings'} of aioflux "
            f"(it takes config=, endpoint= or endpoint_url=, credentials=, region=, and "
            f"fsspec's {', '.join(sorted(FSSPEC_OPTIONS))}); {_CREDENTIALS_HINT[scheme]}")
    return Settings(endpoint, credentials, region, rest, user_project, requester_pays)


def _billing(scheme: str, rest: dict[str, Any]) -> tuple[str | None, bool | None]:
    """Take the settings of requester-pays buckets out of ``rest``: the
    project GCS requests bill, and whether S3 requests accept the charges.

    gcsfs's ``requester_pays=True`` bills its ``project=``, and
    ``requester_pays="p"`` bills ``p``; s3fs's ``requester_pays=True`` is
    aioflux's own. Left in ``rest`` (and refused as unknown): the other
    stores' names, and gcsfs's ``project=`` without ``requester_pays=True``.

    Raises:
        InvalidArgument: a value of the wrong type, or the project given twice.
    """
    if scheme == "s3" and "requester_pays" in rest:
        value = rest.pop("requester_pays")
        if not isinstance(value, bool):
            raise InvalidArgument(f"AiofluxFileSystem('s3'): requester_pays must be True or "
                                  f"False, got {value!r:.80}")
        return None, value
    if scheme != "gs":
        return None, None
    user_project = rest.pop("user_project", None)
    if "requester_pays" in rest:
        value = rest.pop("requester_pays")
        if value is True:
            project = rest.pop("project", None)
            if project is None:
                raise InvalidArgument(
                    "AiofluxFileSystem('gs'): requester_pays=True bills project=, which is "
                    "not given; pass project='my-project' with it, requester_pays='my-project' "
                    "or user_project='my-project'")
            user_project = _one("requester_pays", user_project, project, "the user project")
        elif isinstance(value, str) and value:
            user_project = _one("requester_pays", user_project, value, "the user project")
        elif value is not False and value is not None:
            raise InvalidArgument(f"AiofluxFileSystem('gs'): requester_pays must be True (with "
                                  f"project=), False or the project to bill, got {value!r:.80}")
    if user_project is not None and not isinstance(user_project, str):
        raise InvalidArgument(f"AiofluxFileSystem('gs'): user_project must be the project to "
                              f"bill, got {user_project!r:.80}")
    return user_project, None
