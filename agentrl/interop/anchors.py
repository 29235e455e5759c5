"""Anchors for environments from other standards, which report no state key of their own or
report it as JSON: one definition for every adapter, so the same observation gets the same
anchor whichever standard it came through."""

from __future__ import annotations

import hashlib
from collections.abc import Hashable
from typing import Any


def hashable(value: Any) -> Hashable:
    """A JSON value as a hashable key: lists become tuples, dicts sorted item tuples."""
    if isinstance(value, list | tuple):
        return tuple(hashable(v) for v in value)
    if isinstance(value, dict):
        return tuple(sorted((str(k), hashable(v)) for k, v in value.items()))
    return value


def text_anchor(text: str) -> str:
    """The anchor of an observation without a state key: a digest of its text, the same in
    every process (GiGPO, CRBC and the other graph methods then merge identical observations)."""
    return "obs:" + hashlib.blake2b(text.encode("utf-8", "replace"), digest_size=16).hexdigest()
