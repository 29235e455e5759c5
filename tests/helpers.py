"""Small builders shared by tests."""

from __future__ import annotations

from agentrl.batch import Step, StepBatch, Trajectory, TrajectoryGroup


def make_groups(spec: list[list[list[tuple]]]) -> list[TrajectoryGroup]:
    """Groups from ``spec[g][i] = [(anchor, action, reward), ...]``; the last step terminates."""
    groups = []
    for g, trajs in enumerate(spec):
        group = TrajectoryGroup(task=f"task {g}", seed=g)
        for steps in trajs:
            tr = Trajectory()
            for t, (anchor, action, reward) in enumerate(steps):
                last = t == len(steps) - 1
                tr.steps.append(
                    Step(
                        prompt_ids=[1],
                        response_ids=[2],
                        logprobs=[-0.5],
                        reward=float(reward),
                        terminated=last,
                        truncated=False,
                        anchor=anchor,
                        action=action,
                        valid=action is not None,
                    )
                )
            tr.won = steps[-1][2] > 0
            group.trajectories.append(tr)
        groups.append(group)
    return groups


def make_batch(spec) -> StepBatch:
    return StepBatch.from_groups(make_groups(spec))
