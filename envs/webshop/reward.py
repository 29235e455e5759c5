"""WebShop's purchase reward as pure functions (a reimplementation of the formula in the original
``web_agent_site/engine/goal.py``; no code was copied).

When the agent clicks ``buy now`` on product *p* with selected options *o*, for a goal *g* with
attributes ``A``, goal options ``O`` and a price cap::

    reward = r_type * (n_att + n_opt + r_price) / (|A| + |O| + 1)

- ``n_att``: goal attributes found on *p* (:func:`attribute_reward`): a fuzzy
  ``token_set_ratio`` above 85 with one of *p*'s attributes, or the attribute as a substring of
  *p*'s title, features (bullet points) or description (``get_attribute_reward``);
- ``n_opt``: goal options matched by a selected option (:func:`option_reward`): both sides are
  colour-normalised (:func:`normalize_color`), then fuzzy ``token_set_ratio`` above 85
  (``get_option_reward``). ``size_match="exact"`` (not the original; off by default) instead
  requires options named like ``size`` to be equal after normalisation, so buying ``x-large``
  for ``large`` no longer counts;
- ``r_price``: 1 if *p*'s price is at most the cap (``get_reward``);
- ``r_type`` (:func:`type_reward`, ``get_type_reward``): 1.0, lowered to 0.5 when neither the
  search query, nor at least two category levels, nor more than 20 % of the goal title's nouns
  match, to 0.1 when under 10 % of those nouns match, and to 0 when none does.

The fuzzy score is thefuzz 0.19's ``token_set_ratio`` as the original calls it: both strings
stripped of the characters 128-255, lowercased, every non-alphanumeric character turned into a
space, the score rounded to an integer; here computed with ``rapidfuzz``.

The title nouns come from a spaCy pipeline (the original uses ``en_core_web_sm``: tokens tagged
``NOUN`` or ``PROPN``) when one is installed; otherwise from :func:`fallback_nouns`, a rule-based
reconstruction documented there. :func:`make_noun_extractor` picks one and says which.

Synthetic goals name their options (``{"size": "large"}``); the original then compares each
selected value with the goal's ``(name, value)`` pair, which thefuzz reads as the text
``"size large"`` (so ``x-large`` no longer matches, 83), and colour-normalises such a pair only
when its name or value *is* a colour word. :func:`option_reward` takes such pairs and does the
same. The one departure: a goal without attributes scores ``r_att = 0`` instead of dividing by
zero (official goals always have attributes).
"""

from __future__ import annotations

import logging
import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Literal

from rapidfuzz import fuzz
from rapidfuzz.utils import default_process

log = logging.getLogger(__name__)

FUZZY_THRESHOLD = 85
"""A fuzzy match needs a (rounded) ``token_set_ratio`` strictly above this."""

# The colour vocabulary of WebShop's normaliser. It must be the same set, in alphabetical
# order, as the original's: a colour option is reduced to the first of these words (in this
# order) that occurs in it *as a substring*, so "navy blue" and "light blue" both become
# "blue" and "washable" becomes "ash" - quirks that the original reward has too.
_COLOR_TEXT = """
        alabaster apricot aqua ash asphalt azure banana beige black blue blush bordeaux bronze
        brown burgundy camel camo caramel champagne charcoal cheetah chestnut chocolate
        christmas coffee cognac copper coral cranberry cream crystal dark denim eggplant
        elephant espresso fuchsia gold granite grape graphite grass gray green grey heather
        indigo ivory ivy khaki lavender lemon leopard light lilac lime magenta maroon mauve
        merlot midnight mint mocha multicolor mushroom mustard natural navy nude olive orange
        peach pewter pink plum purple rainbow red rose royal rust sand sapphire seashell silver
        skull slate steel stone stonewash sunflower tan taupe teal tiger turquoise violet walnut
        wheat white wine yellow
"""
COLOR_WORDS: tuple[str, ...] = tuple(sorted(_COLOR_TEXT.split()))

SizeMatch = Literal["fuzzy", "exact"]
NounExtractorKind = Literal["auto", "spacy", "fallback"]


# -- fuzzy matching ---------------------------------------------------------------------------
_LATIN1 = {i: None for i in range(128, 256)}


def _prepare(text: str) -> str:
    # thefuzz's full_process(force_ascii=True): it removes only the codes 128-255 (not all
    # non-ASCII), then lowercases and blanks out non-alphanumerics.
    return default_process(str(text).translate(_LATIN1))


def fuzzy_score(a: str, b: str) -> int:
    """``token_set_ratio`` of ``a`` and ``b`` as thefuzz 0.19 computes it (0-100, an integer).

    >>> fuzzy_score("essential oil", "essential oils")
    96
    >>> fuzzy_score("Pack of 12", "pack-of-12")
    100
    """
    return round(fuzz.token_set_ratio(_prepare(a), _prepare(b)))


def normalize_color(text: str) -> str:
    """The first word of :data:`COLOR_WORDS` contained in ``text``, or ``text`` unchanged."""
    for color in COLOR_WORDS:
        if color in text:
            return color
    return text


# -- the four components ----------------------------------------------------------------------
def _category_levels(path: str) -> set[str]:
    return {level.strip() for level in path.split("›")}


def title_score(purchased_nouns: Sequence[str], goal_nouns: Sequence[str]) -> float:
    """Share of the goal title's nouns (counted with repeats) whose word the purchased title has.

    0.2 when the goal title has no noun at all (the original's neutral value).
    """
    if not goal_nouns:
        return 0.2
    return len(set(purchased_nouns) & set(goal_nouns)) / len(goal_nouns)


def type_reward(
    purchased_query: str,
    purchased_category: str,
    purchased_title: str,
    goal_query: str,
    goal_category: str,
    goal_title: str,
    nouns: Callable[[str], list[str]],
) -> dict[str, Any]:
    """Whether the purchased product is the same kind of thing as the goal product.

    Args:
        purchased_query, goal_query: the search query each product was collected under.
        purchased_category, goal_category: breadcrumbs such as ``"Beauty › Hair Care › Shampoo"``.
        purchased_title, goal_title: product titles; their nouns are compared.
        nouns: the noun extractor (:func:`make_noun_extractor`).

    Returns:
        ``{"r_type", "query_match", "category_match", "title_score"}``. ``r_type`` is 1.0 unless
        no query, category (two shared levels) or title (> 0.2) match: 0.5; then a title score
        under 0.1 gives 0.1 and a title score of 0 gives 0.0 (these last two apply even when the
        query matches, as in the original).
    """
    query_match = purchased_query == goal_query
    category_match = (
        len(_category_levels(purchased_category) & _category_levels(goal_category)) >= 2
    )
    score = title_score(nouns(purchased_title), nouns(goal_title))
    r_type = 1.0
    if not (query_match or category_match or score > 0.2):
        r_type = 0.5
    if score < 0.1:
        r_type = 0.1
    if score == 0.0:
        r_type = 0.0
    return {
        "r_type": r_type,
        "query_match": query_match,
        "category_match": category_match,
        "title_score": score,
    }


def attribute_reward(
    goal_attributes: Sequence[str],
    product_attributes: Sequence[str],
    title: str,
    bullet_points: Sequence[str],
    description: str,
) -> tuple[float, int]:
    """``(r_att, n_att)``: goal attributes the product has, as a fraction and as a count.

    An attribute counts when one of the product's attributes matches it fuzzily (score > 85), or
    else when it is a substring of the lowercased title, features or description. (The goal
    attribute itself is not lowercased: the official attributes already are.) A goal without
    attributes gives ``r_att = 0`` (the original would divide by zero; its goals always have
    some).
    """
    text_fields = (title.lower(), " ".join(bullet_points).lower(), description.lower())
    matches = 0
    for wanted in goal_attributes:
        if any(fuzzy_score(have, wanted) > FUZZY_THRESHOLD for have in product_attributes) or any(
            wanted in field for field in text_fields
        ):
            matches += 1
    return (matches / len(goal_attributes) if goal_attributes else 0.0), matches


def _is_size_option(name: str) -> bool:
    return "size" in name.lower()


GoalOption = str | tuple[str, str]


def _goal_option_text(wanted: GoalOption) -> str:
    """A goal option as the original's matcher sees it after colour normalisation."""
    if isinstance(wanted, str):
        return normalize_color(wanted)
    # normalize_color((name, value)) tests tuple membership: only an exact colour word counts;
    # otherwise thefuzz compares against str((name, value)), i.e. the words of both.
    for color in COLOR_WORDS:
        if color in wanted:
            return color
    return " ".join(wanted)


def option_reward(
    selected: Mapping[str, str],
    goal_options: Sequence[GoalOption],
    size_match: SizeMatch = "fuzzy",
) -> tuple[float | None, int]:
    """``(r_option, n_opt)``: goal options matched by the selected options.

    Args:
        selected: option name -> selected value (what the agent clicked on the item page).
        goal_options: the goal's options: values (human goals) or ``(name, value)`` pairs
            (synthetic goals, compared as the original compares them; see the module docstring).
        size_match: ``"fuzzy"`` (the original): every selected value is colour-normalised and
            matches a colour-normalised goal option when their fuzzy score is above 85.
            ``"exact"``: a value of an option whose name contains ``size`` matches only an equal
            goal option value (after lowercasing and blanking punctuation); other options as
            before.

    Returns:
        ``r_option`` is ``None`` when the goal has no options (it then plays no part), else the
        matched fraction; ``n_opt`` is the number of goal options matched (each at most once).
    """
    chosen = [(name, value, normalize_color(value)) for name, value in selected.items()]
    matches = 0
    for wanted in goal_options:
        wanted_text = _goal_option_text(wanted)
        wanted_value = wanted if isinstance(wanted, str) else wanted[1]
        for name, value, value_color in chosen:
            if size_match == "exact" and _is_size_option(name):
                hit = _prepare(value) == _prepare(wanted_value)
            else:
                hit = fuzzy_score(value_color, wanted_text) > FUZZY_THRESHOLD
            if hit:
                matches += 1
                break
    return (matches / len(goal_options) if goal_options else None), matches


def price_reward(price: float, price_upper: float) -> bool:
    """Whether ``price`` is within the goal's cap (goals without a cap carry 1,000,000)."""
    return price <= price_upper


@dataclass(frozen=True)
class RewardInputs:
    """The fields of a product and a goal that the reward reads."""

    query: str
    product_category: str
    title: str
    attributes: tuple[str, ...] = ()
    bullet_points: tuple[str, ...] = ()
    description: str = ""


def purchase_reward(
    purchased: RewardInputs,
    price: float,
    selected: Mapping[str, str],
    goal: RewardInputs,
    goal_attributes: Sequence[str],
    goal_options: Sequence[GoalOption],
    price_upper: float,
    nouns: Callable[[str], list[str]],
    size_match: SizeMatch = "fuzzy",
) -> tuple[float, dict[str, Any]]:
    """The reward of buying ``purchased`` at ``price`` with ``selected`` options for a goal.

    ``goal`` holds the goal *product*'s query, category and title (the type reward compares
    them); ``goal_attributes``, ``goal_options`` and ``price_upper`` come from the instruction.

    Returns:
        ``(reward, info)`` with ``info`` = ``r_type``, ``query_match``, ``category_match``,
        ``title_score``, ``r_att`` and ``w_att``, ``r_option`` and ``w_option`` (when the goal
        has options), ``r_price`` and ``w_price``: the components and their weights in the mean.
    """
    t = type_reward(
        purchased.query,
        purchased.product_category,
        purchased.title,
        goal.query,
        goal.product_category,
        goal.title,
        nouns,
    )
    r_att, n_att = attribute_reward(
        goal_attributes,
        purchased.attributes,
        purchased.title,
        purchased.bullet_points,
        purchased.description,
    )
    r_opt, n_opt = option_reward(selected, goal_options, size_match)
    r_price = price_reward(price, price_upper)
    parts = len(goal_attributes) + len(goal_options) + 1
    reward = (n_att + n_opt + int(r_price)) / parts * t["r_type"]
    info: dict[str, Any] = {**t, "r_att": r_att, "w_att": len(goal_attributes) / parts}
    if r_opt is not None:
        info.update(r_option=r_opt, w_option=len(goal_options) / parts)
    info.update(r_price=float(r_price), w_price=1 / parts)
    return reward, info


# -- title nouns ------------------------------------------------------------------------------
# Closed-class words (determiners, pronouns, prepositions, conjunctions, auxiliaries, particles
# and frequent adverbs): never tagged NOUN/PROPN by spaCy.
_FUNCTION_TEXT = """
    a an the this that these those each every all any some no both either neither another such
    i me my mine we us our ours you your yours he him his she her hers it its they them their
    theirs who whom whose which what whatever whichever
    about above across after against along amid among around as at before behind below beneath
    beside besides between beyond by despite down during except for from in inside into like
    near of off on onto out outside over past per since than through throughout till to toward
    towards under underneath unlike until up upon via with within without
    and or but nor so yet plus versus vs
    am is are was were be been being do does did done have has had having can could may might
    must shall should will would
    not very too also just only more most less least much many few quite really even ever never
    again always often here there then now well how when where why
"""
FUNCTION_WORDS: frozenset[str] = frozenset(_FUNCTION_TEXT.split())
_WORD = re.compile(r"[a-z0-9]+(?:['.][a-z0-9]+)*")
_NUMBER = re.compile(r"[0-9]+(?:[.,][0-9]+)*")


def fallback_nouns(text: str) -> list[str]:
    """Nouns of a product title without a tagger: a rule-based stand-in for spaCy (reconstructed).

    The title is lowercased and split into words (letters and digits, keeping inner ``.`` and
    ``'``: ``d.o.n``, ``men's``); a word is kept as a noun unless it is

    - a function word (:data:`FUNCTION_WORDS`: determiners, pronouns, prepositions,
      conjunctions, auxiliaries, frequent adverbs),
    - a plain number (``2``, ``3.1``; ``4k`` and ``2pcs`` are kept),
    - a past participle (five letters or more ending in ``ed`` but not ``eed``: ``listed``,
      ``padded``; ``speed`` is kept).

    Everything else counts, adjectives included: in title-case product names spaCy's small
    English model tags most content words as ``PROPN``/``NOUN`` anyway. On the title pairs of
    the original's tests this gives title scores 0.444 (spaCy: 0.333), 0.294 (0.3), 0.154
    (0.15) and 0 (< 0.05).
    """
    nouns = []
    for word in _WORD.findall(text.lower()):
        if word in FUNCTION_WORDS or _NUMBER.fullmatch(word):
            continue
        if len(word) >= 5 and word.endswith("ed") and not word.endswith("eed"):
            continue
        nouns.append(word)
    return nouns


class NounExtractor:
    """``extractor(text) -> list[str]``: lowercased nouns, memoised; ``name`` says which ran."""

    def __init__(self, name: str, fn: Callable[[str], list[str]], cache_size: int = 100_000):
        self.name = name
        self._fn = fn
        self._cache: dict[str, list[str]] = {}
        self._cache_size = cache_size

    def __call__(self, text: str) -> list[str]:
        found = self._cache.get(text)
        if found is None:
            found = self._fn(text)
            if len(self._cache) >= self._cache_size:
                self._cache.clear()
            self._cache[text] = found
        return found


def _spacy_extractor(model: str) -> NounExtractor:
    import importlib.util
    from pathlib import Path

    # Importing spaCy takes seconds: skip it when the pipeline is neither a package nor a path.
    if importlib.util.find_spec(model.replace("-", "_")) is None and not Path(model).exists():
        raise OSError(f"no installed spaCy pipeline named {model!r}")
    import spacy

    # Only the tagger is needed; the parser and NER would triple the time per title.
    nlp = spacy.load(model, exclude=["parser", "ner", "lemmatizer"])

    def nouns(text: str) -> list[str]:
        return [t.text.lower() for t in nlp(text) if t.pos_ in ("NOUN", "PROPN")]

    return NounExtractor(f"spacy:{model}", nouns)


_EXTRACTORS: dict[tuple[str, str], NounExtractor] = {}


def make_noun_extractor(
    kind: NounExtractorKind = "auto", model: str = "en_core_web_sm"
) -> NounExtractor:
    """The title-noun extractor: ``spacy`` (``model`` must load), ``fallback``
    (:func:`fallback_nouns`), or ``auto`` (spaCy when ``model`` loads, else the fallback, with a
    warning). One instance per process and setting.

    Raises:
        RuntimeError: ``kind="spacy"`` and the model does not load.
    """
    key = (kind, model)
    if key in _EXTRACTORS:
        return _EXTRACTORS[key]
    if kind == "fallback":
        extractor = NounExtractor("fallback", fallback_nouns)
    else:
        try:
            extractor = _spacy_extractor(model)
        except (ImportError, OSError) as exc:
            if kind == "spacy":
                raise RuntimeError(
                    f"env.noun_extractor='spacy' but the spaCy pipeline {model!r} does not load "
                    f"({exc}); install it (`python -m spacy download {model}`) or use "
                    "env.noun_extractor=auto|fallback."
                ) from exc
            log.warning(
                "WebShop reward: spaCy pipeline %r not available (%s); title nouns come from the "
                "rule-based fallback extractor, so type rewards can differ slightly from the "
                "original's.",
                model,
                type(exc).__name__,
            )
            extractor = NounExtractor("fallback", fallback_nouns)
    _EXTRACTORS[key] = extractor
    return extractor
