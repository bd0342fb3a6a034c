"""Price table, overrides, run/session costs, cost per successful run, comparisons."""

from __future__ import annotations

import pytest

from portside.core.log.costs import (
    PriceError,
    cost_per_successful_run,
    default_prices,
    device_price_name,
    load_prices,
    parse_price_table,
    run_cost,
    run_cost_from_facts,
    token_cost,
)
from portside.core.log.criteria import parse_criteria


def test_shipped_table_rows_have_source_and_date():
    t = default_prices()
    assert t.usd("tpu-v5e") == 1.20 and t.usd("tpu-v5p") == 4.20 and t.usd("tpu-v6e") == 2.70
    assert t.usd("h100") == 6.88 and t.usd("a100-80gb") == 3.43 and t.find("h200") is not None
    assert t.find("cpu").unit == "cpu-hour"
    assert t.usd("claude-sonnet-4-5", "mtok-in") == 3.0 and t.usd("claude-sonnet-4-5", "mtok-out") == 15.0
    for row in t.rows:
        assert row.source and row.date, row


def test_overrides_from_criteria():
    c = parse_criteria('[prices]\n"tpu-v5e" = 1.0\n"claude-sonnet-4-5/mtok-out" = 10\n"human-hour" = 60\n')
    t = load_prices(c.price_overrides)
    assert t.usd("tpu-v5e") == 1.0 and t.find("tpu-v5e").source == "user override"
    assert t.usd("claude-sonnet-4-5", "mtok-out") == 10.0 and t.usd("claude-sonnet-4-5", "mtok-in") == 3.0
    assert default_prices().usd("tpu-v5e") == 1.20  # shipped table untouched
    with pytest.raises(PriceError, match="unknown price"):
        load_prices({"tpu-v9": 1.0})


def test_bad_table_rows():
    with pytest.raises(PriceError, match="unit"):
        parse_price_table('[[price]]\nname = "x"\nunit = "day"\nusd = 1\n')
    with pytest.raises(PriceError, match="needs name"):
        parse_price_table('[[price]]\nname = "x"\n')


@pytest.mark.parametrize(("facts", "name"), [
    ({"device_kind": "TPU", "device_name": "TPU v5e"}, "tpu-v5e"),
    ({"device_kind": "TPU", "device_name": "TPU v5 lite"}, "tpu-v5e"),
    ({"device_kind": "TPU", "device_name": "TPU v5p"}, "tpu-v5p"),
    ({"device_kind": "TPU", "device_name": "TPU v6e"}, "tpu-v6e"),
    ({"device_kind": "TPU", "device_name": "TPU"}, None),
    ({"device_kind": "CUDA", "device_name": "NVIDIA H100 80GB HBM3"}, "h100"),
    ({"device_kind": "CUDA", "device_name": "NVIDIA A100-SXM4-80GB"}, "a100-80gb"),
    ({"device_kind": "CUDA", "device_name": "NVIDIA H200"}, "h200"),
    ({"device_kind": "CPU", "device_name": "cpu"}, "cpu"),
    (None, None),
])
def test_device_price_name(facts, name):
    assert device_price_name(facts) == name


def test_run_cost():
    assert run_cost(3600, 1.20, 4) == pytest.approx(4.8)
    assert run_cost(1800, 6.88) == pytest.approx(3.44)
    t = default_prices()
    facts = {"device_kind": "TPU", "device_name": "TPU v5e", "device_count": 4}
    assert run_cost_from_facts(3600, facts, t) == pytest.approx(4.8)
    assert run_cost_from_facts(3600, facts, t, devices=1) == pytest.approx(1.2)
    assert run_cost_from_facts(3600, {"device_kind": "UNKNOWN"}, t) is None


def test_token_cost_by_model_prefix():
    t = default_prices()
    assert token_cost("claude-sonnet-4-5-20250929", 1_000_000, 100_000, t) == pytest.approx(4.5)
    assert token_cost("claude-opus-4-1-20250805", 1_000_000, 0, t) == pytest.approx(15.0)
    assert token_cost("gpt-x", 10, 10, t) is None


def test_no_success_has_no_cost_per_success():
    assert cost_per_successful_run(10.0, 0) is None
    assert cost_per_successful_run(10.0, 4) == 2.5
