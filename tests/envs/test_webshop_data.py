"""WebShop data: the generated catalogue, goals and price caps, the official-file loader and
its errors, and the BM25 search engine against a plain-Python reference."""

from __future__ import annotations

import json
import math
import random
import re
from collections import Counter

import numpy as np
import pytest

import agentrl
from agentrl.envs.webshop import data, generate
from agentrl.envs.webshop.reward import fuzzy_score, option_reward
from agentrl.envs.webshop.search import Analyzer, SearchIndex, product_document


# -- generated catalogue ------------------------------------------------------------------------
def test_generation_is_deterministic_and_prefix_stable():
    a = generate.generate_catalog(60, seed=0)
    assert a == generate.generate_catalog(60, seed=0)
    assert generate.generate_catalog(80, seed=0)[:60] == a  # product i depends on (seed, i)
    assert generate.generate_catalog(60, seed=1) != a
    assert len({p["asin"] for p in generate.generate_catalog(2000)}) == 2000


def test_products_mention_exactly_their_own_attributes():
    types = {t.query: t for t in generate.PRODUCT_TYPES}
    for p in generate.generate_catalog(400, seed=3):
        text = " ".join([p["title"], " ".join(p["bullet_points"]), p["description"]]).lower()
        for attribute in generate.attribute_pool(types[p["query"]]):
            assert (attribute in text) == (attribute in p["attributes"]), (attribute, p["title"])
        assert set(p["instruction_attributes"]) <= set(p["attributes"])
        assert 1 <= len(p["instruction_attributes"]) <= 3


def test_attributes_of_a_type_never_match_each_other():
    for t in generate.PRODUCT_TYPES:
        pool = generate.attribute_pool(t)
        assert len(set(pool)) == len(pool)
        for i, a in enumerate(pool):
            for b in pool[i + 1 :]:
                assert fuzzy_score(a, b) <= 85, (t.query, a, b)


def test_selecting_the_wanted_option_always_matches():
    # Colour normalisation is by substring ("sandalwood" would become "sand"): the generator's
    # option values are chosen so the right selection scores under both goal kinds.
    for t in generate.PRODUCT_TYPES:
        for name, values in t.options:
            for v in values:
                assert option_reward({name: v}, [(name, v)]) == (1.0, 1), (name, v)
                assert option_reward({name: v}, [v]) == (1.0, 1), (name, v)


def test_catalogue_covers_the_five_categories():
    rows = generate.generate_catalog(1000)
    assert set(Counter(p["category"] for p in rows)) == {
        "beauty", "food", "fashion", "furniture", "electronics",
    }  # fmt: skip
    assert len({p["query"] for p in rows}) == len(generate.PRODUCT_TYPES)
    ranged = [p for p in rows if len(p["pricing"]) == 2]
    assert 50 < len(ranged) < 150  # about one in ten
    p = ranged[0]
    assert p["price_tag"] == f"${p['pricing'][0]} to ${p['pricing'][1]}"


# -- goals and prices ---------------------------------------------------------------------------
def _products(n=40, seed=0):
    return [data._product_from_dict(d) for d in generate.generate_catalog(n, seed)]


def test_synthetic_goals_cover_every_option_combination():
    products = _products()
    rng = np.random.default_rng(0)
    prices = data.product_prices(products, rng)
    goals = data.build_goals(products, prices, "synthetic", rng)
    assert len(goals) == sum(len(data.option_combinations(p)) for p in products)
    by_product: dict[int, set] = {}
    for i in range(len(goals)):
        g = goals[i]
        by_product.setdefault(g.product, set()).add(g.options)
        p = products[g.product]
        assert g.asin == p.asin and g.attributes == p.instruction_attributes
        assert g.option_names == tuple(sorted(n for n, _ in p.options))
        options = ", and ".join(f"{n}: {v}" for n, v in zip(g.option_names, g.options))
        assert g.instruction == p.instruction + (f" with {options}" if options else "") + (
            f", and price lower than {g.price_upper:.2f} dollars"
        )
        assert prices[g.product] <= g.price_upper
    for i, combos in by_product.items():
        assert combos == set(data.option_combinations(products[i]))


def test_goal_order_is_the_originals_shuffle():
    products = _products(12)
    rng = np.random.default_rng(0)
    goals = data.build_goals(products, data.product_prices(products, rng), "synthetic", rng)
    unshuffled = [(i, c) for i, p in enumerate(products)
                  for c in range(len(data.option_combinations(p)))]  # fmt: skip
    random.seed(233)  # what the original does before random.shuffle(goals)
    random.shuffle(unshuffled)
    assert [tuple(r) for r in goals.rows.tolist()] == unshuffled


def test_price_caps():
    rng = np.random.default_rng(0)
    # $35: the steps above are 40, 50, 60, 70; the larger of two distinct picks is never 40
    caps = data.price_caps(np.full(2000, 35.0), rng)
    counts = Counter(caps.tolist())
    assert set(counts) == {50.0, 60.0, 70.0}
    # P(max of 2 of 4 = 50) = 1/6, = 60: 2/6, = 70: 3/6
    assert counts[50.0] / 2000 == pytest.approx(1 / 6, abs=0.03)
    assert counts[70.0] / 2000 == pytest.approx(3 / 6, abs=0.03)
    # $975: only 980 and 990 -> always 990; $985: only 990 -> no cap; $40: 50..80 (strictly above)
    assert set(data.price_caps(np.full(50, 975.0), rng)) == {990.0}
    assert set(data.price_caps(np.array([985.0, 2000.0]), rng)) == {data.NO_PRICE_CAP}
    assert min(data.price_caps(np.full(200, 40.0), rng)) == 60.0
    assert data.price_text(data.NO_PRICE_CAP) == ""
    assert data.price_text(50.0) == ", and price lower than 50.00 dollars"


# -- official files -----------------------------------------------------------------------------
def _official(folder, subset="small"):
    shuffle_name, ins_name = data.OFFICIAL_FILES[subset]
    items = []
    for k in range(4):
        items.append({
            "asin": f"B00000000{k}",
            "name": f"Acme Trail Running Shoe Model {k}",
            "full_description": "A light shoe for trails.",
            "small_description": ["Rubber sole", "Breathable mesh upper"],
            "pricing": "$25.50" if k else "$10.00 to $20.00",
            "customization_options": {
                "Color": [{"value": "Navy/White", "image": None}, {"value": "Black"}],
                "Size": [{"value": " 9 ", "image": None}, {"value": "10", "image": None}],
                "Style": None,
            },
            "images": [""],
            "category": "fashion",
            "query": " Men's Running Shoes ",
            "product_category": "Clothing › Men › Shoes › Running",
        })  # fmt: skip
    items += [dict(items[1]), {**items[1], "asin": "nan"}, {**items[1], "asin": "B0000000000X"}]
    ins = {
        f"B00000000{k}": {
            "attributes": ["rubber sole", "breathable mesh"],
            "instruction": "i need running shoes with a rubber sole",
            "instruction_attributes": ["rubber sole"],
        }
        for k in range(3)
    }
    human = {
        f"B00000000{k}": [
            {"instruction": f"i want navy | white trail shoes in size {9 + k % 2}.",
             "instruction_attributes": ["rubber sole"],
             "instruction_options": ["navy | white", f"{9 + k % 2}"]},
            {"instruction": "no attributes: skipped", "instruction_attributes": [],
             "instruction_options": []},
        ]
        for k in range(4)
    }  # fmt: skip
    (folder / shuffle_name).write_text(json.dumps(items))
    (folder / ins_name).write_text(json.dumps(ins))
    (folder / data.HUMAN_FILE).write_text(json.dumps(human))
    return folder


def test_official_files_load_like_the_original(tmp_path):
    products = data.load_official(_official(tmp_path), "small", 0, need_human=True)
    assert [p.asin for p in products] == [f"B00000000{k}" for k in range(4)]  # no dup/nan/long
    p0, p3 = products[0], products[3]
    assert p0.pricing == (10.0, 20.0) and p0.price_tag == "$10.0 to $20.0"
    assert products[1].pricing == (25.5,) and products[1].price_tag == "$25.5"
    assert p0.options == (("color", ("navy | white", "black")), ("size", ("9", "10")))
    assert p0.query == "men's running shoes" and p0.title.startswith("Acme")
    assert p0.attributes == ("rubber sole", "breathable mesh") and p3.attributes == ("DUMMY_ATTR",)
    assert p3.instruction is None and len(p3.human_instructions) == 2
    assert [p.asin for p in data.load_official(tmp_path, "small", 2, True)] == [
        "B000000000", "B000000001",
    ]  # fmt: skip


def test_env_plays_official_human_goals(tmp_path):
    env = agentrl.make("webshop", data_dir=str(_official(tmp_path)), eval_goals=2,
                       cache_dir=str(tmp_path / "cache"))  # fmt: skip
    u = env.unwrapped
    assert len(u.store.goals) == 4 and u.store.source == "human" and not u.store.generated
    _, info = env.reset(seed=0, options={"split": "eval", "goal_index": 0})
    goal = u.goal
    # the human instruction without its final period, then the price cap
    wanted = f"i want navy | white trail shoes in size {goal.options[1]}"
    assert goal.instruction == wanted + data.price_text(goal.price_upper)
    assert goal.option_names == () and goal.attributes == ("rubber sole",)
    assert info["generated"] is False
    env.step("search[trail running shoe]")
    env.step(f"click[{goal.asin}]")
    for option in goal.options:
        assert env.step(f"click[{option}]")[4]["action_valid"]
    _, r, term, _, info = env.step("click[buy now]")
    assert term and r == 1.0 and info["won"]


def test_env_plays_official_synthetic_goals(tmp_path):
    env = agentrl.make("webshop", data_dir=str(_official(tmp_path)), goal_source="synthetic",
                       eval_goals=2, cache_dir=str(tmp_path / "cache"))  # fmt: skip
    u = env.unwrapped
    # three products with an instruction x (2 colours x 2 sizes)
    assert len(u.store.goals) == 12 and u.store.source == "synthetic"
    env.reset(seed=1)
    assert " with color: " in u.goal.instruction and ", and size: " in u.goal.instruction


def test_missing_official_files_name_them_and_how_to_get_them(tmp_path, monkeypatch):
    (tmp_path / "items_shuffle_1000.json").write_text("[]")
    with pytest.raises(data.WebShopDataError) as err:
        agentrl.make("webshop", data_dir=str(tmp_path))
    msg = str(err.value)
    assert "env.data_dir" in msg and "missing: items_ins_v2_1000.json, items_human_ins.json" in msg
    assert "setup.sh -d small" in msg and "drive.google.com" in msg
    monkeypatch.setenv("WEBSHOP_DATA", str(tmp_path / "nowhere"))
    with pytest.raises(data.WebShopDataError, match=r"WEBSHOP_DATA=.*is not a folder"):
        agentrl.make("webshop")
    monkeypatch.setenv("WEBSHOP_DATA", str(tmp_path))
    with pytest.raises(
        data.WebShopDataError, match=re.escape("items_shuffle.json, items_ins_v2.json")
    ):
        agentrl.make("webshop", official_subset="all")


# -- search ---------------------------------------------------------------------------------------
DOCS = [
    "red running shoes for men with rubber sole",
    "blue running shoe, lightweight",
    "red dress for women",
    "shoe rack with five shelves for shoes",
    "green tea bags",
    "running shorts",
    "blue running shoe, lightweight",  # a duplicate: ties keep catalogue order
]


def _reference_bm25(docs, query, k1=0.9, b=0.4):
    """Lucene's BM25 written out: idf = ln(1 + (N - df + 0.5) / (df + 0.5)),
    tf part = tf / (tf + k1 (1 - b + b |d| / avgdl))."""
    analyze = Analyzer()
    toks = [analyze(d) for d in docs]
    avgdl = sum(map(len, toks)) / len(toks)
    scores = []
    for t in toks:
        s = 0.0
        for q in analyze(query):
            df = sum(q in d for d in toks)
            tf = t.count(q)
            if tf:
                idf = math.log(1 + (len(toks) - df + 0.5) / (df + 0.5))
                s += idf * tf / (tf + k1 * (1 - b + b * len(t) / avgdl))
        scores.append(s)
    return scores


@pytest.mark.parametrize("query", ["running shoes", "red", "shoes for women", "tea", "xyz", "a"])
def test_search_equals_the_reference_ranking(query):
    index = SearchIndex.build(DOCS)
    ref = _reference_bm25(DOCS, query)
    expected = sorted((i for i, s in enumerate(ref) if s > 0), key=lambda i: (-ref[i], i))
    assert index.search(query, k=50) == expected
    assert index.search(query, k=2) == expected[:2]
    np.testing.assert_allclose(index.scores(query), ref, rtol=1e-5)


def test_analyzer_stems_and_drops_lucene_stop_words():
    assert Analyzer()("The Shoes, for RUNNING! and 2 Shelves") == ["shoe", "run", "2", "shelv"]
    index = SearchIndex.build(DOCS)
    assert index.search("running shoes")[:2] == [1, 6]  # "shoe" matches "shoes"; tie in order


def test_index_cache_round_trip(tmp_path):
    built = SearchIndex.load_or_build(tmp_path / "idx", DOCS)
    loaded = SearchIndex.load_or_build(tmp_path / "idx", ["ignored: the cache is used"])
    for q in ("running shoes", "red dress", "blue"):
        assert loaded.search(q) == built.search(q)


def test_product_document_is_the_originals_index_text():
    text = product_document("Acme Shoe", "Light.", ["Rubber sole", "Mesh"],
                            [("color", ["black", "navy"]), ("size", ["9"])])  # fmt: skip
    assert text == "acme shoe light. rubber sole color: black, navy, and size: 9"
