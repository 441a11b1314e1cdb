"""Where an S3 store's requests go when an endpoint is configured: an AWS
endpoint chosen for what the public one lacks (FIPS, dual-stack, a VPC
interface endpoint) is the host every request goes to, and a bucket's
region only changes what requests are signed for, as botocore does. No
request leaves the process: URLs are checked, and requests are answered by
a mock session.
"""

from __future__ import annotations

from pathlib import Path
from urllib.parse import urlsplit

import pytest

from aioflux import ClientConfig, InvalidArgument, InvalidURL, S3Store
from aioflux._net.transport import HttpResponse, Op
from aioflux.s3._auth import SigV4
from aioflux.s3._endpoints import Addressing, Endpoints, RegionalTransport
from aioflux.testing import MockRequest, MockResponse, MockTransport
from tests.conftest import FAST_RETRY

FIPS = "https://s3-fips.us-east-1.amazonaws.com"
AWS_ENDPOINTS = [
    FIPS,
    "https://s3-fips.dualstack.us-east-1.amazonaws.com",
    "https://s3.dualstack.us-east-1.amazonaws.com",
    "https://bucket.vpce-0123456789abcdef0-abcdefgh.s3.us-east-1.vpce.amazonaws.com",
    # Another region's (and partition's) hosts than the one configured.
    "https://s3-fips.us-gov-west-1.amazonaws.com",
    "https://s3.dualstack.eu-west-1.amazonaws.com",
    "https://s3.us-west-2.amazonaws.com",
    "https://s3.cn-north-1.amazonaws.com.cn",
]


@pytest.mark.parametrize("endpoint", AWS_ENDPOINTS)
def test_an_aws_endpoint_is_the_host_of_every_request(endpoint: str) -> None:
    host = urlsplit(endpoint).hostname
    store = S3Store(ClientConfig(), endpoint=endpoint, region="us-east-1")
    assert store.object_url("bkt", "a/b c") == f"{endpoint}/bkt/a/b%20c"
    assert store.object_url("bkt") == f"{endpoint}/bkt"
    assert store.transport.same_origin(store.object_url("bkt", "k"))
    virtual = S3Store(ClientConfig(), endpoint=endpoint, region="us-east-1",
                      addressing="virtual")
    assert virtual.object_url("bkt", "k") == f"https://bkt.{host}/k"
    assert virtual.transport.same_origin(virtual.object_url("bkt", "k"))
    # The bucket's region, learnt or corrected, is what requests are signed
    # for; the host stays the one configured.
    for endpoints in (store.endpoints, virtual.endpoints):
        url = endpoints.object_url("bkt", "k") + "?uploads"
        assert endpoints.relocate("bkt", url, "ap-south-1") == url
        assert endpoints.region_of_url(url) == "ap-south-1"
        assert endpoints.region_of_url(endpoints.object_url("other", "k")) == "us-east-1"


@pytest.mark.parametrize("variable", ["AWS_ENDPOINT_URL_S3", "AWS_ENDPOINT_URL"])
def test_an_aws_endpoint_from_the_environment_is_used_as_given(
        variable: str, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(variable, FIPS + "/")
    store = S3Store(ClientConfig(), region="us-west-2")
    assert store.endpoint == FIPS
    assert store.object_url("bkt", "k") == f"{FIPS}/bkt/k"
    # botocore's switch to ignore configured endpoints is honoured too.
    monkeypatch.setenv("AWS_IGNORE_CONFIGURED_ENDPOINT_URLS", "true")
    assert S3Store(ClientConfig(), region="us-west-2").object_url("bkt", "k") == \
        "https://bkt.s3.us-west-2.amazonaws.com/k"
    assert S3Store(ClientConfig(), endpoint=FIPS, region="us-west-2").object_url(
        "bkt", "k") == f"{FIPS}/bkt/k"


@pytest.mark.parametrize("where", ["profile", "services"])
def test_an_endpoint_in_the_profile_is_used_as_given(
        where: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # A MinIO or R2 user's profile: its keys must not go to AWS instead.
    config = tmp_path / "config"
    if where == "profile":
        config.write_text("[profile r2]\nregion = auto\nendpoint_url = https://r2.example.test\n")
    else:
        config.write_text("[profile r2]\nregion = auto\nservices = mine\n\n"
                          "[services mine]\ns3 =\n  endpoint_url = https://r2.example.test\n")
    monkeypatch.setenv("AWS_CONFIG_FILE", str(config))
    monkeypatch.setenv("AWS_SHARED_CREDENTIALS_FILE", str(tmp_path / "none"))
    for variable in ("AWS_ENDPOINT_URL", "AWS_ENDPOINT_URL_S3", "AWS_REGION"):
        monkeypatch.delenv(variable, raising=False)
    store = S3Store(ClientConfig(), profile="r2", anonymous=True)
    assert store.endpoint == "https://r2.example.test"
    assert store.object_url("bkt", "k") == "https://r2.example.test/bkt/k"
    monkeypatch.setenv("AWS_IGNORE_CONFIGURED_ENDPOINT_URLS", "true")
    assert S3Store(ClientConfig(), profile="r2", anonymous=True).endpoint == \
        "https://s3.amazonaws.com"


@pytest.mark.parametrize("variable", ["AWS_USE_FIPS_ENDPOINT", "AWS_USE_DUALSTACK_ENDPOINT"])
def test_fips_or_dual_stack_asked_of_the_default_is_refused(
        variable: str, monkeypatch: pytest.MonkeyPatch) -> None:
    # The default builds public hosts only: it must not quietly use them.
    monkeypatch.setenv(variable, "true")
    with pytest.raises(InvalidArgument, match=f"{variable}=true.*pass endpoint="):
        S3Store(ClientConfig(), region="us-east-1")
    assert S3Store(ClientConfig(), endpoint=FIPS, region="us-east-1").endpoint == FIPS
    monkeypatch.setenv(variable, "false")
    assert S3Store(ClientConfig(), region="us-east-1").endpoint == "https://s3.amazonaws.com"


@pytest.mark.parametrize("name", ["use_fips_endpoint", "use_dualstack_endpoint"])
def test_fips_or_dual_stack_asked_by_the_profile_is_refused(
        name: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # botocore reads these from the profile as from the environment: a
    # profile asking for FIPS hosts must not get the public ones either.
    config = tmp_path / "config"
    config.write_text(f"[profile gov]\nregion = us-east-1\n{name} = true\n"
                      "[profile plain]\nregion = us-east-1\n")
    monkeypatch.setenv("AWS_CONFIG_FILE", str(config))
    monkeypatch.setenv("AWS_SHARED_CREDENTIALS_FILE", str(tmp_path / "none"))
    for variable in ("AWS_ENDPOINT_URL", "AWS_ENDPOINT_URL_S3", "AWS_USE_FIPS_ENDPOINT",
                     "AWS_USE_DUALSTACK_ENDPOINT"):
        monkeypatch.delenv(variable, raising=False)
    with pytest.raises(InvalidArgument, match=f"{name} in the profile.*pass endpoint="):
        S3Store(ClientConfig(), profile="gov", anonymous=True)
    assert S3Store(ClientConfig(), profile="gov", endpoint=FIPS, anonymous=True).endpoint == FIPS
    assert S3Store(ClientConfig(), profile="plain", anonymous=True).endpoint == \
        "https://s3.amazonaws.com"


def test_the_default_endpoint_given_explicitly_is_the_default() -> None:
    # What S3Store reports as its endpoint when none was configured stands
    # for AWS's regional hosts, given back or not.
    for endpoint in (None, "https://s3.amazonaws.com", "https://s3.amazonaws.com/"):
        endpoints = Endpoints(endpoint, "auto", "eu-west-1")
        assert endpoints.object_url("bkt", "k") == "https://bkt.s3.eu-west-1.amazonaws.com/k"


def _signed_region(request: MockRequest) -> str:
    return request.headers["Authorization"].split("Credential=", 1)[1].split("/")[2]


async def test_a_wrong_region_answer_from_an_aws_endpoint_keeps_the_host() -> None:
    # S3 says the bucket is in another region: the request is sent again,
    # signed for it, to the FIPS host the user chose (not the public
    # regional one, where the credentials and data would have gone).
    answers = [MockResponse(301, {"x-amz-bucket-region": "us-gov-west-1"},
                            b"<Error><Code>PermanentRedirect</Code></Error>"),
               MockResponse(200, {"x-amz-meta-found": "yes"})]
    mock = MockTransport(lambda request: answers.pop(0))
    endpoints = Endpoints(FIPS, "auto", "us-east-1")
    config = ClientConfig(retry=FAST_RETRY)
    transport = RegionalTransport(endpoints, config, SigV4(endpoints.region_of_url),
                                  session_factory=mock._new_session, endpoint=endpoints.endpoint,
                                  trusted=endpoints.trusted)

    async def handle(resp: HttpResponse) -> str:
        return resp.headers.get("x-amz-meta-found", "")

    try:
        found = await transport.request(Op("stat", "bkt", "k", "s3"), "HEAD",
                                        endpoints.object_url("bkt", "k"), handle)
    finally:
        await transport.aclose()
    assert found == "yes"
    assert [r.url for r in mock.requests] == [f"{FIPS}/bkt/k"] * 2
    assert [_signed_region(r) for r in mock.requests] == ["us-east-1", "us-gov-west-1"]
    assert endpoints.regions == {"bkt": "us-gov-west-1"}


@pytest.mark.parametrize("host", [
    "s3-123456.us-east-1.elb.amazonaws.com",  # a load balancer named "s3"
    "s3.us-east-1.elb.amazonaws.com",
    "bkt.s3-website-us-east-1.amazonaws.com",  # a bucket owner's web pages
    "bkt.s3-website.us-east-1.amazonaws.com",
    "s3-x.execute-api.us-east-1.amazonaws.com",
    "bkt.s3.us-east-1.amazonaws.com.evil.test",
    "s3.amazonaws.com.cn",
    "bkt.s3.us-east-1.amazonaws.com.cn",
    "s3.evil.test.amazonaws.com",
])
def test_credentials_go_to_no_aws_host_that_is_not_s3(host: str) -> None:
    endpoints = Endpoints(None, "auto", "us-east-1")
    assert not endpoints.trusted(f"https://{host}/bkt/k")


@pytest.mark.parametrize("host", [
    "s3.amazonaws.com", "bkt.s3.amazonaws.com", "s3.eu-central-1.amazonaws.com",
    "my.dotted.bkt.s3.us-gov-west-1.amazonaws.com", "bkt.s3.cn-north-1.amazonaws.com.cn",
])
def test_credentials_go_to_the_default_s3_hosts(host: str) -> None:
    assert Endpoints(None, "auto", "us-east-1").trusted(f"https://{host}/bkt/k")


@pytest.mark.parametrize("bucket", ["s3-data", "s3.models"])
def test_a_bucket_named_like_an_s3_host_is_signed_for_its_region(bucket: str) -> None:
    addressings: tuple[Addressing, ...] = ("auto", "virtual")
    for addressing in addressings:
        endpoints = Endpoints(None, addressing, None)
        endpoints.regions[bucket] = "eu-west-1"
        url = endpoints.object_url(bucket, "k/v")
        assert endpoints.region_of_url(url) == "eu-west-1", url


def test_an_endpoint_with_user_and_password_is_refused_without_repeating_them() -> None:
    with pytest.raises(InvalidURL, match="must not carry user:password@") as raised:
        S3Store(ClientConfig(), endpoint="http://me:s3cret@127.0.0.1:9000", region="us-east-1")
    assert "s3cret" not in str(raised.value)
