"""WebShop (``env=webshop``, ``agentrl/WebShop-v0``): find and buy the product an instruction
asks for, in the page flow and text of WebShop's text mode (``WebAgentTextEnv``,
``observation_mode="text"``), without its Flask server, Java search engine or spaCy
requirement.

Pages (their visible text joined with `` [SEP] ``, as the original's simple text mode does;
reconstructed from its HTML templates, without the empty text between tags):

- search: ``WebShop [SEP] Instruction: [SEP] <instruction> [SEP] Search``; the only action is
  ``search[<query>]``;
- results: ``Instruction: [SEP] <instruction> [SEP] Back to Search [SEP] Page 1 (Total results:
  50) [SEP] Next > [SEP] <ASIN> [SEP] <title> [SEP] <price> ...`` (ten products a page, at most
  50 results; ``< Prev`` from page 2 on; ``Next >`` is always offered, as in the original);
- item: ``... [SEP] Back to Search [SEP] < Prev [SEP] <option name> [SEP] <value> ... [SEP]
  <title> [SEP] Price: <price> [SEP] Rating: N.A. [SEP] Description [SEP] Features [SEP]
  Reviews [SEP] Buy Now``; clicking an option value selects it (one per option name);
- description / features / reviews: the description, the bullet points, or nothing (the
  original never loads reviews) after ``Back to Search [SEP] < Prev``; ``< Prev`` returns to the
  item page with its selections;
- done (after ``click[buy now]``): ``Thank you for shopping with us! [SEP] Your score (min 0.0,
  max 1.0) [SEP] <reward>`` (the original's done page also lists its MTurk code and, hidden, the
  goal; they are left out).

Actions: ``search[query]`` and ``click[button text]``, case-insensitive, as the original
lowercases them. ``info["admissible_actions"]`` lists ``search[<your query>]`` where the search
bar is (the text in the brackets is free) and ``click[x]`` for each clickable ``x`` (buttons,
product ASINs in lowercase, option values). Anything else - an unknown button, ``search[...]``
away from the search page, an empty query, unbalanced brackets - is an invalid action: the
page and the anchor stay as they were and the observation repeats the page (the original
ignores such actions too). Stricter than the original, which also accepts ``search[...]`` on
any page.

Reward: :func:`.reward.purchase_reward` on ``click[buy now]``, which ends the episode (success
or not: ``ends_only_on_success`` is False); 0 on every other step; 15 steps at most.
``won`` = reward 1.0. ``info["score"]`` = 100 x the reward (the number WebShop papers report
as "score"; success rate is the mean of ``won``); the step that buys also carries the reward
components (``r_type``, ``r_att``, ``r_option``, ``r_price``, ``query_match``,
``category_match``, ``title_score``, weights ``w_*``) and ``purchased_asin``/``goal_asin``.
Costs (``info["costs"]``): ``invalid`` and ``steps`` as every :class:`TextEnv`, and
``over_budget``: 1.0 at a purchase whose price exceeds the goal's price limit, else 0.0.

Anchor: (page, query, results page, ASIN, selected options): the state without history.

Goals (:mod:`.data`): ``reset(seed=s)`` draws a train goal uniformly with ``np_random``;
``reset(options={"split": "eval"})`` (or ``"test"``) draws from the test goals, the first
``eval_goals`` (500) of the original's shuffled list; ``{"goal_index": i}`` plays goal ``i`` of
the split.
"""

from __future__ import annotations

import functools
import logging
import re
from collections.abc import Hashable
from dataclasses import dataclass, field, replace
from typing import Any, Literal

import numpy as np

from agentrl.configuration import check, check_choice, from_mapping
from agentrl.env_api import TextEnv, Transition

from . import data
from .reward import RewardInputs, make_noun_extractor, purchase_reward
from .search import SearchIndex, product_document

log = logging.getLogger(__name__)

SEARCH_PLACEHOLDER = "search[<your query>]"
BACK_TO_SEARCH = "back to search"
NEXT_PAGE = "next >"
PREV_PAGE = "< prev"
BUY_NOW = "buy now"
SUB_PAGES = ("description", "features", "reviews")
SEP = " [SEP] "
PageKind = Literal["search", "results", "item", "description", "features", "reviews", "done"]


@dataclass(frozen=True)
class WebShopConfig:
    """Every WebShop setting with its default (``env.*`` keys)."""

    data_dir: str = ""
    """Folder with the official files; "" = ``$WEBSHOP_DATA``, and if that is unset too, a
    generated catalogue."""
    official_subset: Literal["small", "all"] = "small"
    """Official files to read: ``small`` = ``items_shuffle_1000.json`` +
    ``items_ins_v2_1000.json`` (setup.sh ``-d small``), ``all`` = the full files."""
    official_num_products: int = 0
    """Use only the first N official products (the original's ``num_products``); 0 = all."""
    num_products: int = 1000
    """Size of the generated catalogue (no official data); up to 100,000 and more."""
    generator_seed: int = 0
    """Seed of the generated catalogue, and of the prices drawn within price ranges and the
    goals' price caps (official data included)."""
    goal_source: Literal["auto", "human", "synthetic"] = "auto"
    """``human``: items_human_ins.json goals (official data only); ``synthetic``: a goal per
    product instruction and option combination; ``auto``: human with official data, synthetic
    with a generated catalogue."""
    eval_goals: int = 500
    """The first N goals of the shuffled list are the test split (``reset(options={"split":
    "eval"})``); the rest are the train split."""
    max_steps: int = 15
    search_top_k: int = 50
    """Results a search returns (the original's ``SEARCH_RETURN_N``)."""
    results_per_page: int = 10
    bm25_k1: float = 0.9
    """BM25 term-frequency saturation (pyserini's default, which WebShop used)."""
    bm25_b: float = 0.4
    """BM25 length normalisation (pyserini's default)."""
    noun_extractor: Literal["auto", "spacy", "fallback"] = "auto"
    """Title nouns for the type reward: spaCy (``spacy_model``), the rule-based fallback, or
    ``auto`` = spaCy when the model is installed, else the fallback."""
    spacy_model: str = "en_core_web_sm"
    size_match: Literal["fuzzy", "exact"] = "fuzzy"
    """Option reward for options named like ``size``: ``fuzzy`` as the original (``large``
    matches ``x-large``), ``exact`` requires equal values."""
    cache_dir: str = ""
    """Where generated catalogues and search indexes are cached; "" = ``$AGENTRL_CACHE/webshop``
    or ``~/.cache/agentrl/webshop``."""

    def __post_init__(self) -> None:
        check_choice("env.official_subset", self.official_subset, ("small", "all"))
        check_choice("env.goal_source", self.goal_source, ("auto", "human", "synthetic"))
        check_choice("env.noun_extractor", self.noun_extractor, ("auto", "spacy", "fallback"))
        check_choice("env.size_match", self.size_match, ("fuzzy", "exact"))
        check(self.official_num_products >= 0, "env.official_num_products",
              self.official_num_products, ">= 0")  # fmt: skip
        check(self.num_products >= 1, "env.num_products", self.num_products, ">= 1")
        check(self.eval_goals >= 1, "env.eval_goals", self.eval_goals, ">= 1")
        check(self.max_steps > 0, "env.max_steps", self.max_steps, "> 0")
        check(self.search_top_k >= 1, "env.search_top_k", self.search_top_k, ">= 1")
        check(self.results_per_page >= 1, "env.results_per_page", self.results_per_page, ">= 1")
        check(self.bm25_k1 > 0, "env.bm25_k1", self.bm25_k1, "> 0")
        check(0 <= self.bm25_b <= 1, "env.bm25_b", self.bm25_b, "in [0, 1]")
        check(bool(self.spacy_model), "env.spacy_model", self.spacy_model, "non-empty")


@dataclass
class Store:
    """Products, prices, goals and the search index of one configuration (shared per process)."""

    products: list[data.Product]
    prices: np.ndarray
    goals: data.GoalTable
    index: SearchIndex
    generated: bool
    source: str
    notice: str = ""
    """Where the data comes from, shown once per run (``WebShopEnv.data_notice``)."""
    asin_index: dict[str, int] = field(default_factory=dict)

    def __post_init__(self) -> None:
        self.asin_index = {p.asin: i for i, p in enumerate(self.products)}


_STORES: dict[tuple, Store] = {}


def load_store(cfg: WebShopConfig) -> Store:
    """The :class:`Store` of ``cfg`` (loaded once per process and configuration)."""
    root = data.official_dir(cfg.data_dir)
    key = (str(root), cfg.official_subset, cfg.official_num_products, cfg.num_products,
           cfg.generator_seed, cfg.goal_source, cfg.bm25_k1, cfg.bm25_b, cfg.cache_dir)  # fmt: skip
    if key in _STORES:
        return _STORES[key]
    if root is not None:
        source: data.GoalSource = "synthetic" if cfg.goal_source == "synthetic" else "human"
        where = "env.data_dir" if cfg.data_dir else "WEBSHOP_DATA"
        if not root.is_dir():
            raise data.WebShopDataError(
                f"{where}={str(root)!r} is not a folder. Expected the files "
                f"{', '.join(data.OFFICIAL_FILES[cfg.official_subset])} and {data.HUMAN_FILE} "
                f"there. {data.HOW_TO_GET}"
            )
        data.check_official_files(root, cfg.official_subset, source == "human", where)
        products = data.load_official(
            root, cfg.official_subset, cfg.official_num_products, source == "human"
        )
        folder = data.official_folder(
            cfg.cache_dir, root, cfg.official_subset, cfg.official_num_products
        )
        generated, what = False, f"official {cfg.official_subset} data from {root}"
    else:
        if cfg.goal_source == "human":
            raise data.WebShopDataError(
                "env.goal_source='human' needs the official items_human_ins.json, but no data "
                "folder is set (env.data_dir / WEBSHOP_DATA); use env.goal_source=auto or "
                f"synthetic with the generated catalogue. {data.HOW_TO_GET}"
            )
        source = "synthetic"
        folder = data.generated_folder(cfg.cache_dir, cfg.num_products, cfg.generator_seed)
        products = data.load_generated(folder, cfg.num_products, cfg.generator_seed)
        generated, what = True, f"GENERATED catalogue of {len(products)} products"
    rng = np.random.default_rng(cfg.generator_seed)
    prices = data.product_prices(products, rng)
    goals = data.build_goals(products, prices, source, rng)
    if len(goals) <= cfg.eval_goals:
        raise data.WebShopDataError(
            f"the {what} gives {len(goals)} {source} goals, not more than env.eval_goals="
            f"{cfg.eval_goals}, so no train goal is left; lower env.eval_goals"
            + (" or raise env.num_products." if generated else ".")
        )
    texts = (product_document(p.title, p.description, p.bullet_points, p.options) for p in products)
    index_dir = folder / f"index-k{cfg.bm25_k1:g}-b{cfg.bm25_b:g}"
    index = SearchIndex.load_or_build(index_dir, texts, cfg.bm25_k1, cfg.bm25_b)
    notice = (
        f"WebShop: {what}, {len(goals)} {source} goals ({cfg.eval_goals} test, "
        f"{len(goals) - cfg.eval_goals} train)"
        + ("; results are not comparable to published WebShop numbers" if generated else "")
    )
    log.info("%s", notice)  # the env pools show it once per run (TextEnv.data_notice)
    store = Store(products, prices, goals, index, generated, source, notice)
    _STORES[key] = store
    return store


@dataclass(frozen=True)
class Page:
    """The state of the site; also the anchor (see the module docstring)."""

    kind: PageKind = "search"
    query: str = ""
    page: int = 0
    asin: str = ""
    options: tuple[tuple[str, str], ...] = ()
    """Selected (option name, value), sorted by name."""


_ACTION = re.compile(r"\s*(search|click)\s*\[(.*)\]\s*", re.IGNORECASE | re.DOTALL)
_SPACES = re.compile(r"\s+")


def _balanced(text: str) -> bool:
    depth = 0
    for ch in text:
        depth += (ch == "[") - (ch == "]")
        if depth < 0:
            return False
    return depth == 0


def parse_action(text: str) -> tuple[str, str] | None:
    """``(verb, argument)`` with the verb lowercased and the argument lowercased with single
    spaces, or None when ``text`` is not ``search[...]``/``click[...]`` with balanced brackets.

    >>> parse_action("  Click[Buy  Now] ")
    ('click', 'buy now')
    >>> parse_action("search[red shoes") is None
    True
    """
    m = _ACTION.fullmatch(text)
    if m is None or not _balanced(m.group(2)):
        return None
    return m.group(1).lower(), _SPACES.sub(" ", m.group(2).strip().lower())


@functools.lru_cache(maxsize=1 << 16)  # product names and option values: they repeat
def _normalize(text: str) -> str:
    return _SPACES.sub(" ", text.strip().lower())


class WebShopEnv(TextEnv):
    """The WebShop shopping task as a text environment (see the module docstring)."""

    ends_only_on_success = False
    cost_names = (*TextEnv.cost_names, "over_budget")

    def __init__(self, render_mode: str | None = None, **kwargs: Any):
        super().__init__()
        self.cfg = from_mapping(WebShopConfig, kwargs, path="env")
        self.max_steps = self.cfg.max_steps
        self.render_mode = render_mode
        self.store = load_store(self.cfg)
        self.data_notice = self.store.notice
        self.nouns = make_noun_extractor(self.cfg.noun_extractor, self.cfg.spacy_model)
        self.goal: data.Goal | None = None
        self.state = Page()
        self._results: tuple[str, list[int]] = ("", [])
        self._clickables: dict[str, str] = {}
        self._option_of: dict[str, str] = {}
        self._reward = 0.0
        self._reward_info: dict[str, Any] = {}
        self._over_budget = 0.0

    # -- goals ------------------------------------------------------------------------------
    def split_range(self, split: str) -> range:
        """Goal positions of ``split``: ``eval``/``test`` = the first ``eval_goals``, ``train``
        = the rest."""
        check_choice("options['split']", split, ("train", "eval", "test"))
        n = len(self.store.goals)
        return (
            range(self.cfg.eval_goals)
            if split in ("eval", "test")
            else range(self.cfg.eval_goals, n)
        )

    def _reset(self, options: dict[str, Any] | None) -> str:
        options = options or {}
        goals = self.split_range(str(options.get("split", "train")))
        if "goal_index" in options:
            index = goals[int(options["goal_index"])]
        else:
            index = goals[int(self.np_random.integers(len(goals)))]
        self.goal = self.store.goals[index]
        self.state = Page()
        self._reward, self._reward_info = 0.0, {}
        self._set_clickables()
        return self._render()

    # -- pages ------------------------------------------------------------------------------
    def _search(self, query: str) -> list[int]:
        # Paging re-reads the same query; keep its hits rather than searching again.
        if self._results[0] != query:
            self._results = (query, self.store.index.search(query, self.cfg.search_top_k))
        return self._results[1]

    def _page_products(self) -> list[data.Product]:
        hits = self._search(self.state.query)
        per = self.cfg.results_per_page
        start = (self.state.page - 1) * per
        return [self.store.products[i] for i in hits[start : start + per]]

    def _product(self) -> data.Product:
        return self.store.products[self.store.asin_index[self.state.asin]]

    def _set_clickables(self) -> None:
        s = self.state
        names: list[str] = []
        option_of: dict[str, str] = {}
        if s.kind == "results":
            names = [BACK_TO_SEARCH, *([PREV_PAGE] if s.page > 1 else []), NEXT_PAGE]
            names += [p.asin.lower() for p in self._page_products()]
        elif s.kind == "item":
            names = [BACK_TO_SEARCH, PREV_PAGE, *SUB_PAGES, BUY_NOW]
            for name, values in self._product().options:
                for v in values:
                    option_of[v] = name  # a value offered twice selects the last (as the original)
        elif s.kind in SUB_PAGES:
            names = [BACK_TO_SEARCH, PREV_PAGE]
        clickables = {_normalize(n): n for n in names}
        clickables.update({_normalize(v): v for v in option_of})
        self._clickables = clickables
        self._option_of = option_of

    def _render(self) -> str:
        s = self.state
        instruction = self.goal.instruction if self.goal else ""
        if s.kind == "search":
            return SEP.join(["WebShop", "Instruction:", instruction, "Search"])
        if s.kind == "done":
            return SEP.join(
                ["Thank you for shopping with us!", "Your score (min 0.0, max 1.0)",
                 f"{self._reward}"]
            )  # fmt: skip
        parts = ["Instruction:", instruction, "Back to Search"]
        if s.kind == "results":
            total = len(self._search(s.query))
            parts.append(f"Page {s.page} (Total results: {total})")
            if s.page > 1:
                parts.append("< Prev")
            parts.append("Next >")
            for p in self._page_products():
                parts += [p.asin, p.title, p.price_tag]
            return SEP.join(parts)
        product = self._product()
        parts.append("< Prev")
        if s.kind == "item":
            for name, values in product.options:
                parts += [name, *values]
            parts += [product.title, f"Price: {product.price_tag}", f"Rating: {product.rating}"]
            parts += ["Description", "Features", "Reviews", "Buy Now"]
        elif s.kind == "description":
            parts.append(product.description)
        elif s.kind == "features":
            parts += list(product.bullet_points)
        # Reviews: the original never loads any (its reviews file is commented out).
        return SEP.join(p for p in parts if p != "")

    # -- stepping ---------------------------------------------------------------------------
    def _buy(self) -> float:
        product, goal = self._product(), self.goal
        goal_product = self.store.products[goal.product]
        reward, info = purchase_reward(
            purchased=_reward_inputs(product),
            price=float(self.store.prices[self.store.asin_index[product.asin]]),
            selected=dict(self.state.options),
            goal=_reward_inputs(goal_product),
            goal_attributes=goal.attributes,
            # Synthetic goals name their options; the reward compares (name, value) pairs.
            goal_options=tuple(zip(goal.option_names, goal.options))
            if goal.option_names
            else goal.options,
            price_upper=goal.price_upper,
            nouns=self.nouns,
            size_match=self.cfg.size_match,
        )
        self._reward = reward
        self._reward_info = {**info, "purchased_asin": product.asin, "goal_asin": goal.asin}
        self._over_budget = 0.0 if info["r_price"] else 1.0
        return reward

    def _step(self, action: str) -> Transition:
        self._over_budget = 0.0  # set by _buy
        parsed = parse_action(action) if len(action) <= 4096 else None
        s = self.state
        if parsed is None:
            return self._invalid()
        verb, arg = parsed
        if verb == "search":
            if s.kind != "search" or not arg:
                return self._invalid()
            self.state = Page("results", arg, 1)
            executed = f"search[{arg}]"
        else:
            target = self._clickables.get(arg)
            if target is None:
                return self._invalid()
            executed = f"click[{target}]"
            if target == BUY_NOW and s.kind == "item":
                reward = self._buy()
                self.state = replace(s, kind="done")
                self._set_clickables()
                return Transition(self._render(), reward, True, True, executed,
                                  dict(self._reward_info))  # fmt: skip
            self.state = self._click(target)
        self._set_clickables()
        return Transition(self._render(), 0.0, False, True, executed)

    def _click(self, target: str) -> Page:
        s = self.state
        if target == BACK_TO_SEARCH:
            return Page()
        if s.kind == "results":
            if target == NEXT_PAGE:
                return replace(s, page=s.page + 1)
            if target == PREV_PAGE:
                return replace(s, page=s.page - 1)
            return Page("item", s.query, s.page, target.upper())
        if s.kind == "item":
            if target == PREV_PAGE:  # back to the results; selections are dropped
                return Page("results", s.query, s.page)
            if target in SUB_PAGES and target not in self._option_of:
                return replace(s, kind=target)  # type: ignore[arg-type]
            selected = dict(s.options)
            selected[self._option_of[target]] = target
            return replace(s, options=tuple(sorted(selected.items())))
        # A description/features/reviews page: "< prev" is the only other button.
        return replace(s, kind="item")

    def _invalid(self) -> Transition:
        return Transition(self._render(), 0.0, False, False, None)

    # -- demonstrations ---------------------------------------------------------------------
    def demonstration(self) -> list[str] | None:
        """A shortest way to buy the goal product with the goal's options from the current page.

        From the search page: ``search[<query>]`` with the first of (the instruction, the goal
        product's title) whose results hold the goal product, then ``next >``/``< prev`` to its
        results page, ``click[<asin>]``, a click on each goal option value the product offers
        and is not yet selected, and ``click[buy now]``. From other pages it first goes back
        (``< prev``, or ``back to search`` when the current results miss the product). ``[]``
        once bought; None when no query finds the goal product. Paths found this way reach
        reward 1.0 whenever the goal product matches its own goal (price cap included)."""
        if self.goal is None:
            return None
        return self._plan(self.state)

    def _plan(self, s: Page) -> list[str] | None:
        goal = self.goal
        assert goal is not None
        if s.kind == "done":
            return []
        if s.kind in SUB_PAGES:
            rest = self._plan(replace(s, kind="item"))
            return None if rest is None else [f"click[{PREV_PAGE}]", *rest]
        if s.kind == "item":
            if s.asin == goal.asin:
                return [*self._option_clicks(dict(s.options)), f"click[{BUY_NOW}]"]
            rest = self._plan(Page("results", s.query, s.page))
            return None if rest is None else [f"click[{PREV_PAGE}]", *rest]
        if s.kind == "results":
            where = self._goal_page(s.query)
            if where is None:
                rest = self._plan(Page())
                return None if rest is None else [f"click[{BACK_TO_SEARCH}]", *rest]
            turn = NEXT_PAGE if where > s.page else PREV_PAGE
            moves = [f"click[{turn}]"] * abs(where - s.page)
            return [*moves, f"click[{goal.asin.lower()}]", *self._option_clicks({}),
                    f"click[{BUY_NOW}]"]  # fmt: skip
        product = self.store.products[goal.product]
        for query in (goal.instruction, product.title):
            query = _normalize(query).replace("[", " ").replace("]", " ").strip()
            if query and self._goal_page(query) is not None:
                return [f"search[{query}]", *(self._plan(Page("results", query, 1)) or [])]
        return None

    def _goal_page(self, query: str) -> int | None:
        """The results page (1-based) of ``query`` that lists the goal product, or None."""
        assert self.goal is not None
        hits = self.store.index.search(query, self.cfg.search_top_k)
        where = self.store.asin_index[self.goal.asin]
        if where not in hits:
            return None
        return hits.index(where) // self.cfg.results_per_page + 1

    def _option_clicks(self, selected: dict[str, str]) -> list[str]:
        """``click[value]`` for each goal option value the goal product offers and that is not
        selected yet (a value offered under two names selects the last, as clicking does)."""
        assert self.goal is not None
        name_of = {}
        for name, values in self.store.products[self.goal.product].options:
            for v in values:
                name_of[_normalize(v)] = (name, v)
        clicks = []
        for value in self.goal.options:
            found = name_of.get(_normalize(value))
            if found is not None and selected.get(found[0]) != found[1]:
                selected[found[0]] = found[1]
                clicks.append(f"click[{found[1]}]")
        return clicks

    # -- info -------------------------------------------------------------------------------
    def _anchor(self) -> Hashable:
        s = self.state
        return (s.kind, s.query, s.page, s.asin, s.options)

    def _won(self) -> bool:
        return self.state.kind == "done" and self._reward >= 1.0

    def _admissible(self) -> list[str]:
        actions = [SEARCH_PLACEHOLDER] if self.state.kind == "search" else []
        return actions + [f"click[{c}]" for c in self._clickables.values()]

    def _task(self) -> str:
        return self.goal.instruction if self.goal else "(reset the environment first)"

    def _step_costs(self, tr: Transition) -> dict[str, float]:
        # over_budget: 1.0 at a purchase whose price is above the goal's limit (r_price = 0).
        return {**super()._step_costs(tr), "over_budget": self._over_budget}

    def _extra_info(self) -> dict[str, Any]:
        goal = self.goal
        return {
            "score": 100.0 * self._reward,
            "has_search_bar": self.state.kind == "search",
            "task_type": goal.category if goal else "",
            "goal_index": goal.index if goal else -1,
            "generated": self.store.generated,
            "noun_extractor": self.nouns.name,
        }


def _reward_inputs(p: data.Product) -> RewardInputs:
    return RewardInputs(p.query, p.product_category, p.title, p.attributes, p.bullet_points,
                        p.description)  # fmt: skip
