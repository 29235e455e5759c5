"""``env=webshop``: page flow and text, a scripted shopper, invalid actions, splits, config."""

from __future__ import annotations

import re

import pytest
from helpers import ENV_TEST_KWARGS, make_env

import agentrl
from agentrl.configuration import ConfigError
from agentrl.envs.webshop import parse_action
from agentrl.envs.webshop.data import WebShopDataError


@pytest.fixture(scope="module")
def env():
    # The generated catalogue even where WEBSHOP_DATA points at official data.
    with pytest.MonkeyPatch.context() as mp:
        mp.delenv("WEBSHOP_DATA", raising=False)
        return make_env("webshop")


def _goal_product(env):
    u = env.unwrapped
    return u.store.products[u.goal.product]


def _find(env, info, asin):
    """Page through the results (next >) until ``asin`` is clickable."""
    for _ in range(5):
        if f"click[{asin.lower()}]" in info["admissible_actions"]:
            return info
        _, _, _, _, info = env.step("click[next >]")
    raise AssertionError(f"{asin} not in the first 50 results")


def test_scripted_shopper_buys_the_goal_and_scores_one(env):
    obs, info = env.reset(seed=3)
    goal = env.unwrapped.goal
    assert obs == f"WebShop [SEP] Instruction: [SEP] {goal.instruction} [SEP] Search"
    assert info["admissible_actions"] == ["search[<your query>]"] and info["has_search_bar"]
    assert info["task"] == goal.instruction and info["anchor"] == ("search", "", 0, "", ())

    obs, r, term, trunc, info = env.step(f"search[{goal.instruction}]")
    query = goal.instruction.lower()
    assert info["executed_action"] == f"search[{query}]" and r == 0.0 and not term
    assert obs.startswith(f"Instruction: [SEP] {goal.instruction} [SEP] Back to Search [SEP] "
                          "Page 1 (Total results: 50) [SEP] Next > [SEP] ")  # fmt: skip
    assert info["admissible_actions"][:2] == ["click[back to search]", "click[next >]"]
    assert len(info["admissible_actions"]) == 2 + 10  # ten products a page
    assert info["anchor"] == ("results", query, 1, "", ())

    # paging: next > then < prev returns to the same page
    page1 = obs
    obs, _, _, _, info = env.step("click[next >]")
    assert "Page 2 (Total results: 50) [SEP] < Prev [SEP] Next >" in obs
    assert info["anchor"] == ("results", query, 2, "", ())
    obs, _, _, _, info = env.step("click[< prev]")
    assert obs == page1

    product = _goal_product(env)
    info = _find(env, info, product.asin)
    page = info["anchor"][2]
    obs, _, _, _, info = env.step(f"click[{product.asin.lower()}]")
    assert info["anchor"] == ("item", query, page, product.asin, ())
    assert f"[SEP] {product.title} [SEP] Price: {product.price_tag} [SEP] Rating: N.A. [SEP] " \
           "Description [SEP] Features [SEP] Reviews [SEP] Buy Now" in obs  # fmt: skip
    for name, values in product.options:
        assert " [SEP] ".join([name, *values]) in obs

    # sub-pages and back
    obs, _, _, _, info = env.step("click[features]")
    assert obs.endswith(" [SEP] ".join(["< Prev", *product.bullet_points]))
    assert info["admissible_actions"] == ["click[back to search]", "click[< prev]"]
    env.step("click[< prev]")
    obs, _, _, _, info = env.step("click[description]")
    assert obs.endswith(f"< Prev [SEP] {product.description}")
    env.step("click[< prev]")

    for value in goal.options:
        _, r, term, _, info = env.step(f"click[{value}]")
        assert info["action_valid"] and r == 0.0 and not term
    names = dict(zip(goal.option_names, goal.options))
    assert info["anchor"] == ("item", query, page, product.asin, tuple(sorted(names.items())))

    obs, r, term, trunc, info = env.step("click[buy now]")
    assert term and not trunc and info["won"] and r == 1.0 and info["score"] == 100.0
    assert info["purchased_asin"] == info["goal_asin"] == product.asin
    assert info["r_type"] == info["r_att"] == info["r_price"] == 1.0
    assert obs == ("Thank you for shopping with us! [SEP] Your score (min 0.0, max 1.0) "
                   "[SEP] 1.0")  # fmt: skip
    assert info["admissible_actions"] == [] and info["anchor"][0] == "done"


def test_buying_without_options_ends_without_success(env):
    for seed in range(50):  # a goal with options
        env.reset(seed=seed)
        if env.unwrapped.goal.options:
            break
    goal = env.unwrapped.goal
    _, _, _, _, info = env.step(f"search[{goal.instruction}]")
    product = _goal_product(env)
    _find(env, info, product.asin)
    env.step(f"click[{product.asin}]")
    _, r, term, trunc, info = env.step("click[buy now]")
    n = len(goal.attributes) + len(goal.options) + 1
    # every attribute and the price, no option: (n - #options) / n
    assert term and not trunc and not info["won"]
    assert r == pytest.approx((n - len(goal.options)) / n) and info["r_option"] == 0.0
    assert info["score"] == pytest.approx(100 * r)


def test_back_to_search_and_prev_drop_state(env):
    env.reset(seed=4)
    _, _, _, _, info = env.step("search[shoes]")
    asin = info["admissible_actions"][2][len("click[") : -1]
    _, _, _, _, info = env.step(f"click[{asin}]")
    option = next((a for a in info["admissible_actions"][6:]), None)
    if option:
        _, _, _, _, info = env.step(option)
        assert info["anchor"][4]
    _, _, _, _, info = env.step("click[< prev]")  # back to the results: selections dropped
    assert info["anchor"] == ("results", "shoes", 1, "", ())
    obs, _, _, _, info = env.step("click[back to search]")
    assert info["anchor"] == ("search", "", 0, "", ()) and obs.startswith("WebShop [SEP]")


@pytest.mark.parametrize(
    "bad",
    [
        "click[nonexistent]",
        "search[]",
        "search[   ]",
        "click[buy now",
        "search[red shoes",
        "search[a[b]",
        "click[next >]]",
        "search red shoes",
        "buy[now]",
        "click[]",
        "search[shoes] and then click[buy now]",
    ],
)
def test_malformed_actions_are_invalid_and_change_nothing(env, bad):
    obs0, info0 = env.reset(seed=7)
    obs, r, term, trunc, info = env.step(bad)
    assert not info["action_valid"] and info["executed_action"] is None
    assert obs == obs0 and r == 0.0 and not term and not trunc
    assert info["anchor"] == info0["anchor"]


def test_search_only_where_the_search_bar_is(env):
    env.reset(seed=7)
    _, _, _, _, info = env.step("search[shoes]")
    anchor = info["anchor"]
    assert not info["has_search_bar"]
    _, _, _, _, info = env.step("search[socks]")
    assert not info["action_valid"] and info["anchor"] == anchor


def test_case_and_space_variants_execute_the_canonical_action(env):
    env.reset(seed=7)
    _, _, _, _, info = env.step("  SEARCH[Red   Running Shoes]\n")
    assert info["executed_action"] == "search[red running shoes]"
    _, _, _, _, info = env.step("Click[ Next  > ]")
    assert info["executed_action"] == "click[next >]"
    assert parse_action("click[Buy Now]") == ("click", "buy now")
    assert parse_action("click[a [b]]") == ("click", "a [b]")
    assert parse_action("click[a]b]") is None


def test_step_limit_truncates_at_15(env):
    env.reset(seed=1)
    for t in range(1, 16):
        _, _, term, trunc, _ = env.step("click[nonexistent]")
        assert not term and trunc == (t == 15)
    assert env.unwrapped.max_steps == 15


def test_splits_and_goal_choice(env):
    n_eval = ENV_TEST_KWARGS["webshop"]["eval_goals"]
    seen_eval = {env.reset(seed=s, options={"split": "eval"})[1]["goal_index"] for s in range(30)}
    seen_train = {env.reset(seed=s)[1]["goal_index"] for s in range(30)}
    assert max(seen_eval) < n_eval <= min(seen_train)
    # the seed picks the goal
    assert env.reset(seed=5)[1]["task"] == env.reset(seed=5)[1]["task"]
    _, info = env.reset(options={"split": "eval", "goal_index": 3})
    assert info["goal_index"] == 3
    _, info = env.reset(options={"goal_index": 0})
    assert info["goal_index"] == n_eval
    with pytest.raises(ConfigError, match="split"):
        env.reset(options={"split": "dev"})


def test_info_reports_data_and_noun_extractor(env):
    _, info = env.reset(seed=0)
    assert info["generated"] is True
    assert info["noun_extractor"] in ("fallback", "spacy:en_core_web_sm")
    assert info["task_type"] in ("beauty", "food", "fashion", "furniture", "electronics")
    assert info["score"] == 0.0


def test_bad_config_values_name_the_key(tmp_path):
    for key, value in [("size_match", "strict"), ("max_steps", 0), ("goal_source", "people"),
                       ("eval_goals", 0), ("bm25_b", 2.0), ("num_products", 0)]:  # fmt: skip
        with pytest.raises(ConfigError, match=re.escape(f"env.{key}")):
            agentrl.make("webshop", cache_dir=str(tmp_path), **{key: value})
    with pytest.raises(ConfigError, match=re.escape("env.num_prodcts is not a valid key")):
        agentrl.make("webshop", num_prodcts=10)


def test_too_few_goals_for_the_split_is_a_clear_error(tmp_path):
    with pytest.raises(
        WebShopDataError, match=re.escape("lower env.eval_goals or raise env.num_products")
    ):
        agentrl.make("webshop", cache_dir=str(tmp_path), num_products=3)


def test_human_goals_need_official_data(tmp_path, monkeypatch):
    monkeypatch.delenv("WEBSHOP_DATA", raising=False)
    with pytest.raises(WebShopDataError, match=re.escape("items_human_ins.json")):
        agentrl.make("webshop", cache_dir=str(tmp_path), goal_source="human")
