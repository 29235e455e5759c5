"""WebShop environment speed: catalogue generation, BM25 index build, query latency and steps/s.

For each catalogue size (1,000 and 100,000 generated products by default) it measures

- generating the catalogue (:func:`agentrl.envs.webshop.generate.generate_catalog`, no cache);
- building the BM25 index over the products' text (``bm25s``; tokenising included) and loading
  a saved one;
- query latency of :meth:`SearchIndex.search` (top 50) for two kinds of query: whole goal
  instructions (what baseline agents often search for; 20-30 words) and short queries
  (a product type and one attribute, as people type them), each timed alone after a warm-up;
- steps/s of :class:`WebShopEnv` under a random shopper: on the search page it searches for
  the goal instruction or a short query, elsewhere it clicks a random admissible button; resets
  excluded.

It also plays an oracle shopper (search the instruction, page to the goal product, select the
goal options, buy) on test goals: its success rate checks that the generated tasks are
solvable with the environment's own search engine.

Writes the ``## WebShop`` section of ``<out>/env_speed.md``.
"""

from __future__ import annotations

import os
import shutil
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

from agentrl.bench._report import SCRATCH, cache_dir, header, write_env_speed_section

SECTION = "WebShop"
TARGET_MS = 2.0


def _time_queries(index, queries: list[str], k: int) -> np.ndarray:
    for q in queries[:10]:  # warm the analyzer's stem cache and numpy's code paths
        index.search(q, k)
    out = []
    for q in queries:
        t0 = time.perf_counter()
        index.search(q, k)
        out.append(time.perf_counter() - t0)
    return np.array(out)


def _queries(products, goals, n: int, rng: np.random.Generator) -> tuple[list[str], list[str]]:
    instructions = [goals[int(i)].instruction for i in rng.integers(len(goals), size=n)]
    short = []
    for i in rng.integers(len(products), size=n):
        p = products[int(i)]
        attribute = p.attributes[int(rng.integers(len(p.attributes)))] if p.attributes else ""
        short.append(f"{p.query} {attribute}".strip())
    return instructions, short


def _env_steps(env, n_steps: int, seed: int) -> tuple[float, float]:
    """(steps/s, share of steps that searched) of a random shopper."""
    rng = np.random.default_rng(seed)
    u = env.unwrapped
    _, info = env.reset(seed=seed)
    spent, searches = 0.0, 0
    for _ in range(n_steps):
        if info["has_search_bar"]:
            goal = u.goal
            if rng.random() < 0.5:
                action = f"search[{goal.instruction}]"
            else:
                product = u.store.products[goal.product]
                action = f"search[{product.query} {' '.join(goal.attributes[:1])}]"
            searches += 1
        else:
            clicks = info["admissible_actions"]
            action = clicks[int(rng.integers(len(clicks)))]
        t0 = time.perf_counter()
        _, _, term, trunc, info = env.step(action)
        spent += time.perf_counter() - t0
        if term or trunc:
            _, info = env.reset()
    return n_steps / spent, searches / n_steps


def _oracle(env, n_goals: int) -> tuple[float, float]:
    """(success rate, mean score) of the oracle shopper on the first ``n_goals`` test goals."""
    u = env.unwrapped
    rewards = []
    for g in range(n_goals):
        _, info = env.reset(seed=g, options={"split": "eval", "goal_index": g})
        goal = u.goal
        _, _, _, _, info = env.step(f"search[{goal.instruction}]")
        target = f"click[{goal.asin.lower()}]"
        for _ in range(4):
            if target in info["admissible_actions"]:
                break
            _, _, _, _, info = env.step("click[next >]")
        if target not in info["admissible_actions"]:
            rewards.append(0.0)
            continue
        env.step(target)
        for value in goal.options:
            env.step(f"click[{value}]")
        _, reward, _, _, info = env.step("click[buy now]")
        rewards.append(reward)
    r = np.array(rewards)
    return float((r >= 1.0).mean()), float(100 * r.mean())


def run(
    out_dir: str | os.PathLike = SCRATCH,
    quick: bool = False,
    log: Callable[[str], Any] = print,
    sizes: tuple[int, ...] = (1000, 100_000),
    n_queries: int = 300,
    n_steps: int = 3000,
    n_oracle: int = 200,
) -> dict[str, Any]:
    """Run the benchmark, write the ``## WebShop`` section of ``<out_dir>/env_speed.md``.

    Args:
        out_dir: folder of the markdown report.
        quick: a smoke run (1,000 and 5,000 products, fewer queries and steps).
        log: where progress lines go.
        sizes: catalogue sizes to measure.
        n_queries: queries of each kind timed per size.
        n_steps: environment steps timed per size.
        n_oracle: test goals the oracle shopper plays (smallest size only).

    Returns:
        ``{size: {"generate_s", "index_s", "load_s", "instruction_ms", "short_ms",
        "steps_per_s", ...}, "oracle": (success, score), "noun_extractor": name}``.
    """
    from agentrl.envs.webshop import data, generate
    from agentrl.envs.webshop.env import WebShopEnv
    from agentrl.envs.webshop.search import SearchIndex, product_document

    if quick:
        sizes, n_queries, n_steps, n_oracle = (1000, 5000), 50, 300, 50
    cache = Path(cache_dir("webshop"))
    rng = np.random.default_rng(0)
    results: dict[Any, Any] = {}
    rows = []
    for n in sizes:
        log(f"[env-speed] WebShop: generating {n:,} products")
        t0 = time.perf_counter()
        raw = generate.generate_catalog(n, seed=0)
        gen_s = time.perf_counter() - t0
        products = [data._product_from_dict(d) for d in raw]
        del raw
        texts = [product_document(p.title, p.description, p.bullet_points, p.options)
                 for p in products]  # fmt: skip
        log(f"[env-speed] WebShop: indexing {n:,} products")
        t0 = time.perf_counter()
        index = SearchIndex.build(texts)
        index_s = time.perf_counter() - t0
        terms, postings = len(index.vocab), len(index.data)
        tmp = cache / f"bench-index-{n}"
        shutil.rmtree(tmp, ignore_errors=True)
        index.save(tmp)
        t0 = time.perf_counter()
        SearchIndex.load(tmp)
        load_s = time.perf_counter() - t0
        prng = np.random.default_rng(0)
        prices = data.product_prices(products, prng)
        goals = data.build_goals(products, prices, "synthetic", prng)
        instructions, short = _queries(products, goals, n_queries, rng)
        t_inst = _time_queries(index, instructions, 50) * 1e3
        t_short = _time_queries(index, short, 50) * 1e3
        del index, texts
        log(f"[env-speed] WebShop: stepping the env on {n:,} products")
        env = WebShopEnv(num_products=n, cache_dir=str(cache))
        sps, search_share = _env_steps(env, n_steps, seed=1)
        res = {
            "generate_s": gen_s,
            "index_s": index_s,
            "load_s": load_s,
            "goals": len(goals),
            "terms": terms,
            "postings": postings,
            "instruction_ms": t_inst,
            "short_ms": t_short,
            "steps_per_s": sps,
            "search_share": search_share,
        }
        if n == min(sizes):
            n_oracle = min(n_oracle, env.unwrapped.cfg.eval_goals)
            results["oracle"] = _oracle(env, n_oracle)
            results["noun_extractor"] = env.unwrapped.nouns.name
        results[n] = res
        del env, products, goals
        rows.append(
            f"| {n:,} | {res['goals']:,} | {gen_s:.1f} | {index_s:.1f} | {load_s:.2f} "
            f"| {terms:,} / {postings / 1e6:.2f}M "
            f"| {t_inst.mean():.2f} / {np.median(t_inst):.2f} / {np.percentile(t_inst, 99):.2f} "
            f"| {t_short.mean():.2f} / {np.median(t_short):.2f} / "
            f"{np.percentile(t_short, 99):.2f} | {sps:,.0f} |"
        )
        log("  " + rows[-1])

    largest = results[max(sizes)]
    worst = max(largest["instruction_ms"].mean(), largest["short_ms"].mean())
    success, score = results["oracle"]
    body = "\n".join(
        [
            *header(
                ("agentrl", "bm25s", "PyStemmer", "rapidfuzz", "numpy"),
                "python -m agentrl.bench env-speed",
                quick,
            ),
            "",
            "Generated catalogues (`agentrl.envs.webshop.generate`, seed 0; no official data "
            "here), synthetic goals. Generate: the catalogue from scratch. Index: tokenising "
            "(lowercase, Lucene stop words, Porter stems) and building the BM25 index with "
            "`bm25s` (k1 0.9, b 0.4); load: reading a saved index (memory-mapped). Queries: "
            f"{n_queries} of each kind, top 50, each timed alone (mean / p50 / p99 ms): "
            "whole goal instructions (20-30 words) and short queries (product type + one "
            f"attribute). Target: at most {TARGET_MS:g} ms per query at the largest size: "
            f"**{'met' if worst <= TARGET_MS else 'NOT met'}** (worst mean {worst:.2f} ms). "
            f"Steps/s: `WebShopEnv.step` under a random shopper ({n_steps} steps; about "
            f"{100 * largest['search_share']:.0f} % of them searches, half with the "
            "instruction, half short), resets excluded. The generated text has a small "
            "vocabulary (index terms / postings in the table), so each term's postings are "
            "long; the scraped WebShop text spreads over many more terms, so the same number "
            "of products gives shorter postings per query term.",
            "",
            f"Oracle shopper on {n_oracle} test goals of the {min(sizes):,}-product "
            f"catalogue (search the instruction, open the goal product, select its options, "
            f"buy): success {100 * success:.0f} %, score {score:.1f}. Title nouns for the type "
            f"reward: `{results['noun_extractor']}` extractor.",
            "",
            "| products | goals | generate s | index build s | index load s | terms / postings "
            "| instruction query ms | short query ms | env steps/s |",
            "|---:|---:|---:|---:|---:|---:|---:|---:|---:|",
            *rows,
        ]
    )
    path = write_env_speed_section(out_dir, SECTION, body)
    log(f"[env-speed] WebShop: wrote {path}")
    return results
