"""WebShop's search engine: BM25 over the product text, built with ``bm25s`` and cached on disk.

The original indexes, per product, the lowercased title, description, first bullet point and
option text (``"color: black, white, and size: small, large"``) with pyserini/Lucene and returns
the top 50 hits. This module indexes the same text with the same BM25 setting as pyserini's
defaults (k1 = 0.9, b = 0.4, Lucene's idf and length normalisation, via ``bm25s``) and an
analyzer that approximates Lucene's English one (a reconstruction): lowercase, words of letters
and digits, Lucene's 33 English stop words removed, Porter stemming (PyStemmer's ``porter``).
Ties are broken by catalogue order, as Lucene breaks them by document id.

A query is scored directly on the index's term-by-document score matrix (compressed columns):
the postings of the query's terms are summed with ``np.bincount`` (over the matching documents
only when they are few, over all documents otherwise) and the top hits are taken with
``np.argpartition``.
"""

from __future__ import annotations

import json
import os
import re
from collections.abc import Iterable, Sequence
from pathlib import Path

import numpy as np

# Lucene's EnglishAnalyzer.ENGLISH_STOP_WORDS_SET.
_STOP_TEXT = (
    "a an and are as at be but by for if in into is it no not of on or such that the their then "
    "there these they this to was will with"
)
LUCENE_STOPWORDS: frozenset[str] = frozenset(_STOP_TEXT.split())
_TOKEN = re.compile(r"[a-z0-9]+")
INDEX_FORMAT = 1


class Analyzer:
    """Text -> index terms: lowercase, ``[a-z0-9]+`` words, no stop words, Porter stems."""

    def __init__(self) -> None:
        import Stemmer

        self._stem_words = Stemmer.Stemmer("porter").stemWords
        self._cache: dict[str, str] = {}

    def __call__(self, text: str) -> list[str]:
        words = [w for w in _TOKEN.findall(text.lower()) if w not in LUCENE_STOPWORDS]
        cache = self._cache
        missing = [w for w in set(words) if w not in cache]
        if missing:
            cache.update(zip(missing, self._stem_words(missing)))
        return [cache[w] for w in words]


class SearchIndex:
    """A BM25 index over a fixed list of documents; :meth:`search` returns document positions."""

    def __init__(
        self,
        data: np.ndarray,
        indices: np.ndarray,
        indptr: np.ndarray,
        vocab: dict[str, int],
        num_docs: int,
    ) -> None:
        self.data = data  # (nnz,) float64 BM25 weight of (term, doc), grouped by term
        self.indices = indices  # (nnz,) document of each weight
        self.indptr = indptr  # (V + 1,) term t owns data[indptr[t]:indptr[t + 1]]
        self.vocab = vocab
        self.num_docs = num_docs
        self.analyzer = Analyzer()
        self._found: dict[tuple[str, int], list[int]] = {}
        """:meth:`search`'s answers by (query, k): agents (and a memoised benchmark's
        planner) repeat their queries, and the index never changes."""

    # -- building and caching ----------------------------------------------------------------
    @classmethod
    def build(cls, texts: Iterable[str], k1: float = 0.9, b: float = 0.4) -> SearchIndex:
        """Index ``texts`` (one per product, in catalogue order) with BM25(k1, b)."""
        import bm25s

        analyzer = Analyzer()
        vocab: dict[str, int] = {}
        corpus_ids = []
        for text in texts:
            terms = analyzer(text)
            corpus_ids.append([vocab.setdefault(t, len(vocab)) for t in terms])
        if not vocab:  # bm25s needs one term; an empty catalogue text matches nothing anyway
            vocab[""] = 0
        retriever = bm25s.BM25(k1=k1, b=b, method="lucene")
        scores = retriever.build_index_from_ids(
            unique_token_ids=list(range(len(vocab))),
            corpus_token_ids=corpus_ids,
            show_progress=False,
        )
        index = cls(
            np.asarray(scores["data"], dtype=np.float64),
            np.asarray(scores["indices"], dtype=np.int32),
            np.asarray(scores["indptr"], dtype=np.int64),
            vocab,
            int(scores["num_docs"]),
        )
        index.analyzer = analyzer  # its stem cache is warm
        return index

    def save(self, folder: str | os.PathLike) -> None:
        """Write the index into ``folder`` (created; written atomically by the caller's rename)."""
        out = Path(folder)
        out.mkdir(parents=True, exist_ok=True)
        np.save(out / "data.npy", self.data)  # float64: np.bincount would convert float32
        np.save(out / "indices.npy", self.indices)
        np.save(out / "indptr.npy", self.indptr)
        (out / "vocab.json").write_text(json.dumps(self.vocab))
        meta = {"format": INDEX_FORMAT, "num_docs": self.num_docs}
        (out / "meta.json").write_text(json.dumps(meta))

    @classmethod
    def load(cls, folder: str | os.PathLike) -> SearchIndex:
        """Read an index written by :meth:`save` (arrays memory-mapped: shared between workers)."""
        src = Path(folder)
        meta = json.loads((src / "meta.json").read_text())
        if meta.get("format") != INDEX_FORMAT:
            raise ValueError(f"{src}: index format {meta.get('format')} != {INDEX_FORMAT}")
        return cls(
            np.load(src / "data.npy", mmap_mode="r"),
            np.load(src / "indices.npy", mmap_mode="r"),
            np.load(src / "indptr.npy", mmap_mode="r"),
            json.loads((src / "vocab.json").read_text()),
            int(meta["num_docs"]),
        )

    @classmethod
    def load_or_build(
        cls, folder: str | os.PathLike, texts: Iterable[str], k1: float = 0.9, b: float = 0.4
    ) -> SearchIndex:
        """The index cached in ``folder``, built from ``texts`` (and saved) on first use."""
        folder = Path(folder)
        if (folder / "meta.json").exists():
            return cls.load(folder)
        index = cls.build(texts, k1, b)
        tmp = folder.with_name(folder.name + f".tmp{os.getpid()}")
        index.save(tmp)
        try:
            tmp.rename(folder)  # atomic: a half-written index never looks complete
        except OSError:  # another process finished first; keep its copy
            import shutil

            shutil.rmtree(tmp, ignore_errors=True)
        return index

    # -- querying ----------------------------------------------------------------------------
    def scores(self, query: str) -> np.ndarray:
        """(num_docs,) BM25 score of every document for ``query`` (0 where no term matches)."""
        ids = [self.vocab[t] for t in self.analyzer(query) if t in self.vocab]
        if not ids:
            return np.zeros(self.num_docs, dtype=np.float64)
        spans = [(int(self.indptr[t]), int(self.indptr[t + 1])) for t in ids]
        docs = np.concatenate([self.indices[s:e] for s, e in spans])
        weights = np.concatenate([self.data[s:e] for s, e in spans])
        return np.bincount(docs, weights=weights, minlength=self.num_docs)

    def search(self, query: str, k: int = 50) -> list[int]:
        """Positions of the ``k`` best-scoring documents with a positive score, best first
        (equal scores in catalogue order)."""
        found = self._found.get((query, k))
        if found is None:
            found = self._search(query, k)
            if len(self._found) >= 4096:  # a cache, not a leak
                self._found.clear()
            self._found[(query, k)] = found
        return list(found)

    def _search(self, query: str, k: int) -> list[int]:
        ids = [self.vocab[t] for t in self.analyzer(query) if t in self.vocab]
        spans = [(int(self.indptr[t]), int(self.indptr[t + 1])) for t in ids]
        spans = [(s, e) for s, e in spans if e > s]
        if not spans:
            return []
        docs = np.concatenate([self.indices[s:e] for s, e in spans])
        weights = np.concatenate([self.data[s:e] for s, e in spans])
        if len(docs) * 8 < self.num_docs:
            # Few postings: score only the documents that contain a query term.
            hit_docs, inverse = np.unique(docs, return_inverse=True)
            hit_scores = np.bincount(inverse, weights=weights)
        else:
            # Many postings: one dense pass over every document is cheaper than sorting them.
            hit_scores = np.bincount(docs, weights=weights, minlength=self.num_docs)
            hit_docs = None
        order = top_k(hit_scores, k)
        found = order if hit_docs is None else hit_docs[order]
        return [int(d) for d in found]


def top_k(scores: np.ndarray, k: int) -> np.ndarray:
    """Positions of the ``k`` largest positive ``scores``, best first, ties by position."""
    best = scores.max() if len(scores) else 0.0
    if best <= 0:
        return np.zeros(0, dtype=np.int64)
    # Shortlist the documents scoring at least half (then a quarter) of the best: when k of them
    # do, the k-th best is among them, and selecting from a short list is much cheaper than
    # partitioning every document.
    for frac in (0.5, 0.25, 0.0):
        cand = np.flatnonzero(scores >= best * frac) if frac else np.flatnonzero(scores > 0)
        if len(cand) >= k:
            break
    if len(cand) > k:
        vals = scores[cand]
        kth = vals[np.argpartition(vals, len(vals) - k)[len(vals) - k]]
        above = cand[vals > kth]
        tied = cand[vals == kth][: k - len(above)]  # cand is in position order
        cand = np.concatenate([above, tied])
    return cand[np.lexsort((cand, -scores[cand]))]


def product_document(
    title: str,
    description: str,
    bullet_points: Sequence[str],
    options: Sequence[tuple[str, Sequence[str]]],
) -> str:
    """The text the original indexes for a product: title, description, first bullet, options."""
    option_text = ", and ".join(f"{name}: {', '.join(values)}" for name, values in options)
    first_bullet = bullet_points[0] if bullet_points else ""
    return " ".join([title, description, first_bullet, option_text]).lower()
