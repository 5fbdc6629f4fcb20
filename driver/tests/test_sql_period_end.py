"""Property test: billing.period_end against an independent calendar oracle written with zoneinfo.

The oracle states the rule of docs/sql-api.md ("Calendar") directly: boundary n is the anchor's local wall
time (in the customer's zone) plus n * count units, months clamped to the month's last day,
computed from the anchor every time (never chained), then mapped back to an instant. A wall time
that does not exist (spring forward) maps with the offset in force before the gap, i.e. moves
forward by the gap; one that exists twice (fall back) maps to the later instant. That is
PostgreSQL's documented resolution, and zoneinfo's fold=0 / fold=1 respectively.
"""

from __future__ import annotations

import calendar
from datetime import datetime, timedelta, timezone
from zoneinfo import ZoneInfo

import psycopg
import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

# Zones with DST in either hemisphere, half-hour and 45-minute offsets, a 30-minute DST shift
# (Lord Howe), midnight transitions (Sao Paulo, historic), a skipped day (Apia, 2011-12-30),
# a zone that changed its base offset (Pyongyang 2015/2018) and a negative-DST zone (Dublin).
ZONES = [
    "UTC", "America/Sao_Paulo", "America/New_York", "America/Santiago", "Europe/Berlin", "Europe/London",
    "Europe/Dublin", "Australia/Lord_Howe", "Australia/Sydney", "Asia/Kolkata", "Asia/Kathmandu",
    "Pacific/Chatham", "Pacific/Apia", "Asia/Pyongyang", "America/St_Johns", "Africa/Casablanca", "Asia/Tokyo",
]
UNITS = ["DAY", "WEEK", "MONTH", "YEAR"]


def _add_months(wall: datetime, months: int) -> datetime:
    y, m = divmod(wall.month - 1 + months, 12)
    year, month = wall.year + y, m + 1
    return wall.replace(year=year, month=month, day=min(wall.day, calendar.monthrange(year, month)[1]))


def _resolve(wall: datetime, zone: ZoneInfo) -> datetime:
    """Local wall time -> UTC instant, PostgreSQL's way for gaps and overlaps."""
    first = wall.replace(tzinfo=zone, fold=0)
    second = wall.replace(tzinfo=zone, fold=1)
    if first.utcoffset() == second.utcoffset():
        return first.astimezone(timezone.utc)
    round_trip = first.astimezone(timezone.utc).astimezone(zone).replace(tzinfo=None)
    exists = round_trip == wall
    # Exists twice: the later instant. Does not exist: the offset before the transition.
    return (second if exists else first).astimezone(timezone.utc)


def oracle(anchor: datetime, unit: str, count: int, periods: int, zone_name: str) -> datetime:
    zone = ZoneInfo(zone_name)
    wall = anchor.astimezone(zone).replace(tzinfo=None)
    n = count * periods
    if unit == "DAY":
        wall = wall + timedelta(days=n)
    elif unit == "WEEK":
        wall = wall + timedelta(days=7 * n)
    elif unit == "MONTH":
        wall = _add_months(wall, n)
    else:
        wall = _add_months(wall, 12 * n)
    return _resolve(wall, zone)


@pytest.fixture
def conn(db_url):
    with psycopg.connect(db_url, autocommit=True) as c:
        known = {r[0] for r in c.execute("SELECT name FROM pg_timezone_names WHERE name = ANY(%s)", (ZONES,))}
        assert known == set(ZONES), f"server lacks zones {set(ZONES) - known}"
        yield c


anchors = st.datetimes(
    min_value=datetime(1975, 1, 1), max_value=datetime(2060, 12, 31), timezones=st.just(timezone.utc)
)


@settings(max_examples=600, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    anchor=anchors,
    unit=st.sampled_from(UNITS),
    count=st.integers(min_value=1, max_value=24),
    periods=st.integers(min_value=0, max_value=150),
    zone=st.sampled_from(ZONES),
)
# The cases the contract names, and transitions the random search may miss.
@example(anchor=datetime(2026, 1, 31, 15, tzinfo=timezone.utc), unit="MONTH", count=1, periods=1, zone="UTC")
@example(anchor=datetime(2024, 1, 31, 15, tzinfo=timezone.utc), unit="MONTH", count=1, periods=1, zone="UTC")
@example(anchor=datetime(2024, 2, 29, 10, tzinfo=timezone.utc), unit="YEAR", count=1, periods=1, zone="Asia/Tokyo")
@example(anchor=datetime(2026, 2, 8, 7, 30, tzinfo=timezone.utc), unit="MONTH", count=1, periods=1, zone="America/New_York")
@example(anchor=datetime(2026, 10, 1, 5, 30, tzinfo=timezone.utc), unit="MONTH", count=1, periods=1, zone="America/New_York")
@example(anchor=datetime(2018, 10, 4, 3, 30, tzinfo=timezone.utc), unit="MONTH", count=1, periods=1, zone="America/Sao_Paulo")
@example(anchor=datetime(2011, 12, 29, 22, tzinfo=timezone.utc), unit="DAY", count=1, periods=1, zone="Pacific/Apia")
@example(anchor=datetime(2026, 9, 6, 0, 45, tzinfo=timezone.utc), unit="WEEK", count=4, periods=1, zone="Australia/Lord_Howe")
def test_period_end_matches_the_zoneinfo_oracle(conn, anchor, unit, count, periods, zone):
    got = conn.execute(
        "SELECT billing.period_end(%s, %s, %s, %s, %s)", (anchor, unit, count, periods, zone)
    ).fetchone()[0]
    assert got == oracle(anchor, unit, count, periods, zone), (anchor, unit, count, periods, zone)


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(anchor=anchors, unit=st.sampled_from(UNITS), count=st.integers(1, 6), zone=st.sampled_from(ZONES))
def test_consecutive_boundaries_strictly_increase(conn, anchor, unit, count, zone):
    rows = conn.execute(
        "SELECT n, billing.period_end(%s, %s, %s, n, %s) FROM generate_series(0, 40) n ORDER BY n",
        (anchor, unit, count, zone),
    ).fetchall()
    ends = [r[1] for r in rows]
    assert ends == [oracle(anchor, unit, count, n, zone) for n in range(41)]
    assert all(a < b for a, b in zip(ends, ends[1:])), "periods must never be empty or overlap"
