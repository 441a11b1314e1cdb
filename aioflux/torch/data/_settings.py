"""``DatasetSettings``: where every dataset reads from and how, declared once.

The four datasets took these as 6-13 keywords each, declared again in every
constructor; those keywords still work, each use warning (see
:func:`resolve_settings`), until aioflux 0.3.0.
"""

from __future__ import annotations

import dataclasses
import os
from collections.abc import Collection
from typing import Any

from ..._core.checks.arguments import Credentials, check_bool, check_instance, check_int
from ..._core.deprecation import warn_deprecated
from ..._core.errors import InvalidArgument
from ..._core.settings.config import ClientConfig, RetryPolicy
from ..._engines.download import DownloadOptions
from ..._engines.hedge import DEFAULT_HEDGE_BUDGET, HedgeAfter, check_hedge

__all__ = ["SHARD_KEYWORDS", "DatasetSettings", "object_settings", "refuse_unknown",
           "resolve_settings"]


@dataclasses.dataclass(frozen=True)
class DatasetSettings:
    """A dataset's store, download planner and disk cache; it pickles for
    ``spawn`` workers, which rebuild the store from it.

    ``DatasetSettings(endpoint=..., cache_dir="/mnt/cache")`` is given as
    ``settings=`` to any dataset. The shard datasets read by ranged GETs
    under ``config.retry``: they refuse ``list_retry``, ``download_retry``
    and ``download_options``.

    Args:
        config: ClientConfig (concurrency, timeouts, retry) of the
            per-process store.
        endpoint: API root (default ``STORAGE_EMULATOR_HOST`` or the store's).
        credentials: as for :class:`~aioflux.GcsStore` (must pickle for spawn).
        list_retry: retry policy of listing and stats (default ``config.retry``).
        download_retry: retry policy of downloads (default ``config.retry``).
        download_options: the download planner's settings (composing, ranged
            reads).
        hedge_after: a second GET for a read not done after this many
            seconds, or ``"auto"`` (the dataset's p95 read latency once 20
            reads are in), the first checked answer winning; at most 5% more
            requests. None: no hedging (``download_options``' own, if set).
        cache_dir: a local disk cache across epochs, shared by every worker
            and rank on the machine (keyed by object version, crc32c-checked);
            None: no cache.
        cache_limit: most bytes in ``cache_dir`` (least recently used evicted);
            None: no limit.
    """

    config: ClientConfig | None = None
    endpoint: str | None = None
    credentials: Credentials = None
    list_retry: RetryPolicy | None = None
    download_retry: RetryPolicy | None = None
    download_options: DownloadOptions | None = None
    hedge_after: HedgeAfter = None
    cache_dir: str | os.PathLike[str] | None = None
    cache_limit: int | None = None

    def check(self, op: str, *, shards: bool = False) -> None:
        """Check the settings' types (the endpoint and cache are checked
        where they are built).

        Args:
            op: the dataset, for messages.
            shards: for a shard dataset (the per-object planner's settings refused).

        Raises:
            InvalidArgument: a setting of the wrong type, or one the shard
                datasets do not use.
        """
        check_instance(op, "config", self.config, ClientConfig, optional=True)
        check_instance(op, "list_retry", self.list_retry, RetryPolicy, optional=True)
        check_instance(op, "download_retry", self.download_retry, RetryPolicy, optional=True)
        check_instance(op, "download_options", self.download_options, DownloadOptions,
                       optional=True)
        try:
            check_hedge(op, self.hedge_after, DEFAULT_HEDGE_BUDGET)
        except ValueError as exc:
            raise InvalidArgument(str(exc)) from None
        if shards:
            for name in ("list_retry", "download_retry", "download_options"):
                if getattr(self, name) is not None:
                    raise InvalidArgument(f"{op}: settings.{name} is for the per-object "
                                          "datasets; shards are read by ranged GETs "
                                          "under settings.config.retry")


# The planner's fields the per-object datasets once took as keywords.
_PLANNER_KEYWORDS = ("disable_compose", "max_composite_object_size", "compose_threshold")
# The per-object datasets' old keywords (``data_format_fn`` is ``transform``).
_OBJECT_KEYWORDS = frozenset(
    [f.name for f in dataclasses.fields(DatasetSettings)] + list(_PLANNER_KEYWORDS))
#: The shard datasets' old keywords.
SHARD_KEYWORDS = frozenset(
    ["config", "endpoint", "credentials", "hedge_after", "cache_dir", "cache_limit"])


def resolve_settings(op: str, settings: DatasetSettings | None, keywords: dict[str, Any],
                     old: Collection[str], *, stacklevel: int = 4) -> DatasetSettings:
    """``settings`` with the old keywords in ``keywords`` applied over it.

    Each old keyword found is removed from ``keywords`` and warns, naming
    its place in ``settings=``; what is left is not a setting.

    Args:
        op: the dataset call as the user wrote it, for messages.
        settings: the ``settings=`` given, or None.
        keywords: the call's other keywords (the old ones are taken out).
        old: the old keywords this dataset took.
        stacklevel: the frame the warnings name (the caller's caller).

    Returns:
        The settings.

    Raises:
        InvalidArgument: ``settings`` is not a DatasetSettings, or a planner
            keyword of the wrong type.
    """
    check_instance(op, "settings", settings, DatasetSettings, optional=True)
    settings = settings or DatasetSettings()
    fields: dict[str, Any] = {}
    planner: dict[str, Any] = {}
    for name in [k for k in keywords if k in old]:
        value = keywords.pop(name)
        if name in _PLANNER_KEYWORDS:
            new = f"settings=DatasetSettings(download_options=DownloadOptions({name}=...))"
            if value is not None:
                planner[name] = value
        else:
            new = f"settings=DatasetSettings({name}=...)"
            fields[name] = value
        warn_deprecated(f"{op}({name}=...)", new, stacklevel=stacklevel)
    if planner:
        check_bool(op, "disable_compose", planner.get("disable_compose"), optional=True)
        for name in ("max_composite_object_size", "compose_threshold"):
            check_int(op, name, planner.get(name), optional=True)
        options = fields.get("download_options", settings.download_options)
        check_instance(op, "download_options", options, DownloadOptions, optional=True)
        fields["download_options"] = dataclasses.replace(options or DownloadOptions(), **planner)
    return dataclasses.replace(settings, **fields) if fields else settings


def refuse_unknown(op: str, keywords: dict[str, Any]) -> None:
    """Refuse keywords no setting took, as Python refuses an unknown keyword.

    Raises:
        TypeError: naming the first of them.
    """
    if keywords:
        raise TypeError(f"{op}() got an unexpected keyword argument {next(iter(keywords))!r}")


def object_settings(op: str, settings: DatasetSettings | None, transform: Any,
                    keywords: dict[str, Any]) -> tuple[DatasetSettings, Any]:
    """A per-object dataset's settings and transform from its call.

    Args:
        op: the dataset call, for messages.
        settings: ``settings=``.
        transform: ``transform=``.
        keywords: the call's other keywords: old settings, or dataflux's
            ``data_format_fn`` (``transform``'s old name); they warn.

    Returns:
        ``(settings, transform)``.

    Raises:
        InvalidArgument: a setting of the wrong type, or both ``transform``
            and ``data_format_fn``.
        TypeError: a keyword that is neither.
    """
    settings = resolve_settings(op, settings, keywords, _OBJECT_KEYWORDS, stacklevel=5)
    if "data_format_fn" in keywords:
        data_format_fn = keywords.pop("data_format_fn")
        warn_deprecated(f"{op}(data_format_fn=...)", "transform=...", stacklevel=4)
        if transform is not None and data_format_fn is not None:
            raise InvalidArgument(f"{op}: pass transform or data_format_fn (its dataflux "
                                  "name), not both")
        transform = transform if data_format_fn is None else data_format_fn
    refuse_unknown(op, keywords)
    if transform is not None and not callable(transform):
        raise InvalidArgument(f"{op}: transform must be callable, got {type(transform).__name__}")
    return settings, transform
