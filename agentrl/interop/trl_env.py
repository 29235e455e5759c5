"""An agentrl environment as a TRL ``environment_factory``: multi-turn GRPO in TRL on our envs.

TRL's ``GRPOTrainer(environment_factory=...)`` builds one environment object per rollout. Its
public methods are the tools the model may call; ``reset(**row)`` starts an episode (``row`` is
the dataset row; the text it returns is appended to the prompt); ``get_reward()`` scores the
finished rollout. :class:`AgentrlToolEnv` puts any registered agentrl environment behind that
contract:

.. code-block:: python

    from trl import GRPOConfig, GRPOTrainer
    from agentrl.interop.trl_env import environment_factory, seed_dataset

    trainer = GRPOTrainer(
        model="Qwen/Qwen3-0.6B",
        args=GRPOConfig(num_generations=8, max_completion_length=1024, ...),
        train_dataset=seed_dataset(256),  # one row per task seed; TRL repeats it per generation
        environment_factory=environment_factory("sokoban", dim_room=[6, 6]),
    )
    trainer.train()

**One tool, ``act(command)``.** agentrl's actions are free text whose valid set can change at
every step (ALFWorld's admissible commands, WebShop's ``search[...]``/``click[...]``, a proof),
so one tool whose argument is the command keeps the action space exactly the one
``python -m agentrl.run`` trains on, for every environment, and the observation the tool returns
lists the admissible actions when the environment has them. One tool per verb would fix a
grammar per environment, and would still need an argument for most verbs.

**Seeds and groups.** GRPO compares the rollouts of one prompt, so they must play the same task:
:func:`seed_dataset` gives each row a ``seed``, TRL repeats a row ``num_generations`` times, and
:meth:`AgentrlToolEnv.reset` resets with it. Without a ``seed`` column each reset draws a new
task, and the rollouts of a group would play different tasks.

**What TRL gets.** ``get_reward`` is the episode's return (the sum of step rewards): TRL's GRPO
gives every token of a rollout one trajectory-level advantage. ``python -m agentrl.run``
instead records every step with its anchor state and assigns step-level credit (GiGPO, CRBC and
the other estimators), keeps terminated and truncated apart, and penalises invalid actions.

**Chat templates.** TRL parses tool calls only for chat templates it recognises (Qwen, Llama 3,
Gemma 4 ...). agentrl's tiny model's template has no tool calls: :func:`use_tool_template` gives
a tokenizer :data:`TOOL_CHAT_TEMPLATE` (tool calls as ``<tool_call>{json}</tool_call>``, every
turn closed by the tokenizer's EOS) and the matching :data:`RESPONSE_TEMPLATE` parser.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any

from agentrl.registry import make

TOOL_CHAT_TEMPLATE = (
    # No whitespace control: transformers renders with trim_blocks, so a newline right after a
    # block tag would vanish; every newline is either after an expression or written as one.
    "{% if tools %}<|system|>\nTools, called as "
    '<tool_call>{"name": <tool>, "arguments": <arguments as JSON>}</tool_call>:'
    "{% for tool in tools %}{{ '\\n' }}{% set f = tool['function'] %}{{ f['name'] }}("
    "{{ (f['parameters']['properties'] if f.get('parameters') else {}) | list | join(', ') }}"
    "): {{ f.get('description', '') }}{% endfor %}{{ eos_token }}{{ '\\n' }}"
    "{% endif %}"
    "{% for m in messages %}"
    "{% if m['role'] == 'assistant' %}<|assistant|>{{ '\\n' }}{{ m['content'] or '' }}"
    "{% for call in m.get('tool_calls') or [] %}"
    '<tool_call>{"name": "{{ call["function"]["name"] }}", "arguments": '
    '{{ call["function"]["arguments"] | tojson }}}</tool_call>'
    "{% endfor %}{{ eos_token }}{{ '\\n' }}"
    "{% else %}<|{{ m['role'] }}|>{{ '\\n' }}{{ m['content'] }}{{ eos_token }}{{ '\\n' }}"
    "{% endif %}"
    "{% endfor %}"
    "{% if add_generation_prompt %}<|assistant|>{{ '\\n' }}{% endif %}"
)
"""A chat template with tool calls for tokenizers that have none (agentrl's tiny model): the
role headers of :data:`agentrl.model.build.CHAT_TEMPLATE`, each turn closed by EOS (TRL cuts a
turn at EOS when it appends tool results), and a system turn listing each tool in one line,
``name(arguments): description`` (a full JSON schema would triple a small model's prompt)."""


def response_template(eos_token: str) -> dict[str, Any]:
    """The parser of :data:`TOOL_CHAT_TEMPLATE`'s assistant turns (transformers'
    ``response_template`` format): text, then ``<tool_call>{json}</tool_call>`` calls, then EOS."""
    import re

    return {
        "defaults": {"role": "assistant"},
        "start_anchor": "<|assistant|>\n",
        "fields": {
            "tool_calls": {
                "open": "<tool_call>",
                "close_pattern": r"</tool_call>\s*",
                "repeats": True,
                "content": "json",
                "transform": {"type": "function", "function": "{content}"},
            },
            "content": {"close_pattern": re.escape(eos_token) + r"\s*", "content": "text"},
        },
    }


def use_tool_template(tokenizer: Any) -> Any:
    """Give ``tokenizer`` :data:`TOOL_CHAT_TEMPLATE` and its response parser (in place; returned
    for chaining). For tokenizers whose own template TRL does not recognise, such as agentrl's
    tiny model's; real instruct models keep theirs."""
    tokenizer.chat_template = TOOL_CHAT_TEMPLATE
    tokenizer.response_template = response_template(tokenizer.eos_token)
    return tokenizer


class AgentrlToolEnv:
    """One agentrl environment behind TRL's ``environment_factory`` contract.

    The public methods are exactly TRL's: ``reset``, ``get_reward`` and the tool ``act`` (TRL
    offers every other public method to the model as a tool, so helpers stay private). The
    attributes ``env``, ``steps`` (steps of the current episode), ``total_steps``, ``reward``
    (the return so far), ``done`` and ``info`` are there to inspect.
    """

    def __init__(self, env_name: str = "sokoban", **env_kwargs: Any) -> None:
        self.env = make(env_name, **env_kwargs)
        self.env_name = env_name
        self.steps = 0
        self.total_steps = 0
        self.reward = 0.0
        self.done = True
        self.info: dict[str, Any] = {}

    def reset(self, seed: int | None = None, **row: Any) -> str:
        """Start an episode (the task of ``seed``, from the dataset row; other columns, such as
        TRL's ``prompt``, are ignored) and return the text TRL appends to the prompt: the task,
        the first observation, the admissible actions and how to act."""
        obs, self.info = self.env.reset(seed=None if seed is None else int(seed))
        self.steps, self.reward, self.done = 0, 0.0, False
        parts = [str(self.info.get("task") or "").strip(), obs.strip()]
        parts.append(self._admissible_line())
        parts.append("Act by calling the act tool with one action as its command.")
        return "\n".join(p for p in parts if p)

    def act(self, command: str) -> str:
        """Take one action in the environment.

        Args:
            command: The action to take, for example one of the admissible actions.

        Returns:
            The new observation, the reward of the action and whether the episode is over.
        """
        if self.done:
            return "The episode is over: no more actions are taken."
        obs, reward, terminated, truncated, self.info = self.env.step(str(command))
        self.steps += 1
        self.total_steps += 1
        self.reward += float(reward)
        self.done = bool(terminated or truncated)
        parts = [obs.strip()]
        if not self.info.get("action_valid", True):
            parts.append(f"{command!r} is not a valid action here.")
        parts.append(f"Reward: {float(reward):g}.")
        if self.done:
            parts.append("The task is solved." if self.info.get("won") else "The episode is over.")
        else:
            parts.append(self._admissible_line())
        return "\n".join(p for p in parts if p)

    def get_reward(self) -> float:
        """The episode's return: the sum of the rewards of its steps (0 without any)."""
        return float(self.reward)

    def _admissible_line(self) -> str:
        admissible = self.info.get("admissible_actions")
        return "Admissible actions: " + ", ".join(admissible) if admissible else ""


def environment_factory(env_name: str, **env_kwargs: Any) -> Callable[[], AgentrlToolEnv]:
    """What to pass as TRL's ``environment_factory``: a callable without arguments that builds
    :class:`AgentrlToolEnv` for ``agentrl.make(env_name, **env_kwargs)``. The options are checked
    here, once, so a misspelt one fails before TRL starts."""
    AgentrlToolEnv(env_name, **env_kwargs).env.close()
    return functools.partial(AgentrlToolEnv, env_name, **env_kwargs)


def seed_dataset(n: int, start: int = 0, prompt: str = "") -> Any:
    """A ``datasets.Dataset`` of ``n`` rows for ``GRPOTrainer(train_dataset=...)``: a
    conversational ``prompt`` (one user turn holding ``prompt``; :meth:`AgentrlToolEnv.reset`
    appends the task to it) and ``seed`` = ``start``, ..., ``start + n - 1``. Keep ``start`` below
    :data:`agentrl.env_api.EVAL_SEED_BASE` so evaluation tasks stay held out."""
    from datasets import Dataset

    if n < 1:
        raise ValueError(f"n={n} is invalid: it must be at least 1 (rows of the dataset)")
    if prompt and not prompt[-1].isspace():
        prompt += "\n"  # TRL appends reset()'s text to the prompt as is
    return Dataset.from_dict(
        {
            "prompt": [[{"role": "user", "content": prompt}]] * n,
            "seed": list(range(start, start + n)),
        }
    )


__all__ = [
    "TOOL_CHAT_TEMPLATE",
    "AgentrlToolEnv",
    "environment_factory",
    "response_template",
    "seed_dataset",
    "use_tool_template",
]
