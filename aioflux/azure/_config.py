"""Where an Azure store points and what it authenticates with, the Azure way.

In this order: the store's arguments; a connection string (``connection_string=``
or ``AZURE_STORAGE_CONNECTION_STRING``: ``AccountName``, ``AccountKey``,
``BlobEndpoint``, ``SharedAccessSignature``, ``DefaultEndpointsProtocol``,
``EndpointSuffix``, or ``UseDevelopmentStorage=true`` for Azurite); then
``AZURE_STORAGE_ACCOUNT_NAME`` with ``AZURE_STORAGE_ACCOUNT_KEY`` (or
``AZURE_STORAGE_KEY``) or ``AZURE_STORAGE_SAS_TOKEN``, as adlfs and the
Azure CLI read them. Without a key or a SAS, requests carry a Microsoft
Entra ID bearer token (``azure-identity``'s ``DefaultAzureCredential`` or
the credential given), over HTTPS only.

No message here quotes a connection string, a key or a SAS: a malformed
one is named by the field that is wrong. Its blob endpoint (``BlobEndpoint``,
or the one ``DefaultEndpointsProtocol`` and ``EndpointSuffix`` build) is
checked as ``endpoint=`` is: requests carry the SAS its key signs there.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from urllib.parse import urlsplit

from .._core.checks.arguments import endpoint_url
from .._core.errors import InvalidArgument, InvalidURL
from .._core.secrets import scrub

__all__ = ["AZURITE_ACCOUNT", "AZURITE_KEY", "Settings", "resolve"]

#: Azurite's development account and its well-known key (public, in
#: Microsoft's documentation): what ``UseDevelopmentStorage=true`` means.
AZURITE_ACCOUNT = "devstoreaccount1"
AZURITE_KEY = ("Eby8vdM02xNOcqFlqUwJPLlmEtlCDXJ1OUzFT50uSRZ6IFsuFq2UVErCz4I6tq/"
               "K1SZFPTOtr/KBHBeksoGMGw==")
_AZURITE_ENDPOINT = "http://127.0.0.1:10000/devstoreaccount1"
# The fields Azure's SDKs read; the other services' endpoints and the
# secondary (read-access geo-redundant) ones are known and left unused.
_KNOWN = {"accountname", "accountkey", "blobendpoint", "sharedaccesssignature",
          "defaultendpointsprotocol", "endpointsuffix", "usedevelopmentstorage",
          "queueendpoint", "tableendpoint", "fileendpoint", "dfsendpoint",
          "blobsecondaryendpoint", "queuesecondaryendpoint", "tablesecondaryendpoint",
          "filesecondaryendpoint"}


@dataclass(frozen=True, repr=False)
class Settings:
    """What a store resolved: its account, endpoint and one credential.

    Attributes:
        account: the storage account.
        endpoint: the blob service root (``https://<account>.blob.core.windows.net``
            or an emulator's ``http://127.0.0.1:10000/devstoreaccount1``).
        account_key: the account key (signs SAS tokens), if any.
        sas_token: a SAS token given as is, if any.
    """

    account: str
    endpoint: str
    account_key: str | None = None
    sas_token: str | None = None

    def __repr__(self) -> str:
        kind = "key" if self.account_key else "sas" if self.sas_token else "token"
        return f"Settings({self.account!r}, {self.endpoint!r}, {kind})"


def parse_connection_string(text: str) -> dict[str, str]:
    """A connection string's fields, keys lower-cased.

    Raises:
        InvalidArgument: a field is not ``Name=value`` or its name is
            unknown (the message names the field, never its value).
    """
    fields: dict[str, str] = {}
    for number, part in enumerate(text.strip().split(";"), 1):
        if not part.strip():
            continue
        key, eq, value = part.partition("=")
        name = key.strip().lower()
        if not eq or name not in _KNOWN:
            shown = key.strip()[:40] if eq else "(no '=')"
            raise InvalidArgument(f"AzureStore: the connection string's field {number} "
                                  f"{shown!r} is not one Azure defines (AccountName, "
                                  "AccountKey, BlobEndpoint, SharedAccessSignature...)")
        fields[name] = value.strip()
    return fields


def _from_connection_string(text: str) -> Settings:
    fields = parse_connection_string(text)
    if fields.get("usedevelopmentstorage", "").lower() == "true":
        return Settings(AZURITE_ACCOUNT, _AZURITE_ENDPOINT, AZURITE_KEY)
    account = fields.get("accountname", "")
    endpoint = fields.get("blobendpoint", "")
    if not endpoint:
        if not account:
            raise InvalidArgument("AzureStore: the connection string names neither "
                                  "AccountName nor BlobEndpoint")
        protocol = fields.get("defaultendpointsprotocol", "https")
        suffix = fields.get("endpointsuffix", "core.windows.net")
        endpoint = f"{protocol}://{account}.blob.{suffix}"
    endpoint = _blob_endpoint(endpoint)
    if not account:
        account = _account_of(endpoint)
    sas = fields.get("sharedaccesssignature") or None
    return Settings(account, endpoint, fields.get("accountkey") or None, sas)


def _blob_endpoint(endpoint: str) -> str:
    """A connection string's blob endpoint, checked as ``endpoint=`` is.

    Raises:
        InvalidURL: not an http(s) API root, the message cut of a query or
            ``user:password@`` (the refusal of a bad scheme or port quotes
            the endpoint, and this one's query may be a SAS).
    """
    try:
        url = endpoint_url("AzureStore: the connection string's blob endpoint", endpoint)
    except InvalidURL as exc:
        raise InvalidURL(scrub(str(exc))) from None
    assert url is not None  # a str in, a str out
    return url


def _account_of(endpoint: str) -> str:
    """The account an endpoint names: its host's first label, or (an
    emulator, ``http://127.0.0.1:10000/devstoreaccount1``) its first path
    segment."""
    parts = urlsplit(endpoint)
    host = parts.hostname or ""
    segment = parts.path.strip("/").split("/", 1)[0]
    if segment:
        return segment
    if host and not host.replace(".", "").isdigit() and host != "localhost":
        return _account_label(host.split(".", 1)[0])
    raise InvalidArgument(f"AzureStore: the endpoint {endpoint!r} does not name the account "
                          "(pass account=)")


def _account_label(label: str) -> str:
    """The account a host's first label names, read as the SDK reads it:
    ``acct-secondary`` (read-access geo-redundant storage), ``acct-ipv6``
    and ``acct-dualstack`` are endpoints of ``acct``, whose key signs SAS
    tokens for ``acct`` (signed for the label, every request was refused)."""
    secondary = label.find("-secondary")
    if secondary > 0:
        return label[:secondary]
    for suffix in ("-ipv6", "-dualstack"):
        if label.endswith(suffix) and len(label) > len(suffix):
            return label[:-len(suffix)]
    return label


def resolve(account: str | None, endpoint: str | None, connection_string: str | None,
            account_key: str | None, sas_token: str | None) -> Settings:
    """The settings from the arguments, else the environment (module doc).

    Args:
        account: storage account name.
        endpoint: blob service root.
        connection_string: a connection string.
        account_key: the account key.
        sas_token: a SAS token.

    Returns:
        The settings.

    Raises:
        InvalidArgument: nothing names an account, both a key and a SAS are
            given, or a connection string is malformed.
        InvalidURL: a connection string's blob endpoint is not an http(s)
            API root.
    """
    if account_key and sas_token:
        raise InvalidArgument("AzureStore: give an account key or a SAS token, not both")
    if account is None and endpoint is not None and connection_string is None:
        # An endpoint given names its account (its host or, an emulator's,
        # its first path segment), as the SDK's account_url does; known
        # before the environment is read, so that another account's
        # connection string or key is not taken for this one (its SAS
        # would be signed for the wrong account and sent to this origin).
        account = _account_named(endpoint)
    base = Settings("", "")
    if connection_string is not None:
        base = _from_connection_string(connection_string)
    elif os.environ.get("AZURE_STORAGE_CONNECTION_STRING"):
        found = _from_connection_string(os.environ["AZURE_STORAGE_CONNECTION_STRING"])
        # Another account's string holds no credential of this one.
        if _same(account, found.account):
            base, connection_string = found, os.environ["AZURE_STORAGE_CONNECTION_STRING"]
    named = os.environ.get("AZURE_STORAGE_ACCOUNT_NAME") or None
    account = account or base.account or named
    if endpoint is None:
        endpoint = base.endpoint or (f"https://{account}.blob.core.windows.net"
                                     if account else None)
    if endpoint is None:
        raise InvalidArgument("AzureStore: no storage account: pass account= (or endpoint=), "
                              "or set AZURE_STORAGE_ACCOUNT_NAME or "
                              "AZURE_STORAGE_CONNECTION_STRING")
    endpoint = endpoint.rstrip("/")
    account = account or _account_of(endpoint)
    if not (account_key or sas_token) and connection_string is None:
        # The environment's key or SAS is AZURE_STORAGE_ACCOUNT_NAME's (any
        # account's when that is unset, as adlfs reads them): never another's.
        if named is None or _same(account, named):
            account_key = (os.environ.get("AZURE_STORAGE_ACCOUNT_KEY")
                           or os.environ.get("AZURE_STORAGE_KEY") or None)
            sas_token = None if account_key else os.environ.get("AZURE_STORAGE_SAS_TOKEN") or None
    elif not (account_key or sas_token):
        account_key, sas_token = base.account_key, base.sas_token
    return Settings(account, endpoint, account_key, (sas_token or "").lstrip("?") or None)


def _account_named(endpoint: str) -> str | None:
    """The account an endpoint names, or None when it names none (an
    address alone: the account then comes from the configuration)."""
    try:
        return _account_of(endpoint)
    except InvalidArgument:
        return None


def _same(account: str | None, other: str) -> bool:
    """Whether ``account`` (None: not chosen yet) is ``other``; account
    names are lowercase, a host's letters any case."""
    return account is None or account.lower() == other.lower()
