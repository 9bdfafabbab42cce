"""S3 store descriptions: what they accept, what they show, how they travel in a task message,
and the sessions tasks carrying them run in."""

from __future__ import annotations

import dataclasses
import doctest
import json

import pytest
from datafusion import SessionContext

from datafusion_distributed import S3Store
from datafusion_distributed.execution_plans.object_stores import store_for_url, with_store, with_store_hint
from datafusion_distributed.protocol.messages import ProtocolError, RunTask, decode_run_task, encode
from datafusion_distributed.runtime.session_settings import TaskSessions
from tests.support.s3_server import LocalS3Server

SECRET = "s3cr3t-value-never-shown"
TOKEN = "session-token-never-shown"


def _store(**changes) -> S3Store:
    fields = {
        "bucket": "my-bucket",
        "region": "eu-west-1",
        "endpoint": "http://127.0.0.1:9000",
        "access_key_id": "AKIDEXAMPLE",
        "secret_access_key": SECRET,
        "session_token": TOKEN,
    }
    return S3Store(**(fields | changes))


def _message(stores) -> RunTask:
    return RunTask("q1", 0, 0, 0, b"plan", (), "grpc://127.0.0.1:1", object_stores=stores)


def test_repr_and_describe_never_show_credentials():
    store = _store()
    for text in (repr(store), str(store), store.describe(), repr(_message((store,)))):
        assert SECRET not in text and TOKEN not in text and "AKIDEXAMPLE" not in text
    assert repr(store) == (
        "S3Store(bucket='my-bucket', region='eu-west-1', endpoint='http://127.0.0.1:9000', "
        "credentials='given')"
    )
    assert S3Store("my-bucket").describe() == "s3://my-bucket (AWS, credentials from the environment)"


def test_http_is_allowed_for_an_http_endpoint_unless_said_otherwise():
    assert _store().http_allowed
    assert not _store(endpoint="https://s3.example.com").http_allowed
    assert not _store(allow_http=False).http_allowed
    assert not S3Store("my-bucket").http_allowed


@pytest.mark.parametrize(
    ("changes", "error"),
    [
        ({"bucket": "My_Bucket"}, "bucket name 'My_Bucket' is not valid"),
        ({"bucket": "ab"}, "is not valid"),
        ({"endpoint": "ftp://host"}, "must start with http:// or https://"),
        ({"region": ""}, "region must be None or text"),
        ({"secret_access_key": None}, "need both access_key_id and secret_access_key"),
        ({"access_key_id": None, "secret_access_key": None}, "session_token needs access_key_id"),
        ({"allow_http": "yes"}, "allow_http must be None, True or False"),
    ],
)
def test_bad_settings_are_refused_naming_the_setting(changes, error):
    with pytest.raises(ValueError, match=error) as caught:
        _store(**changes)
    assert SECRET not in str(caught.value) and TOKEN not in str(caught.value)


def test_a_store_serves_its_own_bucket_url_only():
    store = _store()
    assert store_for_url("s3://my-bucket", store) is store
    assert store_for_url("s3://my-bucket/", store) is store
    with pytest.raises(ValueError, match="serves s3://my-bucket, not 's3://other'"):
        store_for_url("s3://other", store)
    from datafusion.object_store import AmazonS3

    with pytest.raises(TypeError, match="takes an S3Store.*session hook"):
        store_for_url("s3://my-bucket", AmazonS3(bucket_name="my-bucket"))


def test_a_store_registered_again_replaces_the_first():
    first, second = _store(), _store(region="us-east-1")
    other = S3Store("another-bucket")
    assert with_store(with_store((first,), other), second) == (other, second)


def test_stores_travel_in_a_task_message_and_come_back_equal():
    stores = (S3Store("another-bucket"), _store())
    assert decode_run_task(encode(_message(stores))).object_stores == stores
    # left out of a message without stores, so a worker that predates them reads it
    assert "object_stores" not in json.loads(encode(_message(())))


@pytest.mark.parametrize(
    ("raw", "error"),
    [
        ([{"bucket": "my-bucket", "password": SECRET}], "must be a list of S3 store descriptions"),
        ([{"region": "eu-west-1"}], "must be a list of S3 store descriptions"),
        ([{"bucket": "BAD", "secret_access_key": SECRET}], "bucket name 'BAD' is not valid"),
        ([{"bucket": "my-bucket", "secret_access_key": SECRET}], "need both access_key_id"),
        ([{"bucket": "zz-bucket"}, {"bucket": "aa-bucket"}], "each store once, in URL order"),
        ([{"bucket": "my-bucket"}] * 2, "each store once, in URL order"),
        ("s3://my-bucket", "object_stores must be a list"),
    ],
)
def test_a_bad_store_in_a_message_is_refused_without_echoing_it(raw, error):
    body = json.loads(encode(_message(())))
    body["object_stores"] = raw
    with pytest.raises(ProtocolError, match=error) as caught:
        decode_run_task(json.dumps(body).encode())
    assert SECRET not in str(caught.value)


def _reads_bucket(ctx: SessionContext) -> bool:
    """Whether `ctx` has a store for s3://my-bucket (reading a table there lists it)."""
    ctx.sql("CREATE OR REPLACE EXTERNAL TABLE t (a INT) STORED AS CSV LOCATION 's3://my-bucket/t/'")
    try:
        ctx.sql("SELECT count(*) FROM t").collect()
    except Exception as exc:
        if "No suitable object store" in str(exc):
            return False
        raise
    return True


def test_tasks_carrying_stores_run_in_a_session_of_their_own():
    with LocalS3Server() as s3:
        s3.create_bucket("my-bucket")
        _check_sessions(s3.store("my-bucket"))


def _check_sessions(store: S3Store) -> None:
    built = []

    def build() -> SessionContext:
        built.append(SessionContext())
        return built[-1]

    sessions = TaskSessions(build)
    with_stores = sessions.session((), (store,))
    assert _reads_bucket(with_stores)
    assert sessions.session((), (store,)) is with_stores  # shared by tasks carrying the same stores
    # the base session (a session hook's) never gets a store a query brought
    assert not _reads_bucket(sessions.base())
    other = sessions.session((), (dataclasses.replace(store, region="eu-west-1"),))
    assert other is not with_stores and len(built) == 3
    settings = (("datafusion.execution.time_zone", "+05:00"),)
    assert _reads_bucket(sessions.session(settings, (store,)))
    assert len(built) == 3  # settings copy the session of those stores


def test_the_hint_for_a_missing_store_names_the_fix():
    message = "Internal error: No suitable object store found for s3://my-bucket/."
    assert "DistributedContext.register_object_store(url, S3Store(...))" in with_store_hint(message)
    assert with_store_hint("Arrow error") == "Arrow error"


def test_the_local_s3_server_s_docstring_examples_run():
    """The package's own examples run in tests/test_doctests.py; this is the test support's."""
    from tests.support import s3_server

    result = doctest.testmod(s3_server)
    assert result.attempted > 0 and result.failed == 0
