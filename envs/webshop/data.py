"""Where WebShop products and goals come from: the official files when present, a generated
catalogue otherwise; plus the prices, the goal list and its train/test split.

Official data is what WebShop's ``setup.sh`` downloads into its ``data/`` folder:
``items_shuffle_1000.json`` + ``items_ins_v2_1000.json`` (``-d small``) or ``items_shuffle.json``
+ ``items_ins_v2.json`` (``-d all``), and ``items_human_ins.json``. It is found through the
``data_dir`` setting or the ``WEBSHOP_DATA`` environment variable and read the way the original
``load_products`` reads it (same fields, same filters: ASINs of at most 10 characters, no
duplicates, prices parsed from ``"$a"`` / ``"$a to $b"``, option values lowercased with ``/`` as
`` | ``, ``DUMMY_ATTR`` for products without attributes).

Without official data a catalogue is generated (:mod:`.generate`) and cached on disk.

Goals follow the original ``get_human_goals`` / ``get_synthetic_goals``: a human goal per
instruction (with attributes) in ``items_human_ins.json``; a synthetic goal per product
instruction *and* per combination of all its option values (``"... with color: black, and size:
large"``). A goal's price cap is the larger of two distinct picks among the first four multiples
of $10 above the product's price (none when fewer than two exist). The goal list is then
shuffled exactly as the original shuffles it (``random.seed(233); random.shuffle(goals)``), so
the first 500 goals are the original's test goals; the rest are for training.

Departures (all deliberate, for reproducibility): prices of products priced as a range, and the
price caps, are drawn from a generator seeded with ``generator_seed`` (the original draws them
from Python's unseeded global ``random``, so they change from run to run); goals are played
uniformly (the original's web app weights synthetic goals by attribute rarity; its RL baselines
pick goals uniformly by index, as here). Goals are materialised on demand, which keeps millions
of synthetic goals cheap.
"""

from __future__ import annotations

import hashlib
import itertools
import json
import logging
import os
import random
import re
from collections.abc import Sequence
from dataclasses import dataclass
from decimal import Decimal, InvalidOperation
from pathlib import Path
from typing import Any, Literal

import numpy as np

from . import generate

log = logging.getLogger(__name__)

OFFICIAL_FILES: dict[str, tuple[str, str]] = {
    "small": ("items_shuffle_1000.json", "items_ins_v2_1000.json"),
    "all": ("items_shuffle.json", "items_ins_v2.json"),
}
HUMAN_FILE = "items_human_ins.json"
HOW_TO_GET = (
    "Get them with WebShop's setup script (github.com/princeton-nlp/WebShop: "
    "`./setup.sh -d small` or `-d all` downloads them into its data/ folder), or directly with "
    "gdown from Google Drive: items_shuffle_1000.json = id 1EgHdxQ_YxqIQlvvq5iKlCrkEKR6-j0Ib, "
    "items_ins_v2_1000.json = 1IduG0xl544V_A_jv3tHXC0kyFi7PnyBu, items_shuffle.json = "
    "1A2whVgOO0euk5O13n2iYDM0bQRkkRduB, items_ins_v2.json = 1s2j6NgHljiZzQNL3veZaAiyW_qDEgBNi, "
    "items_human_ins.json = 14Kb5SPBk_jfdLZ_CDBNitW98QLDlKR5O "
    "(`gdown https://drive.google.com/uc?id=<id>`). Point WEBSHOP_DATA (or env.data_dir) at "
    "the folder holding them, or leave both unset to play a generated catalogue."
)
SHUFFLE_SEED = 233  # the original's random.seed(233) before shuffling the goals
PRICE_STEPS = np.arange(10.0, 1000.0, 10.0)  # $10 ... $990, the original's PRICE_RANGE
NO_PRICE_CAP = 1_000_000.0

GoalSource = Literal["human", "synthetic"]


class WebShopDataError(RuntimeError):
    """The data directory is missing or incomplete."""


@dataclass(frozen=True, slots=True)
class Product:
    """One product as the pages and the reward see it."""

    asin: str
    title: str
    category: str
    query: str
    product_category: str
    description: str
    bullet_points: tuple[str, ...]
    pricing: tuple[float, ...]
    """One price, or the two ends of a price range."""
    price_tag: str
    options: tuple[tuple[str, tuple[str, ...]], ...]
    """(option name, values) in page order."""
    attributes: tuple[str, ...]
    rating: str = "N.A."
    instruction: str | None = None
    """Synthetic instruction (``items_ins_v2``), if any."""
    instruction_attributes: tuple[str, ...] = ()
    human_instructions: tuple[tuple[str, tuple[str, ...], tuple[str, ...]], ...] = ()
    """(instruction, attributes, options) of each human instruction for this product."""


@dataclass(frozen=True)
class Goal:
    """One task: the instruction and what the reward checks."""

    index: int
    """Position in the shuffled goal list (the first ``eval_goals`` are the test split)."""
    product: int
    """Index of the goal product in the catalogue."""
    asin: str
    instruction: str
    attributes: tuple[str, ...]
    options: tuple[str, ...]
    """Goal option values (human goals list them without names)."""
    option_names: tuple[str, ...]
    """Names of ``options`` for synthetic goals; empty for human goals."""
    price_upper: float
    category: str


def default_cache_dir() -> Path:
    base = os.environ.get("AGENTRL_CACHE") or os.path.join(
        os.environ.get("XDG_CACHE_HOME", os.path.expanduser("~/.cache")), "agentrl"
    )
    return Path(base) / "webshop"


# -- official data ------------------------------------------------------------------------------
def official_dir(data_dir: str = "") -> Path | None:
    """The folder named by ``data_dir`` or ``$WEBSHOP_DATA``; None when neither is set."""
    raw = data_dir or os.environ.get("WEBSHOP_DATA", "")
    if not raw:
        return None
    return Path(os.path.expandvars(os.path.expanduser(raw)))


def check_official_files(root: Path, subset: str, need_human: bool, source: str) -> None:
    """Raise one :class:`WebShopDataError` naming every expected file that is missing."""
    wanted = [*OFFICIAL_FILES[subset], *([HUMAN_FILE] if need_human else [])]
    missing = [name for name in wanted if not (root / name).is_file()]
    if missing:
        raise WebShopDataError(
            f"{source}={str(root)!r} does not hold the WebShop data for official_subset="
            f"{subset!r}: expected {', '.join(str(root / n) for n in wanted)}; missing: "
            f"{', '.join(missing)}. {HOW_TO_GET}"
        )


def _parse_pricing(raw: Any) -> tuple[list[float], str]:
    # "$10.99" or "$10.99 to $15.99" (anything else: the original's default of $100).
    if not raw:
        return [100.0], "$100.0"
    prices = []
    for part in str(raw).split("$")[1:]:
        try:
            prices.append(float(Decimal(re.sub(r"[^\d.]", "", part))))
        except InvalidOperation:
            continue
    if not prices:
        return [100.0], "$100.0"
    prices = prices[:2]
    return prices, generate._price_tag(prices)


def _official_product(p: dict, attrs: dict, human: dict | None) -> Product:
    options = []
    for name, contents in (p.get("customization_options") or {}).items():
        if contents is None:
            continue
        values = tuple(c["value"].strip().replace("/", " | ").lower() for c in contents)
        options.append((name.lower(), values))
    bullets = p.get("small_description")
    bullets = tuple(bullets) if isinstance(bullets, list) else (str(bullets or ""),)
    pricing, tag = _parse_pricing(p.get("pricing"))
    asin = p["asin"]
    a = attrs.get(asin) or {}
    human_ins = ()
    if human is not None and asin in human:
        human_ins = tuple(
            (
                str(h.get("instruction", "")),
                tuple(h.get("instruction_attributes") or ()),
                tuple(h.get("instruction_options") or ()),
            )
            for h in human[asin]
        )
    return Product(
        asin=asin,
        title=p.get("name") or "",
        category=p.get("category") or "",
        query=(p.get("query") or "").lower().strip(),
        product_category=p.get("product_category") or "",
        description=p.get("full_description") or "",
        bullet_points=bullets,
        pricing=tuple(pricing),
        price_tag=tag,
        options=tuple(options),
        attributes=tuple(a["attributes"]) if "attributes" in a else ("DUMMY_ATTR",),
        instruction=a.get("instruction"),
        instruction_attributes=tuple(a.get("instruction_attributes") or ()),
        human_instructions=human_ins,
    )


def load_official(root: Path, subset: str, num_products: int, need_human: bool) -> list[Product]:
    """Products of the official files in ``root`` as the original's ``load_products`` keeps them."""
    product_file, attr_file = OFFICIAL_FILES[subset]
    with open(root / product_file) as fh:
        raw = json.load(fh)
    with open(root / attr_file) as fh:
        attrs = json.load(fh)
    human = None
    if need_human:
        with open(root / HUMAN_FILE) as fh:
            human = json.load(fh)
    if num_products:
        raw = raw[:num_products]  # the product file is already shuffled
    products, seen = [], set()
    for p in raw:
        asin = p.get("asin")
        if not isinstance(asin, str) or asin == "nan" or len(asin) > 10 or asin in seen:
            continue
        seen.add(asin)
        products.append(_official_product(p, attrs, human))
    return products


# -- generated data -----------------------------------------------------------------------------
def _product_from_dict(d: dict) -> Product:
    return Product(
        asin=d["asin"],
        title=d["title"],
        category=d["category"],
        query=d["query"],
        product_category=d["product_category"],
        description=d["description"],
        bullet_points=tuple(d["bullet_points"]),
        pricing=tuple(d["pricing"]),
        price_tag=d["price_tag"],
        options=tuple((n, tuple(v)) for n, v in d["options"]),
        attributes=tuple(d["attributes"]),
        instruction=d.get("instruction"),
        instruction_attributes=tuple(d.get("instruction_attributes") or ()),
    )


def generated_folder(cache_dir: str, num_products: int, seed: int) -> Path:
    base = Path(cache_dir) if cache_dir else default_cache_dir()
    return base / f"generated-v{generate.GENERATOR_VERSION}-seed{seed}-n{num_products}"


def load_generated(folder: Path, num_products: int, seed: int) -> list[Product]:
    """The generated catalogue cached in ``folder`` (generated and written on first use)."""
    path = folder / "products.json"
    if path.exists():
        rows = json.loads(path.read_text())
    else:
        log.warning(
            "WebShop: no official data; generating %d products into %s (first use only)",
            num_products,
            folder,
        )
        rows = generate.generate_catalog(num_products, seed)
        folder.mkdir(parents=True, exist_ok=True)
        tmp = path.with_name(f"products.json.tmp{os.getpid()}")
        tmp.write_text(json.dumps(rows))
        tmp.replace(path)  # atomic: a half-written file never looks complete
    return [_product_from_dict(d) for d in rows]


def official_folder(cache_dir: str, root: Path, subset: str, num_products: int) -> Path:
    """Cache folder of the search index of one official data set (keyed by file identity)."""
    ident = []
    for name in OFFICIAL_FILES[subset]:
        st = (root / name).stat()
        ident.append(f"{(root / name).resolve()}:{st.st_size}:{int(st.st_mtime)}")
    key = hashlib.sha1(f"{'|'.join(ident)}|{num_products}".encode()).hexdigest()[:16]
    base = Path(cache_dir) if cache_dir else default_cache_dir()
    return base / f"official-{subset}-{key}"


# -- prices and goals ---------------------------------------------------------------------------
def product_prices(products: Sequence[Product], rng: np.random.Generator) -> np.ndarray:
    """The price paid for each product: its price, or a uniform draw within its range."""
    prices = np.array([p.pricing[0] for p in products], dtype=np.float64)
    ranged = np.array([i for i, p in enumerate(products) if len(p.pricing) > 1], dtype=np.int64)
    if len(ranged):
        lo = np.array([products[i].pricing[0] for i in ranged])
        hi = np.array([products[i].pricing[1] for i in ranged])
        prices[ranged] = lo + (hi - lo) * rng.random(len(ranged))
    return prices


def price_caps(prices: np.ndarray, rng: np.random.Generator) -> np.ndarray:
    """A price cap per price: the larger of two distinct picks among the first four multiples of
    $10 strictly above it; :data:`NO_PRICE_CAP` when fewer than two such multiples exist."""
    first = np.searchsorted(PRICE_STEPS, prices, side="right")  # first step > price
    count = np.minimum(4, len(PRICE_STEPS) - first)
    a = rng.integers(0, np.maximum(count, 1))
    b = rng.integers(0, np.maximum(count - 1, 1))
    b = b + (b >= a)  # a distinct second pick
    pick = first + np.maximum(a, b)
    caps = PRICE_STEPS[np.minimum(pick, len(PRICE_STEPS) - 1)]
    return np.where(count >= 2, caps, NO_PRICE_CAP)


def price_text(cap: float) -> str:
    return "" if cap >= NO_PRICE_CAP else f", and price lower than {cap:.2f} dollars"


class GoalTable:
    """The shuffled goal list; ``table[i]`` materialises goal ``i`` (a :class:`Goal`).

    Row ``i`` is (product, sub, cap): for human goals ``sub`` is the instruction's position in
    the product's human instructions, for synthetic goals it numbers the option combination
    (options sorted by name, the last name varying fastest, as ``itertools.product``).
    """

    def __init__(
        self,
        source: GoalSource,
        products: Sequence[Product],
        rows: np.ndarray,
        caps: np.ndarray,
    ) -> None:
        self.source = source
        self.products = products
        self.rows = rows  # (N, 2) int64: product, sub
        self.caps = caps  # (N,) float64

    def __len__(self) -> int:
        return len(self.rows)

    def __getitem__(self, i: int) -> Goal:
        p_idx, sub = (int(x) for x in self.rows[i])
        product = self.products[p_idx]
        cap = float(self.caps[i])
        if self.source == "human":
            text, attributes, options = product.human_instructions[sub]
            return Goal(i, p_idx, product.asin, text.strip(".") + price_text(cap), attributes,
                        options, (), cap, product.category)  # fmt: skip
        named = sorted(product.options)
        values = []
        for _, vals in reversed(named):
            sub, k = divmod(sub, len(vals))
            values.append(vals[k])
        values.reverse()
        names = tuple(n for n, _ in named)
        option_text = ", and ".join(f"{n}: {v}" for n, v in zip(names, values))
        text = (product.instruction or "") + (f" with {option_text}" if option_text else "")
        return Goal(i, p_idx, product.asin, text + price_text(cap),
                    product.instruction_attributes, tuple(values), names, cap,
                    product.category)  # fmt: skip


def build_goals(
    products: Sequence[Product], prices: np.ndarray, source: GoalSource, rng: np.random.Generator
) -> GoalTable:
    """Every goal of ``source`` in the original's shuffled order."""
    rows: list[tuple[int, int]] = []
    if source == "human":
        for i, p in enumerate(products):
            for j, (_, attributes, _) in enumerate(p.human_instructions):
                if attributes:  # the original skips instructions without attributes
                    rows.append((i, j))
        caps = price_caps(prices[[r[0] for r in rows]] if rows else np.zeros(0), rng)
    else:
        per_product = []
        for i, p in enumerate(products):
            if not p.instruction or not p.instruction_attributes:
                continue
            n = 1
            for _, vals in p.options:
                n *= len(vals)
            if n == 0:  # an option without values: no combination (itertools.product too)
                continue
            per_product.append(i)
            rows.extend((i, c) for c in range(n))
        # One cap per product, shared by its option combinations (as in the original).
        idx = np.array(per_product, dtype=np.int64)
        cap_of = dict(zip(per_product, price_caps(prices[idx], rng).tolist()))
        caps = np.array([cap_of[r[0]] for r in rows], dtype=np.float64)
    order = list(range(len(rows)))
    random.Random(SHUFFLE_SEED).shuffle(order)
    table = np.array(rows, dtype=np.int64).reshape(-1, 2)[order]
    return GoalTable(source, products, table, np.asarray(caps, dtype=np.float64)[order])


def option_combinations(product: Product) -> list[tuple[str, ...]]:
    """All combinations of ``product``'s option values, in synthetic-goal order (for tests)."""
    named = sorted(product.options)
    return list(itertools.product(*(vals for _, vals in named)))
