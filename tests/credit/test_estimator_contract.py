"""The estimator contract (agentrl.credit.contract) over every registered estimator, and proof
that the check catches estimators that break it."""

from __future__ import annotations

from contextlib import contextmanager

import numpy as np
import pytest

import agentrl.algos  # noqa: F401 - registers the bundled estimators
from agentrl.credit import Advantages, list_estimators, register_estimator
from agentrl.credit import estimators as registry
from agentrl.credit.contract import ContractError, check_estimator


@pytest.mark.parametrize("name", list_estimators())
def test_every_registered_estimator_keeps_the_contract(name):
    ran = check_estimator(name)
    if get_critic(name):
        assert ran[0].startswith("skipped")  # a learned critic is checked in test_gae
    else:
        assert {"shape and values", "purity", "group order", "degenerate batches"} <= set(ran)


def get_critic(name):
    return registry.get_estimator(name).critic


@contextmanager
def temporary_estimator(name, fn, **options):
    register_estimator(name, **options)(fn)
    try:
        yield name
    finally:
        registry._ESTIMATORS.pop(name, None)


def _return_minus_mean(batch):
    ret = batch.traj_return
    mean = np.bincount(batch.traj_group, weights=ret) / np.bincount(batch.traj_group)
    return ret - mean[batch.traj_group]


def test_a_correct_estimator_passes():
    def ok(batch, graph, cfg):
        return Advantages(step=_return_minus_mean(batch)[batch.step_traj])

    with temporary_estimator("zz_ok", ok) as name:
        assert "group order" in check_estimator(name, seeds=(0,))


@pytest.mark.parametrize(
    ("rule", "body"),
    [
        # Writes into the batch it was given.
        ("purity", lambda b: (b.step_reward.__setitem__(0, 5.0), np.zeros(b.n_steps))[1]),
        # Random advantages: the same inputs give different outputs.
        ("purity", lambda b: np.random.default_rng().normal(size=b.n_steps)),
        # Depends on where a group sits in the batch.
        ("group order", lambda b: b.traj_group[b.step_traj].astype(float)),
        # An unbiased estimate without a guard: 0/0 for a group of one episode.
        (
            "degenerate batches",
            lambda b: (_return_minus_mean(b) / (np.bincount(b.traj_group)[b.traj_group] - 1))[
                b.step_traj
            ],
        ),
        # Wrong shape: one advantage per episode instead of per step.
        ("shape and values", lambda b: np.zeros(b.n_trajs)),
    ],
)
def test_the_check_catches_a_broken_estimator(rule, body):
    def bad(batch, graph, cfg):
        with np.errstate(all="ignore"):
            return Advantages(step=np.asarray(body(batch), dtype=float))

    with temporary_estimator("zz_bad", bad) as name, pytest.raises(ContractError, match=rule):
        check_estimator(name, seeds=(0, 1))


def test_a_stateful_estimator_must_return_plain_data():
    def bad_state(batch, graph, cfg, state=None):
        return Advantages(step=np.zeros(batch.n_steps), state=np.zeros(3))  # an array

    with (
        temporary_estimator("zz_state", bad_state, stateful=True) as name,
        pytest.raises(ContractError, match="'state'"),
    ):
        check_estimator(name, seeds=(0,))
