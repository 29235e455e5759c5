"""The contract every registered estimator keeps, as a check a plugin's own tests can call.

``check_estimator("mine")`` runs estimator ``mine`` through :func:`compute_advantages` (the
path the trainer takes) on batches of rollouts from small random MDPs
(:mod:`agentrl.credit.synthetic`) and raises :class:`ContractError` naming the first broken
rule:

1. **Shape and values**: one finite float per step, ``(N,)``.
2. **Purity**: the batch is not modified, and the same inputs (batch, config, state) give the
   same advantages and the same new state.
3. **Group order**: listing the task groups in another order permutes the advantages with
   them and changes nothing else (credit never depends on where a group sits in the batch).
4. **Degenerate batches**: groups whose episodes all have the same return (all failed: the
   common case early in training), groups of one episode, and a batch of one episode give
   finite advantages, not NaN from a zero standard deviation.
5. **State** (estimators registered with ``stateful=True``): the state starts from None, is
   plain data (:func:`check_state`) and can be fed back in.

Lost episodes never reach an estimator (:func:`compute_advantages` removes them and gives their
steps 0), so there is nothing to check for them. Estimators with a learned critic are checked
only when a ``critic`` is passed; those that rescore responses get a
:class:`~agentrl.credit.synthetic.SyntheticScorer`.
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any

import numpy as np

from agentrl.credit.batch import StepBatch, StepTexts
from agentrl.credit.estimators import (
    Advantages,
    Critic,
    compute_advantages,
    estimator_config,
    get_estimator,
)
from agentrl.credit.synthetic import SyntheticScorer, random_mdp, sample_groups


class ContractError(AssertionError):
    """An estimator broke a rule of the contract; the message says which and where."""


def check_estimator(
    name: str,
    cfg: Any = None,
    *,
    critic: Critic | None = None,
    seeds: tuple[int, ...] = (0, 1, 2),
) -> list[str]:
    """Check registered estimator ``name`` against the contract (see the module docstring).

    Args:
        name: the registered name (``algo=<name>``).
        cfg: its config (default: the config dataclass's defaults).
        critic: a :class:`~agentrl.credit.Critic` for estimators registered with ``critic=``;
            without one such an estimator is not checked (the returned list says so).
        seeds: one random MDP and batch per seed.
    Returns:
        The names of the checks that ran.
    Raises:
        ContractError: the first rule broken, with the seed.
    """
    spec = get_estimator(name)
    cfg = estimator_config(name) if cfg is None else cfg
    if spec.critic and critic is None:
        return [f"skipped: {name} needs a critic ({spec.critic}); pass critic="]
    ran: list[str] = []
    for seed in seeds:
        rng = np.random.default_rng(seed)
        mdp = random_mdp(rng, n_states=8, n_actions=3)
        batch, _ = sample_groups(mdp, rng, n_groups=3, group_size=4, with_texts=True)
        run = _Runner(name, cfg, SyntheticScorer(mdp), critic, spec.stateful, seed)
        ran += run.shape_and_purity(batch)
        ran += run.group_order(batch, rng.permutation(batch.n_groups))
        ran += run.degenerate(batch)
    return list(dict.fromkeys(ran))


class _Runner:
    def __init__(self, name, cfg, scorer, critic, stateful: bool, seed: int):
        self.name, self.cfg, self.scorer, self.critic = name, cfg, scorer, critic
        self.stateful, self.seed = stateful, seed

    def fail(self, rule: str, detail: str) -> ContractError:
        return ContractError(
            f"estimator {self.name!r} breaks '{rule}' (seed {self.seed}): {detail}"
        )

    def __call__(
        self, batch: StepBatch, state: Any = None, rule: str = "shape and values"
    ) -> Advantages:
        try:
            return compute_advantages(
                self.name,
                batch,
                self.cfg,
                scorer=self.scorer,
                state=state,
                critic=self.critic,
            )
        except (ValueError, FloatingPointError) as exc:  # shape, finiteness
            raise self.fail(rule, str(exc)) from exc
        except TypeError as exc:  # a state that is not plain data
            raise self.fail("state", str(exc)) from exc

    def shape_and_purity(self, batch: StepBatch) -> list[str]:
        before = _snapshot(batch)
        first = self(batch)
        if _snapshot(batch) != before:
            raise self.fail("purity", "the batch was modified")
        again = self(batch)
        if not np.array_equal(first.step, again.step):
            raise self.fail("purity", "the same inputs gave different advantages")
        checks = ["shape and values", "purity"]
        if self.stateful:
            if repr(first.state) != repr(again.state):
                raise self.fail("state", "the same inputs gave different states")
            self(batch, state=first.state)  # the state can be fed back
            checks.append("state")
        return checks

    def group_order(self, batch: StepBatch, perm: np.ndarray) -> list[str]:
        moved, step_order = permute_groups(batch, perm)
        a = self(batch).step
        b = self(moved).step
        if not np.allclose(b, a[step_order], rtol=1e-9, atol=1e-12):
            worst = float(np.max(np.abs(b - a[step_order])))
            raise self.fail("group order", f"reordering the groups changed advantages by {worst}")
        return ["group order"]

    def degenerate(self, batch: StepBatch) -> list[str]:
        cases = {
            "all episodes failed": replace(
                batch,
                step_reward=np.zeros_like(batch.step_reward),
                traj_won=np.zeros_like(batch.traj_won),
            ),
            "groups of one episode": batch.select_trajs(_first_of_each_group(batch)),
            "one episode": batch.select_trajs(np.arange(batch.n_trajs) == 0),
        }
        for what, case in cases.items():
            out = self(case, rule=f"degenerate batches ({what})")
            if out.step.shape != (case.n_steps,) or not np.all(np.isfinite(out.step)):
                raise self.fail("degenerate batches", f"{what}: non-finite advantages")
        return ["degenerate batches"]


def permute_groups(batch: StepBatch, perm: np.ndarray) -> tuple[StepBatch, np.ndarray]:
    """``batch`` with its groups listed in the order ``perm`` (new group k = old ``perm[k]``).

    Returns the new batch and ``step_order`` (N,): new step n is old step ``step_order[n]``.
    Anchor and action ids keep their values (they are labels); trajectories keep their order
    within a group, steps within a trajectory.
    """
    rank = np.empty_like(perm)
    rank[perm] = np.arange(len(perm))  # old group -> new group
    traj_order = np.argsort(rank[batch.traj_group], kind="stable")  # new traj -> old traj
    new_index = np.empty_like(traj_order)
    new_index[traj_order] = np.arange(len(traj_order))  # old traj -> new traj
    step_order = np.concatenate([np.flatnonzero(batch.step_traj == t) for t in traj_order]).astype(
        np.int64
    )
    texts = batch.texts
    if texts is not None:
        texts = StepTexts(
            prompts=tuple(texts.prompts[i] for i in step_order),
            responses=tuple(texts.responses[i] for i in step_order),
            final_obs=tuple(texts.final_obs[i] for i in traj_order),
            final_prompts=tuple(texts.final_prompts[i] for i in traj_order)
            if texts.final_prompts
            else (),
        )
    moved = replace(
        batch,
        step_reward=batch.step_reward[step_order],
        step_traj=new_index[batch.step_traj[step_order]],
        step_t=batch.step_t[step_order],
        step_anchor=batch.step_anchor[step_order],
        step_action=batch.step_action[step_order],
        step_valid=batch.step_valid[step_order],
        step_terminated=batch.step_terminated[step_order],
        step_truncated=batch.step_truncated[step_order],
        step_nll=batch.step_nll[step_order],
        traj_group=rank[batch.traj_group[traj_order]],
        traj_won=batch.traj_won[traj_order],
        traj_lost=batch.traj_lost[traj_order],
        step_cost=batch.step_cost[step_order],
        texts=texts,
        group_cluster=None
        if batch.group_cluster is None
        else tuple(batch.group_cluster[g] for g in perm),
        step_rubric=None if batch.step_rubric is None else batch.step_rubric[step_order],
    )
    return moved, step_order


def _first_of_each_group(batch: StepBatch) -> np.ndarray:
    keep = np.zeros(batch.n_trajs, dtype=bool)
    _, first = np.unique(batch.traj_group, return_index=True)
    keep[first] = True
    return keep


def _snapshot(batch: StepBatch) -> list:
    out = []
    for value in vars(batch).values():
        out.append(value.tobytes() if isinstance(value, np.ndarray) else repr(value))
    return out
