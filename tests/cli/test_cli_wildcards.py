"""A URL written with gsutil's wildcards (``gs://b/logs/*.json``): aioflux
takes ``*``, ``?`` and ``[`` as part of a name, and says so when such a
name matches nothing, rather than "no such object" alone."""

from __future__ import annotations

import pytest

from aioflux import Client

_HINT = ("(aioflux takes '*', '?' and '[' as part of a name, not as wildcards: name a folder, "
         "with -r where the command takes it)\n")


@pytest.mark.parametrize("argv", [["ls", "logs/*.json"], ["du", "logs/a?.json"],
                                  ["cat", "logs/a?.json"], ["stat", "logs/[ab].json"],
                                  ["rm", "logs/*.json"], ["rm", "-r", "logs/*"],
                                  ["cp", "logs/*.json", "LOCAL"],
                                  ["cp", "-r", "logs/*", "LOCAL"]])
def test_a_wildcard_that_matches_nothing_says_it_is_no_wildcard(  # type: ignore[no-untyped-def]
        run, sync_client: Client, bucket: str, tmp_path, argv: list[str]) -> None:
    sync_client.write(bucket, "logs/a1.json", b"{}")
    args = [str(tmp_path) if a == "LOCAL" else a if a.startswith("-") or a == argv[0]
            else f"gs://{bucket}/{a}" for a in argv]
    code, out, err = run(*args)
    assert (code, out) == (1, "")
    assert err.count("\n") == 1 and err.endswith(_HINT)
    assert [o.name for o in sync_client.list_objects(bucket)] == ["logs/a1.json"]
    assert list(tmp_path.iterdir()) == []


def test_a_name_that_holds_a_star_is_still_a_name(  # type: ignore[no-untyped-def]
        run, sync_client: Client, bucket: str) -> None:
    sync_client.write(bucket, "logs/*.json", b"star")
    sync_client.write(bucket, "logs/a1.json", b"{}")
    assert run("cat", f"gs://{bucket}/logs/*.json")[:2] == (0, "star")
    assert run("rm", f"gs://{bucket}/logs/*.json")[:2] == (0, "removed 1 object(s)\n")
    assert [o.name for o in sync_client.list_objects(bucket)] == ["logs/a1.json"]
    code, _, err = run("stat", f"gs://{bucket}/logs/missing")
    assert code == 1 and "wildcards" not in err
