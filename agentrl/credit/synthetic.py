"""Random finite MDPs with known behaviour values, to check credit estimators against the truth.

A :class:`SyntheticMDP` has S ordinary states, A actions and two absorbing nodes, *success*
(node S) and *failure* (node S + 1), like the trajectory graph of :mod:`agentrl.credit.graph`. The
behaviour policy μ is known, so the quantities CRBC estimates from rollouts (docs/methods.md#crbc)
are exact here: V^μ(s), the β-discounted success probability under μ, and Q^μ(s, a)
(:func:`exact_values`). :func:`sample_groups` draws groups of rollouts from μ as a
:class:`~agentrl.credit.batch.StepBatch` together with the true per-step advantage
Q^μ(s_t, a_t) − V^μ(s_t), and :class:`SyntheticScorer` stands in for the policy model for
estimators that rescore responses (RELACE).

Design choices (departures from a real environment):

- One MDP per batch; every group draws its own start state from ``mdp.initial`` and all G
  rollouts of a group start there. Anchors are interned per group (``group * S + state``), as
  for real tasks, so estimators never pool statistics across groups even though the groups
  share the MDP; the truth is the same for all of them.
- The reward is binary: 0 at intermediate steps, 1 at a step that enters *success*. Entering
  *failure* or hitting the horizon gives 0. Time-limit truncation counts as failure, as in CRBC.
- :func:`exact_values` is the infinite-horizon value and ignores truncation. :func:`random_mdp`
  therefore picks the horizon T_max as the smallest one whose truncation probability from the
  start distribution is at most ``trunc_tol`` (default 1e-4), so the two agree up to that
  (:func:`truncation_probability` reports it).
"""

from __future__ import annotations

import re
import zlib
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from agentrl.credit.batch import StepBatch, StepTexts


@dataclass(frozen=True, eq=False)
class SyntheticMDP:
    """A finite MDP with absorbing success/failure nodes and a known behaviour policy.

    Attributes:
        P: (S, A, S + 2) float64 — P(x | s, a); columns S and S + 1 are success and failure.
        mu: (S, A) float64 — behaviour policy μ(a | s), strictly positive (every action is
            allowed in every state).
        initial: (S,) float64 — distribution of a group's start state.
        horizon: T_max, the step limit; an episode still running after T_max steps is
            truncated (and counts as failure).
    """

    P: np.ndarray
    mu: np.ndarray
    initial: np.ndarray
    horizon: int

    def __post_init__(self) -> None:
        s, a = self.mu.shape
        if self.P.shape != (s, a, s + 2):
            raise ValueError(f"P has shape {self.P.shape}, expected ({s}, {a}, {s + 2})")
        if self.initial.shape != (s,):
            raise ValueError(f"initial has shape {self.initial.shape}, expected ({s},)")
        if np.any(self.P < 0) or not np.allclose(self.P.sum(axis=2), 1.0):
            raise ValueError("every P[s, a] must be a probability distribution over S + 2 nodes")
        if np.any(self.mu <= 0) or not np.allclose(self.mu.sum(axis=1), 1.0):
            raise ValueError("every mu[s] must be a strictly positive distribution over actions")
        if np.any(self.initial < 0) or not np.isclose(self.initial.sum(), 1.0):
            raise ValueError("initial must be a probability distribution over the S states")
        if self.horizon < 1:
            raise ValueError(f"horizon={self.horizon} must be >= 1")

    @property
    def n_states(self) -> int:
        """S, the number of ordinary (non-absorbing) states."""
        return int(self.mu.shape[0])

    @property
    def n_actions(self) -> int:
        return int(self.mu.shape[1])

    @property
    def success(self) -> int:
        """Node id of the absorbing success node."""
        return self.n_states

    @property
    def failure(self) -> int:
        """Node id of the absorbing failure node."""
        return self.n_states + 1

    @property
    def action_names(self) -> tuple[str, ...]:
        """``("a0", "a1", ...)``: the action strings, indexed by action id."""
        return tuple(f"a{k}" for k in range(self.n_actions))


def state_chain(mdp: SyntheticMDP) -> tuple[np.ndarray, np.ndarray]:
    """The state chain under μ: M (S, S) with M(s, s') = Σ_a μ(a|s) P(s'|s, a), and b (S,) with
    b(s) = Σ_a μ(a|s) P(success|s, a)."""
    S = mdp.n_states
    step = np.einsum("sa,sax->sx", mdp.mu, mdp.P)  # (S, S + 2)
    return step[:, :S], step[:, S]


def exact_values(mdp: SyntheticMDP, beta: float = 0.98) -> tuple[np.ndarray, np.ndarray]:
    """Behaviour values V^μ (S,) and Q^μ (S, A) by one linear solve.

    Q(s, a) = β Σ_x P(x|s, a) V(x) with V(success) = 1 and V(failure) = 0, and
    V(s) = Σ_a μ(a|s) Q(s, a); hence (I − β M) V = β b (docs/methods.md#crbc, Eqs. 8-9). V(s) is the
    β-discounted success probability under μ; β = 1 gives the plain success probability, which
    is well defined because every state reaches an absorbing node (:func:`random_mdp`
    guarantees it; otherwise the solve raises). Infinite horizon: truncation is ignored.
    """
    if not 0.0 < beta <= 1.0:
        raise ValueError(f"beta={beta} must be in (0, 1]")
    S = mdp.n_states
    M, b = state_chain(mdp)
    V = np.linalg.solve(np.eye(S) - beta * M, beta * b)  # (S,)
    Q = beta * (mdp.P[:, :, :S] @ V + mdp.P[:, :, S])  # (S, A)
    return V, Q


def truncation_probability(mdp: SyntheticMDP, horizon: int | None = None) -> float:
    """Probability that an episode from ``mdp.initial`` is still running after ``horizon``
    (default ``mdp.horizon``) steps, i.e. is truncated."""
    M, _ = state_chain(mdp)
    d = mdp.initial.copy()
    for _ in range(mdp.horizon if horizon is None else horizon):
        d = d @ M
    return float(d.sum())


def expected_length(mdp: SyntheticMDP) -> float:
    """Expected episode length from ``mdp.initial`` without the horizon: initial·(I − M)⁻¹·1."""
    M, _ = state_chain(mdp)
    return float(mdp.initial @ np.linalg.solve(np.eye(mdp.n_states) - M, np.ones(mdp.n_states)))


def _horizon_for(M: np.ndarray, initial: np.ndarray, tol: float, cap: int) -> int:
    """Smallest T ≤ cap with P(not absorbed after T steps) ≤ tol (cap if none)."""
    d = initial.copy()
    for t in range(1, cap + 1):
        d = d @ M
        if d.sum() <= tol:
            return t
    return cap


def random_mdp(
    rng: np.random.Generator,
    n_states: int = 16,
    n_actions: int = 3,
    branching: int = 2,
    p_back: float = 0.15,
    p_self: float = 0.1,
    p_fail: float = 0.08,
    max_jump: int = 3,
    n_start: int = 3,
    mu_floor: float = 0.3,
    success_range: tuple[float, float] = (0.2, 0.8),
    trunc_tol: float = 1e-4,
    horizon: int | None = None,
    max_tries: int = 200,
) -> SyntheticMDP:
    """A random MDP with cycles whose success rates under μ lie in ``success_range``.

    States are ordered 0..S−1 by "progress". Each (s, a) gets 1..``branching`` successors with
    Dirichlet(1) weights; each successor is, independently, *failure* (prob ``p_fail``), s
    itself (a self loop, ``p_self``), an earlier state (a back edge, ``p_back``) or a forward
    jump s + j, j ~ U{1..max_jump}, where jumps past S − 1 land on *success*. Every state gets
    at least one forward-or-absorbing successor (forced on action 0 if the draw gave none), so
    by induction from the last state every state reaches an absorbing node with positive
    probability under μ (μ > 0 everywhere): the chain is absorbing and :func:`exact_values` is
    well posed even at β = 1. Small S and few actions make rollouts of a group revisit states,
    which is what anchor-based estimators feed on.

    Args:
        rng: the random generator (the MDP is a deterministic function of its state).
        n_states, n_actions: S and A.
        branching: most successors per (s, a) (1 gives deterministic transitions).
        p_back, p_self, p_fail: probabilities of a back edge, self loop, failure successor.
        max_jump: longest forward jump.
        n_start: start states are drawn among the first ``n_start`` states (Dirichlet weights).
        mu_floor: μ(·|s) = mu_floor/A + (1 − mu_floor)·Dirichlet(1), so no action is rare.
        success_range: draws are repeated until the success probability under μ (β = 1)
            from every start state is inside this range, so every group has both outcomes.
        trunc_tol: the horizon is the smallest T whose truncation probability ≤ this.
        horizon: a fixed T_max instead (e.g. small, to test truncation).
        max_tries: give up (``RuntimeError``) after this many draws outside the range.
    """
    S, A = n_states, n_actions
    if S < 1 or A < 1 or branching < 1 or max_jump < 1 or not 1 <= n_start <= S:
        raise ValueError("need n_states, n_actions, branching, max_jump >= 1, 1 <= n_start <= S")
    if min(p_back, p_self, p_fail) < 0 or p_back + p_self + p_fail >= 1:
        raise ValueError("p_back, p_self, p_fail must be >= 0 with a sum < 1")
    if not 0 < mu_floor <= 1:
        raise ValueError(f"mu_floor={mu_floor} must be in (0, 1]")
    kinds = np.array([p_fail, p_self, p_back, 1.0 - p_fail - p_self - p_back])
    for _ in range(max_tries):
        P = np.zeros((S, A, S + 2))
        for s in range(S):
            forward = False
            for a in range(A):
                k = int(rng.integers(1, branching + 1))
                weights = rng.dirichlet(np.ones(k))
                for w, kind in zip(weights, rng.choice(4, size=k, p=kinds)):
                    if kind == 0:
                        x = S + 1
                    elif kind == 1:
                        x = s
                    elif kind == 2 and s > 0:
                        x = int(rng.integers(0, s))
                    else:  # forward (a back edge from state 0 becomes forward too)
                        x = min(s + int(rng.integers(1, max_jump + 1)), S)
                    P[s, a, x] += w
                    forward |= x > s
            if not forward:
                # Reachability of an absorbing node: one forward edge on action 0 suffices.
                P[s, 0] *= 0.5
                P[s, 0, min(s + 1, S)] += 0.5
        mu = mu_floor / A + (1.0 - mu_floor) * rng.dirichlet(np.ones(A), size=S)
        initial = np.zeros(S)
        initial[:n_start] = rng.dirichlet(np.ones(n_start))
        draft = SyntheticMDP(P=P, mu=mu, initial=initial, horizon=1)
        V1, _ = exact_values(draft, beta=1.0)
        starts = V1[:n_start]
        if np.all((success_range[0] <= starts) & (starts <= success_range[1])):
            M, _ = state_chain(draft)
            T = horizon if horizon is not None else _horizon_for(M, initial, trunc_tol, 10_000)
            return SyntheticMDP(P=P, mu=mu, initial=initial, horizon=int(T))
    raise RuntimeError(f"no MDP with success rate in {success_range} after {max_tries} draws")


def true_advantage(mdp: SyntheticMDP, batch: StepBatch, beta: float = 0.98) -> np.ndarray:
    """(N,) float64 — Q^μ(s_t, a_t) − V^μ(s_t) of each step of a batch from :func:`sample_groups`
    (its anchors are ``group * S + state`` and its action ids are action indices)."""
    V, Q = exact_values(mdp, beta)
    state = batch.step_anchor % mdp.n_states
    return Q[state, batch.step_action] - V[state]


def sample_groups(
    mdp: SyntheticMDP,
    rng: np.random.Generator,
    n_groups: int,
    group_size: int,
    beta: float = 0.98,
    with_texts: bool = False,
) -> tuple[StepBatch, np.ndarray]:
    """Roll out ``n_groups`` × ``group_size`` episodes of μ; return the batch and the truth.

    Each group draws one start state from ``mdp.initial``; its G rollouts all start there.
    Sampling is vectorised over rollouts (one numpy pass per time step), so a million steps
    take well under a second.

    Returns:
        ``(batch, adv)``: a :class:`StepBatch` of N steps from M = n_groups·G trajectories
        (anchors ``group * S + state``, action ids = action index, ``action_names`` "a0"..,
        reward 1 at the last step of a won episode and 0 elsewhere, ``step_nll`` = −log μ(a|s)
        — the NLL of a one-token response — ``anchor_keys`` "state s", ``group_cluster``
        "start s" (the group's start state: groups with the same start state are the same task)
        and one cost column ``invalid``, all 0 since every action is valid), and ``adv`` (N,)
        float64 = Q^μ(s_t, a_t) − V^μ(s_t) at discount ``beta`` (:func:`true_advantage`).
        With ``with_texts`` the batch also carries :class:`StepTexts`: prompts "state s",
        responses "a k" (the action name), final observations "success", "failure" or
        "state s" (truncated).
    """
    if n_groups < 1 or group_size < 1:
        raise ValueError("n_groups and group_size must be >= 1")
    S, T = mdp.n_states, mdp.horizon
    n_traj = n_groups * group_size
    traj_group = np.repeat(np.arange(n_groups, dtype=np.int64), group_size)  # (M,)
    start = rng.choice(S, size=n_groups, p=mdp.initial)
    state = start[traj_group]  # (M,) current state of each rollout
    # Cumulative weights divided by their total: x / x is exactly 1.0, so from the last
    # positive column on they are exactly 1 and u ∈ [0, 1) can never pick a column past it.
    cum_mu = np.cumsum(mdp.mu, axis=1)  # (S, A)
    cum_mu /= cum_mu[:, -1:]
    cum_P = np.cumsum(mdp.P, axis=2)  # (S, A, S + 2)
    cum_P /= cum_P[:, :, -1:]

    active = np.arange(n_traj)
    record: list[tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]] = []
    for _ in range(T):
        s = state[active]
        # Inverse-CDF sampling: the index is the number of cumulative weights ≤ u, which skips
        # zero-probability columns because their cumulative weight equals the previous one.
        a = (rng.random(active.size)[:, None] >= cum_mu[s]).sum(axis=1)
        x = (rng.random(active.size)[:, None] >= cum_P[s, a]).sum(axis=1)
        record.append((active, s, a, x))
        running = x < S
        state[active[running]] = x[running]
        active = active[running]
        if active.size == 0:
            break

    length = np.zeros(n_traj, dtype=np.int64)
    last_next = np.empty(n_traj, dtype=np.int64)  # successor node of each trajectory's last step
    for idx, _, _, x in record:
        length[idx] += 1
        last_next[idx] = x
    offset = np.concatenate(([0], np.cumsum(length)[:-1]))  # (M,) first step of each trajectory
    n = int(length.sum())
    step_traj = np.empty(n, dtype=np.int64)
    step_t = np.empty(n, dtype=np.int64)
    step_state = np.empty(n, dtype=np.int64)
    step_action = np.empty(n, dtype=np.int64)
    for t, (idx, s, a, _) in enumerate(record):
        pos = offset[idx] + t
        step_traj[pos], step_t[pos], step_state[pos], step_action[pos] = idx, t, s, a

    won = last_next == mdp.success  # (M,)
    is_last = step_t == length[step_traj] - 1
    absorbed = last_next[step_traj] >= S
    step_reward = (is_last & won[step_traj]).astype(np.float64)
    anchor_keys = tuple(f"state {s}" for s in range(S)) * n_groups
    texts = None
    if with_texts:
        names = mdp.action_names
        state_text = anchor_keys[:S]
        final = {mdp.success: "success", mdp.failure: "failure"}
        texts = StepTexts(
            prompts=tuple(state_text[s] for s in step_state.tolist()),
            responses=tuple(names[a] for a in step_action.tolist()),
            final_obs=tuple(final.get(x, f"state {x}") for x in last_next.tolist()),
        )
    batch = StepBatch(
        step_reward=step_reward,
        step_traj=step_traj,
        step_t=step_t,
        step_anchor=step_traj // group_size * S + step_state,  # traj_group[step_traj] * S + s
        step_action=step_action,
        step_valid=np.ones(n, dtype=bool),
        step_terminated=is_last & absorbed,
        step_truncated=is_last & ~absorbed,
        step_nll=-np.log(mdp.mu[step_state, step_action]),
        traj_group=traj_group,
        traj_won=won,
        n_groups=n_groups,
        action_names=mdp.action_names,
        texts=texts,
        anchor_keys=anchor_keys,
        step_cost=np.zeros((n, 1)),
        cost_names=("invalid",),
        group_cluster=tuple(f"start {s}" for s in start.tolist()),
    )
    return batch, true_advantage(mdp, batch, beta)


# Outcome words the scorer recognises in a context; the first match decides. "not solved" is
# listed before "solved" so that it wins at the same position.
_OUTCOME = re.compile(
    r"\b(?:(?P<fail>not solved|unsolved|fail\w*|lost|loss)|(?P<win>success\w*|succeed\w*|"
    r"solved|won|win))\b",
    re.IGNORECASE,
)
_STATE = re.compile(r"state (\d+)")
_ACTION = re.compile(r"a(\d+)")


class SyntheticScorer:
    """A deterministic stand-in for the policy model's teacher-forced scorer.

    ``score(contexts, responses)`` (the :class:`~agentrl.credit.Scorer` protocol) returns the
    log-likelihood of the response "a k" given a context mentioning "state s" under an ideal
    model of ``mdp``: log μ(a|s) without outcome, and with an outcome word in the context (e.g.
    RELACE's "Outcome: success ..."), the Bayes hindsight log-likelihood

        log μ(a | s, o) = log μ(a|s) + log P(o | s, a) − log P(o | s),

    where P(success|s, a) = Q¹(s, a) and P(success|s) = V¹(s) are the undiscounted (β = 1)
    behaviour values and failure takes 1 − those. So the outcome-dependent change Δ is
    log(Q¹/V¹) after a success and log((1 − Q¹)/(1 − V¹)) after a failure: an upper bound on
    what rescoring can tell an estimator. ``noise`` > 0 adds deterministic pseudo-random
    N(0, noise²) terms keyed on a CRC of each (context, response) pair. A pair whose state or
    action cannot be parsed gets a fixed CRC-derived log-prob in [−3, −1].

    Args:
        mdp: the MDP the batch was sampled from.
        noise: scale of the per-pair deterministic noise.
        floor: probabilities are clipped to at least this before the log.
    """

    def __init__(self, mdp: SyntheticMDP, noise: float = 0.0, floor: float = 1e-6):
        if noise < 0 or not 0 < floor < 1:
            raise ValueError("need noise >= 0 and 0 < floor < 1")
        self.mdp = mdp
        self.noise = float(noise)
        _, Q1 = exact_values(mdp, beta=1.0)
        V1 = (mdp.mu * Q1).sum(axis=1)
        log_mu = np.log(mdp.mu)  # (S, A)
        lg = np.log
        # Rows: no outcome, success, failure; each (S, A).
        self._table = np.stack(
            [
                log_mu,
                log_mu + lg(np.maximum(Q1, floor)) - lg(np.maximum(V1, floor))[:, None],
                log_mu + lg(np.maximum(1 - Q1, floor)) - lg(np.maximum(1 - V1, floor))[:, None],
            ]
        )
        # Parsed texts, cached: the few distinct strings of a batch repeat over every step.
        self._contexts: dict[str, int] = {}  # context → outcome·(S + 1) + state + 1
        self._responses: dict[str, int] = {}  # response → action, or −1

    def _parse_context(self, text: str) -> int:
        """Code of a context: outcome (0 none, 1 success, 2 failure) · (S + 1) + state + 1,
        where state = −1 when no valid "state s" is found."""
        S = self.mdp.n_states
        m = _STATE.search(text)
        s = int(m.group(1)) if m else -1
        o = _OUTCOME.search(text)
        outcome = 0 if o is None else (2 if o.group("fail") else 1)
        return outcome * (S + 1) + (s + 1 if 0 <= s < S else 0)

    def _parse_response(self, text: str) -> int:
        m = _ACTION.search(text)
        a = int(m.group(1)) if m else -1
        return a if 0 <= a < self.mdp.n_actions else -1

    def score(self, contexts: Sequence[str], responses: Sequence[str]) -> np.ndarray:
        """Log-likelihood of each response given its context: (n,) float64."""
        if len(contexts) != len(responses):
            raise ValueError(f"{len(contexts)} contexts but {len(responses)} responses")
        n = len(contexts)
        # Parse only strings not seen before, then look every pair up at C speed (map +
        # fromiter): a million pairs take a fraction of a second.
        for text in set(contexts).difference(self._contexts):
            self._contexts[text] = self._parse_context(text)
        for text in set(responses).difference(self._responses):
            self._responses[text] = self._parse_response(text)
        code = np.fromiter(map(self._contexts.__getitem__, contexts), dtype=np.int64, count=n)
        action = np.fromiter(map(self._responses.__getitem__, responses), np.int64, count=n)
        outcome, state = np.divmod(code, self.mdp.n_states + 1)
        state -= 1
        ok = (state >= 0) & (action >= 0)
        out = np.empty(n, dtype=np.float64)
        out[ok] = self._table[outcome[ok], state[ok], action[ok]]
        for i in np.flatnonzero(~ok):
            out[i] = -1.0 - 2.0 * _unit(contexts[i], responses[i])
        if self.noise > 0:
            u = np.fromiter(
                (_unit(c, r) for c, r in zip(contexts, responses)), dtype=np.float64, count=n
            )
            out += self.noise * _normal_quantile(u)
        return out


def _unit(context: str, response: str) -> float:
    """A deterministic number in (0, 1) from a pair of strings (CRC-32, not Python's salted
    ``hash``, so it is the same in every process)."""
    h = zlib.crc32(response.encode(), zlib.crc32(context.encode()))
    return (h + 0.5) / 2**32


def _normal_quantile(u: np.ndarray) -> np.ndarray:
    """Standard normal quantile of u ∈ (0, 1), via scipy."""
    from scipy.special import ndtri

    return ndtri(u)
