"""Synthetic MDPs: exact values against Monte Carlo, Bellman equations, batch validity."""

from __future__ import annotations

import numpy as np
import pytest

from agentrl.credit.graph import build_graph
from agentrl.credit.synthetic import (
    SyntheticMDP,
    SyntheticScorer,
    exact_values,
    expected_length,
    random_mdp,
    sample_groups,
    truncation_probability,
)

BETA = 0.98


@pytest.fixture(scope="module")
def mdp() -> SyntheticMDP:
    return random_mdp(np.random.default_rng(7))


def test_random_mdp_is_absorbing_with_moderate_success(mdp):
    S = mdp.n_states
    V1, _ = exact_values(mdp, beta=1.0)  # the solve succeeds only if the chain is absorbing
    starts = V1[mdp.initial > 0]  # every start state: groups see both outcomes
    assert starts.size == 3 and np.all((starts >= 0.2) & (starts <= 0.8))
    assert np.all(V1 > 0)  # every state can still succeed
    assert truncation_probability(mdp) <= 1e-4
    assert truncation_probability(mdp, mdp.horizon - 1) > 1e-4  # the smallest such horizon
    assert np.isfinite(expected_length(mdp))
    # Cycles are present: some back edge or self loop.
    back = mdp.P[:, :, :S].sum(axis=1) > 0  # (S, S) edges between ordinary states
    assert np.tril(back).any()


def test_exact_values_satisfy_bellman(mdp):
    V, Q = exact_values(mdp, BETA)
    S = mdp.n_states
    assert np.all((V >= 0) & (V <= 1)) and np.all((Q >= 0) & (Q <= BETA))
    np.testing.assert_allclose(Q, BETA * (mdp.P[:, :, :S] @ V + mdp.P[:, :, S]), atol=1e-12)
    np.testing.assert_allclose(V, (mdp.mu * Q).sum(axis=1), atol=1e-12)
    V_low, _ = exact_values(mdp, 0.9)
    assert np.all(V_low <= V + 1e-12)  # heavier discounting only lowers the value


def test_exact_values_hand_computed():
    # One state, two actions: a0 succeeds w.p. 0.5 else loops, a1 fails; μ = (0.5, 0.5).
    P = np.zeros((1, 2, 3))
    P[0, 0] = [0.5, 0.5, 0.0]
    P[0, 1] = [0.0, 0.0, 1.0]
    mdp = SyntheticMDP(P=P, mu=np.array([[0.5, 0.5]]), initial=np.array([1.0]), horizon=50)
    V, Q = exact_values(mdp, 0.9)
    # V = 0.5·0.9·(0.5 + 0.5 V)  ⇒  V = 0.225 / 0.775
    np.testing.assert_allclose(V, [0.225 / 0.775])
    np.testing.assert_allclose(Q, [[0.9 * (0.5 + 0.5 * V[0]), 0.0]])


def test_exact_values_agree_with_monte_carlo(mdp):
    """Each visit's discounted return β^(T−t) R is an unbiased sample of Q(s, a) (Markov)."""
    batch, adv = sample_groups(mdp, np.random.default_rng(0), n_groups=2000, group_size=8)
    V, Q = exact_values(mdp, BETA)
    S, A = mdp.n_states, mdp.n_actions
    to_end = batch.traj_len[batch.step_traj] - batch.step_t  # T − t with t 0-based
    ret = BETA**to_end * batch.traj_won[batch.step_traj]
    sa = batch.step_anchor % S * A + batch.step_action
    count = np.bincount(sa, minlength=S * A)
    mean = np.bincount(sa, weights=ret, minlength=S * A) / np.maximum(count, 1)
    seen = count >= 300
    assert seen.sum() >= S  # most pairs are well visited
    # Visits of one trajectory are correlated, so allow a generous 6 naive standard errors.
    se = np.sqrt(np.maximum(mean * (1 - mean), 1e-3) / np.maximum(count, 1))
    err = np.abs(mean - Q.reshape(-1))
    assert np.all(err[seen] <= 6 * se[seen] + 1e-3), err[seen].max()
    # Success rate from the start states, and the truth returned with the batch.
    V1, _ = exact_values(mdp, 1.0)
    assert abs(batch.traj_won.mean() - mdp.initial @ V1) < 0.03
    state = batch.step_anchor % S
    np.testing.assert_allclose(adv, Q[state, batch.step_action] - V[state])


def test_sampled_batch_is_valid():
    mdp = random_mdp(np.random.default_rng(3), horizon=6)  # short horizon: truncation happens
    n_groups, G = 50, 4
    batch, _ = sample_groups(mdp, np.random.default_rng(1), n_groups, G, with_texts=True)
    S, N, M = mdp.n_states, batch.n_steps, batch.n_trajs
    assert batch.n_groups == n_groups and n_groups * G == M
    np.testing.assert_array_equal(batch.traj_group, np.repeat(np.arange(n_groups), G))
    # Contiguous trajectories in order, turns 0..T_i − 1.
    assert np.all(np.diff(batch.step_traj) >= 0) and np.all(batch.traj_len >= 1)
    starts = np.concatenate(([0], np.cumsum(batch.traj_len)[:-1]))
    np.testing.assert_array_equal(batch.step_t, np.arange(N) - starts[batch.step_traj])
    last = batch.step_t == batch.traj_len[batch.step_traj] - 1
    # Each trajectory ends exactly once, either terminated or truncated; truncation only at T_max.
    np.testing.assert_array_equal(batch.step_terminated | batch.step_truncated, last)
    assert not np.any(batch.step_terminated & batch.step_truncated)
    assert batch.step_truncated.any()
    assert np.all(batch.step_t[batch.step_truncated] == mdp.horizon - 1)
    assert np.all(batch.traj_len <= mdp.horizon)
    # Reward 1 exactly at the last step of won trajectories; truncated ones never win.
    np.testing.assert_array_equal(batch.step_reward, last & batch.traj_won[batch.step_traj])
    np.testing.assert_array_equal(batch.traj_return, batch.traj_won.astype(float))
    assert not np.any(batch.traj_won[batch.step_traj[batch.step_truncated]])
    # Anchors are interned per group: group * S + state; all rollouts of a group share a start.
    np.testing.assert_array_equal(batch.step_anchor // S, batch.step_group)
    first = batch.step_anchor[starts].reshape(n_groups, G)
    assert np.all(first == first[:, :1])
    state = batch.step_anchor % S
    assert batch.anchor_keys[batch.step_anchor[5]] == f"state {state[5]}"
    assert batch.action_names == tuple(f"a{k}" for k in range(mdp.n_actions))
    np.testing.assert_allclose(batch.step_nll, -np.log(mdp.mu[state, batch.step_action]))
    # Texts follow the steps; final observations follow the outcome.
    texts = batch.texts
    assert texts.prompts[7] == f"state {state[7]}"
    assert texts.responses[7] == f"a{batch.step_action[7]}"
    for m in range(M):
        obs = texts.final_obs[m]
        assert obs == "success" if batch.traj_won[m] else obs != "success"
    # The shared graph sees the absorbing successors where the batch says so.
    graph = build_graph(batch)
    ends = graph.step_next[last]
    np.testing.assert_array_equal(ends == graph.success, batch.traj_won)


def test_sampling_is_deterministic():
    def draw():
        mdp = random_mdp(np.random.default_rng(11))
        return sample_groups(mdp, np.random.default_rng(5), 20, 8, with_texts=True)

    (b1, a1), (b2, a2) = draw(), draw()
    for name in ("step_anchor", "step_action", "step_traj", "step_reward", "traj_won"):
        np.testing.assert_array_equal(getattr(b1, name), getattr(b2, name))
    np.testing.assert_array_equal(a1, a2)
    assert b1.texts == b2.texts


def test_scorer_is_bayes_hindsight(mdp):
    scorer = SyntheticScorer(mdp)
    S, A = mdp.n_states, mdp.n_actions
    _, Q1 = exact_values(mdp, 1.0)
    ctx = [f"state {s}" for s in range(S) for _ in range(A)]
    resp = [f"a{a}" for _ in range(S) for a in range(A)]
    plain = scorer.score(ctx, resp).reshape(S, A)
    np.testing.assert_allclose(plain, np.log(mdp.mu))
    won = scorer.score([c + "\nOutcome: success." for c in ctx], resp).reshape(S, A)
    lost = scorer.score([c + "\nOutcome: failure (not solved)." for c in ctx], resp).reshape(S, A)
    # The hindsight policies are distributions, and mixing them by P(o|s) gives back μ (up to
    # the 1e-6 probability floor of actions that can never succeed).
    np.testing.assert_allclose(np.exp(won).sum(axis=1), 1.0, atol=1e-4)
    np.testing.assert_allclose(np.exp(lost).sum(axis=1), 1.0, atol=1e-4)
    V1 = (mdp.mu * Q1).sum(axis=1, keepdims=True)
    np.testing.assert_allclose(V1 * np.exp(won) + (1 - V1) * np.exp(lost), mdp.mu, atol=1e-4)
    # Δ is positive exactly for actions that raise the success probability.
    np.testing.assert_array_equal(won > plain + 1e-9, Q1 > V1 + 1e-9)  # ties: equal actions
    # Noise is deterministic; unparseable pairs still get a finite score.
    noisy = SyntheticScorer(mdp, noise=0.1)
    x = noisy.score(["state 0", "hello"], ["a1", "nothing"])
    np.testing.assert_array_equal(x, noisy.score(["state 0", "hello"], ["a1", "nothing"]))
    assert np.all(np.isfinite(x)) and x[0] != plain[0, 1]


def test_million_step_batch_is_fast(mdp):
    import time

    n_groups = int(1e6 / 8 / expected_length(mdp))
    t0 = time.perf_counter()
    batch, _ = sample_groups(mdp, np.random.default_rng(0), n_groups, 8)
    assert time.perf_counter() - t0 < 10.0  # about 0.5 s on 2 cores
    assert 0.8e6 < batch.n_steps < 1.2e6


def test_empirical_closure_of_a_large_group_matches_exact_values(mdp):
    """The closure CRBC solves on the sampled graph (docs/methods.md#crbc, Eq. 9) tends to V^μ."""
    import scipy.sparse as sp
    import scipy.sparse.linalg as spla

    batch, _ = sample_groups(mdp, np.random.default_rng(2), n_groups=1, group_size=20_000)
    graph = build_graph(batch)
    M = graph.transition_matrix()
    p_success, _ = graph.absorb_probability()
    V_hat = spla.spsolve(
        sp.identity(graph.n_states, format="csc") - BETA * M.tocsc(), BETA * p_success
    )
    V, _ = exact_values(mdp, BETA)
    # Map graph states back to MDP states through their anchors (group 0: anchor = state).
    state_of = np.zeros(graph.n_states, dtype=np.int64)
    state_of[graph.step_state] = batch.step_anchor % mdp.n_states
    np.testing.assert_allclose(V_hat, V[state_of], atol=0.02)
