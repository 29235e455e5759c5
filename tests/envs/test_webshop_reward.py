"""WebShop's purchase reward: golden values on hand-made products and goals, and the original
test cases of ``web_agent_site/engine/goal.py`` (with their expected values)."""

from __future__ import annotations

import importlib.util
from dataclasses import replace
from math import isclose

import pytest

from agentrl.envs.webshop.reward import (
    RewardInputs,
    attribute_reward,
    fallback_nouns,
    fuzzy_score,
    make_noun_extractor,
    normalize_color,
    option_reward,
    purchase_reward,
    title_score,
    type_reward,
)

nouns = make_noun_extractor("fallback")

GOAL_PRODUCT = RewardInputs(
    query="deodorant",
    product_category="Beauty › Personal Care › Deodorants",
    title="Velora Aluminum Free Deodorant for Sensitive Skin",
)
ATTRS = ("aluminum free", "long lasting", "sensitive skin")
OPTIONS = ("lavender", "3 ounce (pack of 2)")
SELECTED = {"scent": "lavender", "size": "3 ounce (pack of 2)"}
CAP = 20.0
PERFECT = RewardInputs(
    query="deodorant",
    product_category="Beauty › Personal Care › Deodorants",
    title="Velora Aluminum Free Deodorant for Sensitive Skin",
    attributes=ATTRS,
    bullet_points=("ALUMINUM FREE: fresh all day",),
    description="Stays fresh.",
)


def buy(product=PERFECT, price=12.99, selected=SELECTED, size_match="fuzzy", cap=CAP):
    return purchase_reward(
        product, price, selected, GOAL_PRODUCT, ATTRS, OPTIONS, cap, nouns, size_match
    )


def test_perfect_purchase_scores_one():
    reward, info = buy()
    # (3 attributes + 2 options + price) / (3 + 2 + 1) * r_type 1.0
    assert reward == 1.0
    assert info["r_type"] == 1.0 and info["r_att"] == 1.0 and info["r_option"] == 1.0
    assert info["r_price"] == 1.0 and info["query_match"] and info["category_match"]
    assert info["title_score"] == 1.0
    assert info["w_att"] == 3 / 6 and info["w_option"] == 2 / 6 and info["w_price"] == 1 / 6


def test_each_missing_part_costs_one_sixth():
    no_long_lasting = replace(PERFECT, attributes=ATTRS[:1] + ATTRS[2:])
    # 2 of 3 attributes: (2 + 2 + 1) / 6
    assert buy(no_long_lasting)[0] == pytest.approx(5 / 6)
    # scent not selected: (3 + 1 + 1) / 6
    assert buy(selected={"size": "3 ounce (pack of 2)"})[0] == pytest.approx(5 / 6)
    # over the price cap: (3 + 2 + 0) / 6
    reward, info = buy(price=25.0)
    assert reward == pytest.approx(5 / 6) and info["r_price"] == 0.0
    # missing attribute and over the cap: (2 + 2 + 0) / 6
    assert buy(no_long_lasting, price=25.0)[0] == pytest.approx(4 / 6)
    # nothing but the type: (0 + 0 + 0) / 6
    bare = RewardInputs(PERFECT.query, PERFECT.product_category, "Velora Deodorant Sensitive")
    assert buy(bare, price=99.0, selected={})[0] == 0.0


def test_attribute_found_in_title_features_or_description_counts():
    # No attribute list at all, but each goal attribute appears in one text field.
    p = RewardInputs(
        "deodorant",
        PERFECT.product_category,
        "Velora Aluminum Free Deodorant",  # aluminum free
        (),
        ("LONG LASTING: fresh all day",),  # long lasting
        "Made for sensitive skin.",  # sensitive skin
    )
    assert attribute_reward(ATTRS, p.attributes, p.title, p.bullet_points, p.description) == (
        1.0,
        3,
    )
    # A fuzzy match with the attribute list: token_set_ratio("long-lasting!", "long lasting")
    # = 100 after blanking punctuation.
    assert attribute_reward(["long lasting"], ["Long-Lasting!"], "", [], "") == (1.0, 1)


def test_wrong_type_zeroes_the_reward():
    speaker = RewardInputs(
        "bluetooth speaker",
        "Electronics › Portable Audio › Speakers",
        "Lumix Bluetooth Speaker, Waterproof",
        ATTRS,  # even with every attribute, option and the price right
    )
    reward, info = buy(speaker)
    # goal nouns: velora aluminum free deodorant sensitive skin; none in the speaker title
    assert info["title_score"] == 0.0 and info["r_type"] == 0.0 and reward == 0.0


def test_type_reward_levels():
    goal = GOAL_PRODUCT
    # 1 of the goal's 6 nouns (velora), other query and category: no match -> 0.5
    t = type_reward("speaker", "Electronics › Speakers", "Velora Bluetooth Speaker",
                    goal.query, goal.product_category, goal.title, nouns)  # fmt: skip
    assert t["title_score"] == pytest.approx(1 / 6) and t["r_type"] == 0.5
    # the same title under the goal's category (2 shared levels) -> 1.0
    t = type_reward("speaker", "Beauty › Personal Care › Speakers", "Velora Bluetooth Speaker",
                    goal.query, goal.product_category, goal.title, nouns)  # fmt: skip
    assert t["category_match"] and t["r_type"] == 1.0
    # 1 of 11 goal nouns = 0.0909 < 0.1 -> 0.1, although the query matches
    long_title = "Velora Aluminum Free Deodorant Stick Sensitive Skin Lavender Travel Gift Set"
    t = type_reward("deodorant", "x", "Velora Speaker", "deodorant", "y", long_title, nouns)
    assert t["query_match"] and t["title_score"] == pytest.approx(1 / 11) and t["r_type"] == 0.1
    # a goal title without nouns gives the neutral 0.2 (not > 0.2): type rests on query/category
    assert title_score(["a"], []) == 0.2


def test_half_reward_when_only_the_title_half_matches():
    p = RewardInputs("speaker", "Electronics › Speakers", "Velora Bluetooth Speaker", ATTRS)
    # (3 + 2 + 1) / 6 * r_type 0.5
    assert buy(p)[0] == pytest.approx(0.5)


def test_option_fuzziness_and_exact_size_matching():
    # token_set_ratio("3 ounce pack of 1", "3 ounce pack of 2") = 94 > 85: the original counts
    # the wrong pack size as a match; size_match="exact" does not.
    wrong_pack = {"scent": "lavender", "size": "3 ounce (pack of 1)"}
    assert fuzzy_score("3 ounce (pack of 1)", "3 ounce (pack of 2)") == 94
    assert buy(selected=wrong_pack)[0] == 1.0
    assert buy(selected=wrong_pack, size_match="exact")[0] == pytest.approx(5 / 6)
    # "x-large" for "large": fuzzy 100 (subset), exact no match
    assert option_reward({"size": "x-large"}, ["large"]) == (1.0, 1)
    assert option_reward({"size": "x-large"}, ["large"], "exact") == (0.0, 0)
    assert option_reward({"size": "Large"}, ["large"], "exact") == (1.0, 1)
    # options not named like size stay fuzzy in exact mode
    assert option_reward({"color": "powder snow"}, ["cool powder snow"], "exact") == (1.0, 1)


def test_synthetic_goal_options_are_compared_as_name_value_pairs():
    # The original passes {"size": "large"}.items(): thefuzz reads ("size", "large") as the
    # words "size large". token_set_ratio("x large", "size large") = 83: no match (while the
    # bare value "large" would match "x-large" with 100); the right value is a subset: 100.
    assert option_reward({"size": "x-large"}, [("size", "large")]) == (0.0, 0)
    assert option_reward({"size": "large"}, [("size", "large")]) == (1.0, 1)
    # a pair is colour-normalised only when name or value is exactly a colour word
    assert option_reward({"color": "navy blue"}, [("color", "blue")]) == (1.0, 1)
    assert option_reward({"color": "light blue"}, [("color", "navy blue")]) == (1.0, 1)
    # exact size matching compares the value of the pair
    assert option_reward({"size": "large"}, [("size", "large")], "exact") == (1.0, 1)
    assert option_reward({"size": "x-large"}, [("size", "large")], "exact") == (0.0, 0)


def test_colour_normalisation_quirks():
    # The first colour word (alphabetical) contained in the text: "blue" < "light" < "navy".
    assert normalize_color("navy blue") == "blue" and normalize_color("light blue") == "blue"
    assert option_reward({"color": "light blue"}, ["navy blue"]) == (1.0, 1)
    assert normalize_color("shredded") == "red"  # a substring, as in the original
    assert normalize_color("xl") == "xl"


def test_fuzzy_score_is_thefuzz_token_set_ratio():
    assert fuzzy_score("essential oil", "essential oils") == 96
    assert fuzzy_score("tea tree", "Tea-Tree") == 100
    assert fuzzy_score("", "a") == 0
    # shared "tea": best of ratio("tea", "tea bag") = 2*3/(3+7) = 60, ratio("tea", "tea tree")
    # = 2*3/(3+8) = 55 and ratio("tea bag", "tea tree") = 2*4/(7+8) = 53
    assert fuzzy_score("tea bag", "tea tree") == 60


# -- the original's own test cases (tests/web-agent-site/engine/test_goal.py) -----------------
def test_original_attribute_cases():
    goal = ["tea tree", "essential oils", "natural ingredients"]
    assert attribute_reward(goal, ["tea tree", "essential oil", "natural ingredients"], "", [],
                            "") == (1.0, 3)  # fmt: skip
    assert attribute_reward(goal, ["essential oil", "natural ingredients"], "", [], "") == (
        2 / 3,
        2,
    )
    assert attribute_reward(
        goal,
        [],
        "",
        ["This shampoo has essential oils and smells like lemons"],
        "Best shampoo on the market, made with natural ingredients",
    ) == (2 / 3, 2)
    assert attribute_reward(
        goal,
        ["tea bag", "earl gray", "lipton"],
        "English tea for breakfast",
        ["Soothing aroma", "Calming, great feeling"],
        "Best tea made by Lipton, great to pair with breakfast",
    ) == (0.0, 0)


def test_original_option_cases():
    def sel(*values):
        return {f"o{i}": v for i, v in enumerate(values)}

    assert option_reward(sel("pack of 12", "grey", "XL"), ["grey", "XL", "pack of 12"]) == (1, 3)
    assert option_reward(sel("pack of 12", "blue", "XL"), ["grey", "XL", "pack of 12"]) == (
        2 / 3,
        2,
    )
    assert option_reward(sel("pack of 12", "powder snow", "XL"),
                         ["cool powder snow", "XL", "pack of 12"]) == (1, 3)  # fmt: skip
    assert option_reward(sel("goal 1", "goal 2"), []) == (None, 0)
    assert option_reward({}, ["goal 1", "goal 2"]) == (0, 0)


def test_original_get_reward_cases():
    title = "Mens D.O.N. Issue 2 Gca Basketball Sneakers Shoes Casual - Off White"
    goal = RewardInputs("Query 1", "a › b › c", title)
    attrs = ["tea tree", "essential oils", "natural ingredients"]
    selected = {"color": "grey", "size": "XL"}
    p = RewardInputs("Query 1", "a › b › c", goal.title, ("tea tree", "essential oil",
                     "natural ingredients"))  # fmt: skip
    r, _ = purchase_reward(p, 35, selected, goal, attrs, ["grey", "XL"], 40.0, nouns)
    assert r == 1.0
    # Only "natural ingredients" found (the original passes the bullet points as one string,
    # whose characters get joined: its "essential oils" is not found): (1 + 2 + 1) / 6
    p = RewardInputs("Query 1", "a › b › c", goal.title, (), tuple("This shampoo has essential"),
                     "Best shampoo on the market, made with natural ingredients")  # fmt: skip
    r, _ = purchase_reward(p, 35, selected, goal, attrs, ["grey", "XL"], 40.0, nouns)
    assert isclose(r, 2 / 3)
    # a third goal option nobody selected: (1 + 2 + 1) / 7 = 0.5714
    r, _ = purchase_reward(p, 35, selected, goal, attrs, ["grey", "XL", "pack of 12"], 40.0, nouns)
    assert isclose(r, 4 / 7)
    # other query, one shared category level, title score 0.15 (spaCy) / 0.154 (fallback):
    # r_type 0.5 -> 0.2857
    goal = RewardInputs("Query 1", "a › b › c", "Saireed UL Listed 2 Prong Power Cord for JBL "
                        "Bar 3.1 Bar 2.1 Channel 4K Ultra HD Soundbar")  # fmt: skip
    p = RewardInputs("Query 2", "a › d › e", "BRST AC Power Cord Outlet Socket Cable Plug Lead "
                     "for Panasonic SC-HT830V DVD/VCR Combo Home Theater System", (),
                     tuple("This shampoo has essential"),
                     "Best shampoo on the market, made with natural ingredients")  # fmt: skip
    r, info = purchase_reward(p, 35, selected, goal, attrs, ["grey", "XL", "pack of 12"], 40.0,
                              nouns)  # fmt: skip
    assert info["r_type"] == 0.5 and isclose(r, 2 / 7)


TITLE_PAIRS = [
    # (goal title, purchased title, spaCy's score in the original tests, fallback's score)
    ("Mens D.O.N. Issue 2 Gca Basketball Sneakers Shoes Casual - Off White",
     "PEAK High Top Mens Basketball Shoes Lou Williams Streetball Master Breathable Non Slip "
     "Outdoor Sneakers", 0.333, 4 / 9),
    ("Saireed UL Listed 2 Prong Power Cord for JBL Bar 3.1 Bar 2.1 Channel 4K Ultra HD Soundbar "
     "Home Theater System Subwoofer",
     "BRST AC Power Cord Outlet Socket Cable Plug Lead for Panasonic SC-HT830V DVD/VCR Combo Home "
     "Theater System", 0.3, 5 / 17),
    ("Saireed UL Listed 2 Prong Power Cord for JBL Bar 3.1 Bar 2.1 Channel 4K Ultra HD Soundbar",
     "BRST AC Power Cord Outlet Socket Cable Plug Lead for Panasonic SC-HT830V DVD/VCR Combo Home "
     "Theater System", 0.15, 2 / 13),
    ("Rusticware 921ORB Kitchen and Bath Cabinet Knob",
     "Minkissy 2pcs Stainless Steel Eyebrow Tweezers Blackhead Acne Remover Portable Makeup "
     "Tweezers (Silver)", 0.0, 0.0),
]  # fmt: skip


@pytest.mark.parametrize("goal,bought,spacy_score,fallback_score", TITLE_PAIRS)
def test_fallback_title_scores(goal, bought, spacy_score, fallback_score):
    score = title_score(fallback_nouns(bought), fallback_nouns(goal))
    assert score == pytest.approx(fallback_score)


def test_fallback_noun_rules():
    # function words, plain numbers and -ed participles go; "4k", "speed", adjectives stay
    assert fallback_nouns("UL Listed 2 Prong Cord for the 4K TV, High Speed 3.1") == [
        "ul", "prong", "cord", "4k", "tv", "high", "speed",
    ]  # fmt: skip


def test_noun_extractor_choice():
    assert make_noun_extractor("fallback").name == "fallback"
    has_model = importlib.util.find_spec("en_core_web_sm") is not None
    if has_model:
        assert make_noun_extractor("auto").name == "spacy:en_core_web_sm"
    else:
        assert make_noun_extractor("auto").name == "fallback"
        with pytest.raises(RuntimeError, match="spacy download en_core_web_sm"):
            make_noun_extractor("spacy")


@pytest.mark.parametrize("goal,bought,spacy_score,fallback_score", TITLE_PAIRS)
def test_spacy_title_scores_match_the_original(goal, bought, spacy_score, fallback_score):
    pytest.importorskip("en_core_web_sm", reason="spaCy's en_core_web_sm is not installed")
    ex = make_noun_extractor("spacy")
    assert title_score(ex(bought), ex(goal)) == pytest.approx(spacy_score, abs=0.05)
