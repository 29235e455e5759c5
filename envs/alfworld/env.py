"""ALFWorld (``env=alfworld``, ``agentrl/ALFWorld-v0``) on the real alfworld/textworld engine.

Each episode plays one game file: the official ``json_2.1.1`` splits when ``ALFWORLD_DATA`` (or
``env.data_dir``) holds them, generated games otherwise (see :mod:`.data`). The game of an
episode is drawn with the env's ``np_random`` from the split's list, so a seed fixes it.

- Observation: the engine's text, unchanged ("-= Welcome to TextWorld, ALFRED! =-\\n\\nYou are in
  the middle of a room. ... Your task is to: put a clean apple in fridge.", then "You arrive at
  fridge 1. The fridge 1 is closed.", ...).
- Action: one of the admissible commands; matching ignores case, repeated spaces and a final
  period. Anything else is an invalid action: the state does not change and the observation is
  "Nothing happens." (what ALFWorld answers to an unknown command).
- Reward ``win_reward`` (10) when the goal holds, which ends the episode; 50 steps at most.
- ``info``: ``won``, ``admissible_actions``, ``task`` (the "Your task is to: ..." line),
  ``task_type`` (one of the six ALFWorld types), ``gamefile``, ``generated`` (whether the games
  are generated rather than official) and ``anchor`` = (observation, location, inventory,
  sorted admissible commands): the observation alone aliases different states ("You are not
  carrying anything." anywhere in the room). The observation in the anchor is that of the last
  executed command, so an invalid action ("Nothing happens.") leaves the anchor unchanged.
- ``reset(options={"split": "eval"})`` plays ``eval_split`` (``valid_seen`` by default);
  ``{"split": "valid_unseen"}`` names a split; ``{"gamefile": path}`` plays one game file.
"""

from __future__ import annotations

import json
import logging
import re
from collections.abc import Hashable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

from agentrl.configuration import check, check_choice
from agentrl.env_api import TextEnv, Transition

from .data import SPLITS, TASK_TYPES

log = logging.getLogger(__name__)

_SPACES = re.compile(r"\s+")
_TASK_LINE = re.compile(r"Your task is to: [^\n]*")
NOTHING_HAPPENS = "Nothing happens."
_LOOK_ONLY = ("look", "inventory", "examine ", "help")
"""Commands that only describe (the PDDL domain changes no fact for them): a demonstration
stays on its walkthrough through them."""


@dataclass(frozen=True)
class ALFWorldConfig:
    """Every ALFWorld setting with its default (``env.*`` keys)."""

    data_dir: str = ""
    """Folder holding ``json_2.1.1`` (official data); "" = ``$ALFWORLD_DATA``, and if that is
    unset too, generated games."""
    train_split: str = "train"
    eval_split: str = "valid_seen"
    """Split of ``reset(options={"split": "eval"})``: ``valid_seen`` (in-distribution) or
    ``valid_unseen`` (out-of-distribution)."""
    task_types: tuple[int, ...] = (1, 2, 3, 4, 5, 6)
    """ALFWorld task types to play (1 pick_and_place_simple, 2 look_at_obj_in_light, 3 clean,
    4 heat, 5 cool, 6 pick_two_obj_and_place)."""
    max_steps: int = 50
    win_reward: float = 10.0
    engine: Literal["fast", "stock"] = "fast"
    """``fast``: agentrl's engine (same transcripts, several times faster); ``stock``:
    textworld's ``PddlEnv`` as ALFWorld ships it."""
    num_games: int = 0
    """Use only the first N games of each split (sorted by path); 0 = all."""
    generated_games: int = 60
    """Games per split generated when no official data is present."""
    generated_seed: int = 0
    cache_dir: str = ""
    """Where generated games are cached; "" = ``$AGENTRL_CACHE/alfworld`` or
    ``~/.cache/agentrl/alfworld``."""
    progress: bool = True
    """Show a progress bar while generating games."""

    def __post_init__(self) -> None:
        object.__setattr__(self, "task_types", tuple(int(t) for t in self.task_types))
        for t in self.task_types:
            check_choice("env.task_types", t, sorted(TASK_TYPES))
        check(len(self.task_types) > 0, "env.task_types", self.task_types, "non-empty")
        check_choice("env.train_split", self.train_split, SPLITS)
        check_choice("env.eval_split", self.eval_split, SPLITS)
        check_choice("env.engine", self.engine, ("fast", "stock"))
        check(self.max_steps > 0, "env.max_steps", self.max_steps, "> 0")
        check(self.num_games >= 0, "env.num_games", self.num_games, ">= 0")
        check(self.generated_games > 0, "env.generated_games", self.generated_games, "> 0")


# One game list per (config, split) per process: every env of a worker shares it.
_GAME_LISTS: dict[tuple, tuple[list[str], bool]] = {}


def game_list(cfg: ALFWorldConfig, split: str) -> tuple[list[str], bool]:
    """(game files of ``split``, whether they are generated) for ``cfg``."""
    from . import data

    key = (cfg.data_dir, split, cfg.task_types, cfg.num_games, cfg.generated_games,
           cfg.generated_seed, cfg.cache_dir)  # fmt: skip
    if key in _GAME_LISTS:
        return _GAME_LISTS[key]
    root = data.official_root(cfg.data_dir)
    if root is not None:
        games, generated = data.official_games(root, split, cfg.task_types), False
    else:
        games = data.generated_games(
            cfg.cache_dir,
            split,
            cfg.generated_games,
            cfg.generated_seed,
            cfg.task_types,
            progress=cfg.progress,
        )
        generated = True
        log.info("ALFWorld %s: %d generated games", split, len(games))
    if cfg.num_games:
        games = games[: cfg.num_games]
    _GAME_LISTS[key] = (games, generated)
    return games, generated


def normalize_command(text: str) -> str:
    """Lowercase, single spaces, no final period: how a response is matched to a command."""
    return _SPACES.sub(" ", text.strip().lower()).rstrip(".").strip()


class ALFWorldEnv(TextEnv):
    """ALFWorld household tasks as a text environment (see the module docstring)."""

    ends_only_on_success = True

    def __init__(self, render_mode: str | None = None, **kwargs: Any):
        super().__init__()
        from agentrl.configuration import from_mapping

        from .engine import FastEngine, StockEngine, require_alfworld

        require_alfworld()
        self.cfg = from_mapping(ALFWorldConfig, kwargs, path="env")
        self.max_steps = self.cfg.max_steps
        self.render_mode = render_mode
        self.engine = FastEngine() if self.cfg.engine == "fast" else StockEngine()
        self._gamefile: str | None = None
        self._loaded: str | None = None
        self._state = None
        self._task_text = ""
        self._task_type = ""
        self._generated = False
        self._lookup: dict[str, str] = {}
        self._lookups: dict[tuple[str, ...], dict[str, str]] = {}
        self._anchor_obs = ""
        self._executed: list[str] = []  # commands executed this episode (for demonstration)
        self._walkthroughs: dict[str, list[str] | None] = {}

    @property
    def data_notice(self) -> str | None:  # type: ignore[override]
        """Said once per run by the env pools: generated games are not the official splits."""
        from . import data

        if data.official_root(self.cfg.data_dir) is not None:
            return None
        return (
            "ALFWorld: no official data (set ALFWORLD_DATA or env.data_dir), so the games are "
            "GENERATED: results on them are not comparable to published ALFWorld numbers"
        )

    def prepare(self) -> None:
        """Find (or generate) the training and evaluation games now, in this process.

        The environment pool calls this once before starting its workers, so generated games
        are made once, with a progress bar, instead of by every worker on its first reset.
        """
        game_list(self.cfg, self.cfg.train_split)
        game_list(self.cfg, self.cfg.eval_split)

    # -- TextEnv hooks ------------------------------------------------------------------------
    def _pick_game(self, options: dict[str, Any] | None) -> str:
        options = options or {}
        if options.get("gamefile"):
            self._generated = False
            return str(options["gamefile"])
        split = options.get("split", "train")
        split = {"train": self.cfg.train_split, "eval": self.cfg.eval_split}.get(split, split)
        check_choice("options['split']", split, (*SPLITS, "eval"))
        games, self._generated = game_list(self.cfg, split)
        return games[int(self.np_random.integers(len(games)))]

    def _reset(self, options: dict[str, Any] | None) -> str:
        gamefile = self._pick_game(options)
        if gamefile != self._loaded:
            self.engine.load(gamefile)
            self._loaded = gamefile
            self._lookups.clear()
            with open(Path(gamefile).parent / "traj_data.json") as fh:
                self._task_type = str(json.load(fh).get("task_type", ""))
        self._gamefile = gamefile
        self._executed = []
        self._state = self.engine.reset()
        self._anchor_obs = self._state.feedback
        found = _TASK_LINE.search(self._state.feedback)
        self._task_text = found.group(0).strip() if found else "Your task is to: (unknown)"
        self._set_lookup()
        return self._state.feedback

    def _set_lookup(self) -> None:
        # One lookup per distinct list of commands (a game has a few hundred), never changed.
        commands = self._state.admissible_commands
        lookup = self._lookups.get(commands)
        if lookup is None:
            lookup = self._lookups[commands] = {normalize_command(c): c for c in commands}
        self._lookup = lookup

    def _step(self, action: str) -> Transition:
        command = self._lookup.get(normalize_command(action)) if action.strip() else None
        if command is None:
            # Unchanged state; the engine would answer the same text without moving.
            self._state = _with_feedback(self._state, NOTHING_HAPPENS)
            return Transition(NOTHING_HAPPENS, 0.0, False, False, None)
        self._state = self.engine.step(command)
        if not command.startswith(_LOOK_ONLY):
            self._executed.append(command)
        self._anchor_obs = self._state.feedback
        self._set_lookup()
        won = self._state.won
        reward = self.cfg.win_reward if won else 0.0
        return Transition(self._state.feedback, reward, won, True, command)

    def _anchor(self) -> Hashable:
        # The observation of the last executed command: an invalid action changes nothing, so
        # its "Nothing happens." must not change the key either.
        s = self._state
        return (self._anchor_obs, s.location, s.inventory, s.admissible_commands)

    def _won(self) -> bool:
        return bool(self._state is not None and self._state.won)

    def _admissible(self) -> list[str] | None:
        return list(self._state.admissible_commands) if self._state is not None else []

    def _task(self) -> str:
        return self._task_text or "Your task is to: (reset the environment first)"

    def demonstration(self) -> list[str] | None:
        """The rest of the game's walkthrough (``walkthrough`` in its ``game.tw-pddl``: the
        planner's plan for generated games, the expert plan for official ones) while every
        command executed so far follows it; None once the episode has left it (after another
        command the plan may no longer apply) or when the game has none. Invalid actions and
        commands that only describe (look, inventory, examine, help) change nothing, so they
        do not count as leaving it."""
        if self._gamefile is None or self._state is None:
            return None
        if self._state.won or self._done:
            return []
        if self._gamefile not in self._walkthroughs:
            try:
                with open(self._gamefile) as fh:
                    plan = json.load(fh).get("walkthrough") or None
            except (OSError, ValueError):
                plan = None
            self._walkthroughs[self._gamefile] = [str(c) for c in plan] if plan else None
        plan = self._walkthroughs[self._gamefile]
        n = len(self._executed)
        if plan is None or plan[:n] != self._executed:
            return None
        return plan[n:]

    def _extra_info(self) -> dict[str, Any]:
        return {
            "task_type": self._task_type,
            "gamefile": self._gamefile,
            "generated": self._generated,
        }


def _with_feedback(state, text: str):
    from dataclasses import replace

    return replace(state, feedback=text)
