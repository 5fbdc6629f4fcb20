"""Input checks of the HTTP API, without a server: every bad value is a 4xx, never reaches SQL."""

from __future__ import annotations

from datetime import datetime, timezone

import pytest
from starlette.requests import Request

from billing.api.validation import (
    BIGINT_MAX, ApiError, bigint_field, bool_field, check_text, if_match, path_id, subscription_json, text_field,
)


def request(headers: dict | None = None, path_params: dict | None = None) -> Request:
    scope = {"type": "http", "method": "GET", "path": "/", "query_string": b"",
             "headers": [(k.lower().encode(), v.encode()) for k, v in (headers or {}).items()],
             "path_params": path_params or {}}
    return Request(scope)


@pytest.mark.parametrize("value", [0, 1, -1, BIGINT_MAX, -BIGINT_MAX - 1])
def test_bigint_accepts_the_whole_range(value):
    assert bigint_field({"n": value}, "n") == value


@pytest.mark.parametrize("value,status", [(True, 400), (1.0, 400), ("1", 400), (None, 400),
                                          (BIGINT_MAX + 1, 422), (-BIGINT_MAX - 2, 422)])
def test_bigint_refuses_other_types_and_overflow(value, status):
    with pytest.raises(ApiError) as err:
        bigint_field({"n": value}, "n")
    assert err.value.status == status


def test_text_refuses_nul_surrogates_and_length():
    assert text_field({"s": "PRO"}, "s") == "PRO"
    for value, status in (("a\x00b", 400), ("\ud800", 400), ("x" * 11, 422), (3, 400)):
        with pytest.raises(ApiError) as err:
            text_field({"s": value}, "s", max_len=10)
        assert err.value.status == status
    check_text("s", "x" * 10, 10)


def test_bool_is_strict():
    assert bool_field({"b": False}, "b") is False
    for value in (0, 1, "true", None):
        with pytest.raises(ApiError):
            bool_field({"b": value}, "b")


@pytest.mark.parametrize("raw,status", [("abc", 400), ("-1", 400), ("1.5", 400), ("٣", 400),
                                        ("0", 404), (str(BIGINT_MAX + 1), 404)])
def test_path_ids(raw, status):
    with pytest.raises(ApiError) as err:
        path_id(request(path_params={"id": raw}))
    assert err.value.status == status
    assert path_id(request(path_params={"id": "42"})) == 42


@pytest.mark.parametrize("raw,expected", [(None, None), ("*", None), ('"3"', 3), ("3", 3), ('W/"7"', 7)])
def test_if_match_reads_the_etag(raw, expected):
    assert if_match(request({"If-Match": raw} if raw else {})) == expected


@pytest.mark.parametrize("raw,status", [('"a"', 400), ('"1", "2"', 400), ('"' + "9" * 25 + '"', 412)])
def test_if_match_refuses_what_no_version_can_be(raw, status):
    with pytest.raises(ApiError) as err:
        if_match(request({"If-Match": raw}))
    assert err.value.status == status


def test_subscription_json_is_utc_iso():
    row = {"id": 1, "customer_id": 2, "plan_code": "P", "status": "ACTIVE", "cancel_at_period_end": False,
           "current_period_start": datetime(2026, 9, 1, 3, tzinfo=timezone.utc),
           "current_period_end": None, "version": 4, "quantity": 3, "trial_end": None,
           "paused_at": datetime(2026, 9, 2, tzinfo=timezone.utc), "resume_at": None, "scheduled_plan_code": "Q",
           "coupon_code": None}
    doc = subscription_json(row)
    assert doc["currentPeriodStart"] == "2026-09-01T03:00:00.000000Z"
    assert doc["currentPeriodEnd"] is None and doc["customerId"] == 2 and doc["version"] == 4
    assert doc["quantity"] == 3 and doc["scheduledPlanCode"] == "Q"
    assert doc["pausedAt"] is None, "a pause is shown only while PAUSED"
    assert subscription_json({**row, "status": "PAUSED"})["pausedAt"] == "2026-09-02T00:00:00.000000Z"
