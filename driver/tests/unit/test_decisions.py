"""The simulator's decisions are a pure function of (seed, key, call): reproducible runs."""

from __future__ import annotations

import pytest

from billing.gateway.decisions import DECLINE_CODES, DecisionModel, chance, charge_id


def test_chance_is_deterministic_and_uniform_enough():
    assert chance(7, "k", 1) == chance(7, "k", 1)
    assert chance(7, "k", 1) != chance(8, "k", 1)
    draws = [chance(1, "key", i) for i in range(4000)]
    assert all(0.0 <= d < 1.0 for d in draws)
    assert 0.45 < sum(draws) / len(draws) < 0.55


def test_decline_rate_is_honoured_and_declines_depend_on_the_key_only():
    model = DecisionModel(seed=3, decline_rate=0.2)
    codes = [model.decline_code(f"inv-{i}-try-1", 1, 100, "EUR") for i in range(5000)]
    declined = [c for c in codes if c is not None]
    assert 0.17 < len(declined) / len(codes) < 0.23
    assert set(declined) <= set(DECLINE_CODES)
    assert model.decline_code("inv-1-try-1", 9, 999, "BRL") == model.decline_code("inv-1-try-1", 1, 100, "EUR")


def test_rates_zero_and_one():
    never = DecisionModel(seed=1)
    always = DecisionModel(seed=1, decline_rate=1.0, timeout_rate=1.0, error_rate=1.0)
    for i in range(100):
        key = f"k{i}"
        assert never.decline_code(key, 1, 1, "EUR") is None
        assert not never.fails(key, 1) and not never.times_out(key, 1)
        assert always.decline_code(key, 1, 1, "EUR") in DECLINE_CODES
        assert always.fails(key, 1) and always.times_out(key, 1)


@pytest.mark.parametrize("name", ["decline_rate", "timeout_rate", "error_rate"])
def test_rates_outside_0_1_are_refused(name):
    with pytest.raises(ValueError):
        DecisionModel(**{name: 1.5})


def test_charge_ids_are_stable_per_seed():
    assert charge_id(1, "k") == charge_id(1, "k")
    assert charge_id(1, "k") != charge_id(2, "k")
    assert charge_id(1, "k").startswith("ch_")
