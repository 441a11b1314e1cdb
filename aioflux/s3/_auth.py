"""S3 credentials and SigV4 signing, from the AWS SDK's own libraries (the ``s3`` extra).

Nothing here signs by hand: the credential chain is botocore's
(environment, shared credentials/config files and profiles, web identity,
container and instance metadata), and the signature is computed by the AWS
Common Runtime (``awscrt.auth.aws_sign_request``), the signer botocore
itself uses when installed as ``botocore[crt]``. It gives the same
signature as botocore's pure-Python ``S3SigV4Auth`` (a test holds the two
together) at a quarter of the CPU: ~15 us a request against ~60, a third
of a small read's client-side cost. Both are imported on first use, so
``import aioflux`` and the ``gs://`` and ``file://`` stores never load them.
"""

from __future__ import annotations

import asyncio
import datetime
import functools
import os
import re
import time
from collections.abc import Callable
from typing import Any

from .._core.auth import AnonymousAuth, Auth, AuthRequest, SharedCall
from .._core.errors import InvalidArgument, PermissionDenied

__all__ = ["INSTALL_HINT", "ChainAuth", "SigV4", "configured_endpoint", "load_botocore",
           "missing_extra", "session_region"]

INSTALL_HINT = 'pip install "aioflux-storage[s3]"'
# What a payload's hash is replaced by where TLS already protects the body
# (and its x-amz-checksum-crc32c the bytes): hashing a 64 MiB part twice
# would cost more CPU than sending it.
UNSIGNED_PAYLOAD = "UNSIGNED-PAYLOAD"
EMPTY_SHA256 = "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855"


def missing_extra(package: str, purpose: str) -> InvalidArgument:
    """The error for a package of the ``s3`` extra that is not installed.

    Args:
        package: the missing package (``botocore``, ``awscrt``, ``lxml``).
        purpose: what s3:// needs it for.

    Returns:
        The exception to raise, naming the package, the extra and the command.
    """
    return InvalidArgument(f"s3:// URLs need the s3 extra (botocore, awscrt, lxml); {package}, "
                           f"for {purpose}, is not installed: {INSTALL_HINT}")


def load_botocore() -> Any:
    """The ``botocore`` package (credentials), imported on first use.

    Returns:
        The module.

    Raises:
        InvalidArgument: botocore is not installed; the message names the extra.
    """
    try:
        import botocore.credentials
        import botocore.session
    except ImportError as exc:
        raise missing_extra("botocore", "AWS credentials") from exc
    return botocore


def _load_awscrt() -> Any:
    try:
        import awscrt.auth
        import awscrt.http
    except ImportError as exc:
        raise missing_extra("awscrt", "SigV4 signing") from exc
    return awscrt


# The reason of the PermissionDenied raised when the chain found nothing:
# only that one means "use anonymous access" (SigV4.found).
NO_CREDENTIALS = "NoCredentials"
_MAX_DETAIL = 200


def _profile_named(profile: str | None) -> str:
    """The profile botocore uses, and where it comes from, for messages."""
    if profile is not None:
        return f"profile {profile!r}"
    # botocore's order; set but empty is a profile named '' to botocore
    # (ProfileNotFound), not the default one: say so rather than blame 'default'.
    for var in ("AWS_DEFAULT_PROFILE", "AWS_PROFILE"):
        if var in os.environ:
            return f"profile {os.environ[var]!r} (from {var}{', empty' * (not os.environ[var])})"
    return "profile 'default'"


def _config_files() -> tuple[str, str]:
    """The shared config and credentials files botocore reads."""
    return (os.environ.get("AWS_CONFIG_FILE") or "~/.aws/config",
            os.environ.get("AWS_SHARED_CREDENTIALS_FILE") or "~/.aws/credentials")


def _short(text: object) -> str:
    return " ".join(str(text).split())[:_MAX_DETAIL]


def _credentials_error(exc: Exception, profile: str | None, operation: str) -> PermissionDenied:
    """``exc``, raised by botocore while it read the AWS configuration or
    resolved credentials, as a :class:`PermissionDenied` saying what to fix.

    The message is built from the exception's fields, not its text where
    that may quote a file: a config line that fails to parse may be a
    secret key, so only its line number is given.
    """
    named = _profile_named(profile)
    config, credentials = _config_files()
    kind = type(exc).__name__
    fields = getattr(exc, "kwargs", None) or {}
    if kind == "ProfileNotFound":
        message = (f"AWS {named} is not defined in {config} or {credentials}; set "
                   f"AWS_PROFILE (or profile=) to a profile defined there, or unset it")
    elif kind == "ConfigParseError":
        lines = sorted(set(re.findall(r"line:?\s+(\d+)", str(fields.get("error", "")))),
                       key=int)
        where = f" (line {', '.join(lines)})" if lines else ""
        message = (f"cannot parse the AWS configuration file {fields.get('path', config)}{where}; "
                   f"fix it, or point AWS_CONFIG_FILE / AWS_SHARED_CREDENTIALS_FILE elsewhere")
    elif isinstance(exc, OSError):
        # botocore runs a profile's credential_process directly: a missing
        # program surfaces as the bare OSError (which names only argv[0]).
        message = (f"AWS credentials for {named}: a credential program could not run "
                   f"({_short(exc)}); check credential_process in {config}")
    else:
        message = (f"AWS credentials for {named} could not be loaded: {kind}: {_short(exc)}; "
                   f"check AWS_PROFILE, {config} and {credentials}")
    return PermissionDenied(f"s3: {message}", operation=operation, reason=kind)


@functools.cache
def _failures() -> tuple[type[Exception], ...]:
    """What botocore raises while it reads the AWS configuration or
    resolves credentials: its own errors (a missing profile, an unparsable
    file, partial or unretrievable credentials), an STS or SSO answer
    refusing a role (``ClientError``, at a refresh), the OSError of a
    credential_process that does not exist, and the ValueError of one that
    prints something other than JSON (json's message gives a position,
    never the text). Each call into botocore's session catches these and
    raises :func:`_credentials_error` (evaluated only when one is raised:
    the signing path pays nothing)."""
    from botocore.exceptions import BotoCoreError, ClientError

    return (BotoCoreError, ClientError, OSError, ValueError)


def _second() -> int:
    return int(time.time())


def _utc(second: int) -> datetime.datetime:
    return datetime.datetime.fromtimestamp(second, datetime.timezone.utc)


@functools.lru_cache(maxsize=256)
def _host(scheme: str, netloc: str) -> str:
    """The Host a request to ``scheme://netloc`` is signed with: the
    netloc without credentials and without the scheme's default port (as
    HTTP clients send it)."""
    host = netloc.rpartition("@")[2].lower()
    default = ":443" if scheme == "https" else ":80"
    return host[:-len(default)] if host.endswith(default) else host


def session_region(profile: str | None = None) -> str | None:
    """The region the environment names: ``AWS_REGION``, then botocore's
    (``AWS_DEFAULT_REGION``, the profile's ``region`` in the config file).

    Args:
        profile: the shared-config profile (default: ``AWS_PROFILE`` or ``default``).

    Returns:
        The region, or None when nothing names one.

    Raises:
        InvalidArgument: botocore is not installed.
        PermissionDenied: the profile does not exist or a config file
            cannot be parsed; the message names the profile or file.
    """
    env = os.environ.get("AWS_REGION")
    if env:
        return env
    botocore = load_botocore()
    try:
        region = botocore.session.Session(profile=profile).get_config_variable("region")
    except _failures() as exc:
        raise _credentials_error(exc, profile, "region") from exc
    return str(region) if region else None


def configured_endpoint(profile: str | None = None) -> str | None:
    """The endpoint the AWS configuration names for S3, as botocore resolves
    it: ``AWS_ENDPOINT_URL_S3``, ``AWS_ENDPOINT_URL``, the profile's
    ``services`` section, then its ``endpoint_url``; none when
    ``AWS_IGNORE_CONFIGURED_ENDPOINT_URLS`` (or the profile's
    ``ignore_configured_endpoint_urls``) says so. Without botocore
    (anonymous use), the two environment variables.

    Args:
        profile: the shared-config profile (default: ``AWS_PROFILE`` or ``default``).

    Returns:
        The endpoint URL, or None for AWS's own.

    Raises:
        PermissionDenied: the profile does not exist or a config file
            cannot be parsed; the message names the profile or file.
        InvalidArgument: nothing is configured, but FIPS or dual-stack
            hosts are asked for (``AWS_USE_FIPS_ENDPOINT``,
            ``AWS_USE_DUALSTACK_ENDPOINT`` or the profile's
            ``use_fips_endpoint``, ``use_dualstack_endpoint``), which the
            default, AWS's public regional hosts, is not.
    """
    try:
        botocore = load_botocore()
    except InvalidArgument:
        if os.environ.get("AWS_IGNORE_CONFIGURED_ENDPOINT_URLS", "").strip().lower() == "true":
            return None
        endpoint = os.environ.get("AWS_ENDPOINT_URL_S3") or os.environ.get("AWS_ENDPOINT_URL")
        if not endpoint:
            _refuse_variants(lambda name, variable:
                             os.environ.get(variable, "").strip().lower() == "true")
        return endpoint or None
    from botocore.configprovider import ConfiguredEndpointProvider

    try:
        session = botocore.session.Session(profile=profile)
        if session.get_config_variable("ignore_configured_endpoint_urls"):
            endpoint = None
        else:
            endpoint = ConfiguredEndpointProvider(
                full_config=session.full_config, scoped_config=session.get_scoped_config(),
                client_name="s3").provide()
        asked = {name for name, _, _ in _VARIANTS if session.get_config_variable(name)}
    except _failures() as exc:
        raise _credentials_error(exc, profile, "endpoint") from exc
    if not endpoint:
        _refuse_variants(lambda name, variable: name in asked)
    return str(endpoint) if endpoint else None


# The host variants botocore builds when asked (by its name in the profile,
# or the environment variable), with a host of each to suggest.
_VARIANTS = (("use_fips_endpoint", "AWS_USE_FIPS_ENDPOINT",
              "https://s3-fips.us-east-1.amazonaws.com"),
             ("use_dualstack_endpoint", "AWS_USE_DUALSTACK_ENDPOINT",
              "https://s3.dualstack.us-east-1.amazonaws.com"))


def _refuse_variants(asked: Callable[[str, str], bool]) -> None:
    """The default builds AWS's public regional hosts only: a user who asked
    for FIPS or dual-stack ones must not silently get those instead."""
    for name, variable, example in _VARIANTS:
        if asked(name, variable):
            raise InvalidArgument(f"S3Store: {variable}=true (or {name} in the profile) asks "
                                  "for hosts aioflux does not build (only AWS's public "
                                  f"regional ones); pass endpoint= (e.g. {example!r}) or set "
                                  "AWS_ENDPOINT_URL_S3 to the host wanted")


class SigV4:
    """An :class:`~aioflux._core.auth.Auth` that signs every request with SigV4.

    Credentials come from botocore's chain once, and are refreshed (in a
    thread: a refresh may ask STS or the instance metadata service) when
    they are about to expire.

    Args:
        region_of: the region to sign a request for, from its URL (the
            store knows each bucket's).
        credentials: botocore credentials; None resolves the chain.
        profile: shared-config profile for the chain.
        sign_payload: cover the body's SHA-256 by the signature. None
            (default): over plain http only, as botocore does; over https
            the body is sent ``UNSIGNED-PAYLOAD`` (TLS protects it, and its
            crc32c goes along). False: never (hashing costs ~0.8 s of CPU
            per GiB uploaded); True: always.

    Raises:
        InvalidArgument: botocore is not installed.
        PermissionDenied: the chain found no credentials (reason
            ``NoCredentials``: the store then uses anonymous access
            instead, see ``S3Store``), or the AWS configuration is broken
            (a missing profile, an unparsable file, a credential_process
            that fails; reason: botocore's exception name), named in the
            message with what to fix. A refresh that fails raises the same
            from the request.
    """

    def __init__(self, region_of: Callable[[str], str], *, credentials: Any = None,
                 profile: str | None = None, sign_payload: bool | None = None) -> None:
        botocore = load_botocore()
        self._sign_payload = sign_payload
        self._profile = profile
        if credentials is None:
            try:
                credentials = botocore.session.Session(profile=profile).get_credentials()
            except _failures() as exc:
                raise _credentials_error(exc, profile, "sign") from exc
        if credentials is None:
            raise PermissionDenied("s3: no AWS credentials found (environment, shared "
                                   "credentials file, profile, web identity or instance "
                                   "metadata)", operation="sign", reason=NO_CREDENTIALS)
        self._credentials = credentials
        self._region_of = region_of
        self._crt = _load_awscrt()
        self._refreshable = getattr(credentials, "refresh_needed", None) is not None
        self._provider: tuple[Any, Any] | None = None  # (frozen credentials, CRT provider)
        self._configs: dict[tuple[Any, str, str], tuple[int, Any]] = {}

    @classmethod
    def found(cls, region_of: Callable[[str], str], *, profile: str | None = None,
              sign_payload: bool | None = None) -> SigV4 | None:
        """A signer for the chain's credentials, or None when there are none.

        Args:
            region_of: as for the constructor.
            profile: shared-config profile.
            sign_payload: as for the constructor.

        Returns:
            The signer, or None (anonymous access).

        Raises:
            PermissionDenied: the AWS configuration is broken (not merely
                without credentials).
        """
        try:
            return cls(region_of, profile=profile, sign_payload=sign_payload)
        except PermissionDenied as exc:
            if exc.reason != NO_CREDENTIALS:
                raise  # a broken profile or file is not "no credentials"
            return None

    async def _frozen(self) -> Any:
        creds = self._credentials
        refresh_needed = getattr(creds, "refresh_needed", None)
        try:
            if refresh_needed is not None and refresh_needed():
                # botocore refreshes synchronously (HTTP to STS or IMDS).
                return await asyncio.to_thread(creds.get_frozen_credentials)
            return creds.get_frozen_credentials()
        except _failures() as exc:
            raise _credentials_error(exc, self._profile, "sign") from exc

    async def headers(self, request: AuthRequest) -> dict[str, str]:
        """The SigV4 headers of ``request`` (Authorization, X-Amz-Date,
        X-Amz-Content-SHA256 and, for temporary credentials, the token).

        Args:
            request: the request; its URL carries the encoded query.

        Returns:
            Headers to add.
        """
        url = request.url
        if request.params:
            # The store puts the query in the URL; parameters given apart
            # are signed in the order aiohttp sends them.
            from urllib.parse import quote
            query = "&".join(f"{quote(k, safe='-_.~')}={quote(v, safe='-_.~')}"
                             for k, v in request.params.items())
            url += ("&" if "?" in url else "?") + query
        sign = self._sign_payload
        if request.payload is None or not len(request.payload):
            payload = EMPTY_SHA256
        elif sign is False or (sign is None and url.startswith("https:")):
            payload = UNSIGNED_PAYLOAD
        else:
            # Plain HTTP (an S3-compatible store on a private network): the
            # signature must cover the body, or anyone on the path could
            # change it.
            payload = request.payload_sha256()
        crt = self._crt
        scheme, _, rest = url.partition("://")
        netloc, slash, target = rest.partition("/")
        frozen, provider = await self._crt_provider()
        # The URL is already encoded as it is sent: S3 signs it as is
        # (no double encoding, no dot-segment normalisation).
        signed = crt.http.HttpRequest(request.method, slash + target, crt.http.HttpHeaders(
            [("Host", _host(scheme, netloc)), *request.headers.items()]))
        config = self._config(provider, self._region_of(url), payload)
        # Static credentials: the CRT signs synchronously, the future is done.
        crt.auth.aws_sign_request(signed, config).result()
        out = signed.headers
        headers = {"Authorization": out.get("Authorization"), "X-Amz-Date": out.get("X-Amz-Date"),
                   "X-Amz-Content-SHA256": payload}
        if frozen.token:
            headers["X-Amz-Security-Token"] = frozen.token
        return headers

    def _config(self, provider: Any, region: str, payload: str) -> Any:
        """The signing configuration for ``region`` and ``payload``, now.

        One is kept per region for the current second (a signature's date
        has one-second resolution) when the payload is one many requests
        share (no body, or unsigned): making it was an eighth of a small
        read's signing cost. A body's own hash is never seen again.
        """
        second = _second()
        key = (provider, region, payload)
        shared = payload in (EMPTY_SHA256, UNSIGNED_PAYLOAD)
        cached = self._configs.get(key) if shared else None
        if cached is not None and cached[0] == second:
            return cached[1]
        crt = self._crt
        config = crt.auth.AwsSigningConfig(
            credentials_provider=provider, region=region, service="s3",
            date=_utc(second), use_double_uri_encode=False, should_normalize_uri_path=False,
            signed_body_value=payload,
            signed_body_header_type=crt.auth.AwsSignedBodyHeaderType.X_AMZ_CONTENT_SHA_256)
        if shared:
            if len(self._configs) >= 64:  # regions x credentials seen: a handful
                self._configs.clear()
            self._configs[key] = (second, config)
        return config

    async def _crt_provider(self) -> tuple[Any, Any]:
        """The current botocore credentials and a CRT provider for them.

        Credentials that cannot expire are read once; refreshable ones are
        asked each time (botocore refreshes them ahead of expiry), and the
        provider is made again only when a refresh changed them.
        """
        cached = self._provider
        if cached is not None and not self._refreshable:
            return cached
        frozen = await self._frozen()
        if cached is None or cached[0] != frozen:
            provider = self._crt.auth.AwsCredentialsProvider.new_static(
                frozen.access_key, frozen.secret_key, frozen.token)
            self._provider = cached = (frozen, provider)
        return cached

    def __repr__(self) -> str:
        return "SigV4(<redacted>)"


class ChainAuth:
    """botocore's credential chain resolved on the first request, in a
    thread, then :class:`SigV4` (or, when the chain finds nothing, unsigned
    requests, as ``S3Store`` does).

    For a store built on a running event loop: the chain may run a
    credential_process, SSO, AssumeRole (STS) or instance-metadata lookup,
    which would freeze the loop. One lookup serves the requests that wait
    for it meanwhile, its failure included; a request after a failure looks
    again.

    Args:
        region_of: as for :class:`SigV4`.
        profile: shared-config profile for the chain.
        sign_payload: as for :class:`SigV4`.

    Raises:
        InvalidArgument: botocore is not installed.
    """

    def __init__(self, region_of: Callable[[str], str], *, profile: str | None = None,
                 sign_payload: bool | None = None) -> None:
        load_botocore()  # named now, not at the first request

        def lookup() -> Auth:
            return SigV4.found(region_of, profile=profile,
                               sign_payload=sign_payload) or AnonymousAuth()

        self._lookup = SharedCall(lookup, name="aioflux-aws-credentials")
        self._auth: Auth | None = None

    async def headers(self, request: AuthRequest) -> dict[str, str]:
        """The headers of the chain's auth for ``request``.

        Raises:
            PermissionDenied: the AWS configuration is broken (see :class:`SigV4`).
        """
        auth = self._auth
        if auth is None:
            auth = self._auth = await self._lookup()
        return await auth.headers(request)

    def __repr__(self) -> str:
        return f"ChainAuth({self._auth!r})"
