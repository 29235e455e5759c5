"""Two ways to play an ALFWorld game file (``game.tw-pddl``) on the real text engine.

:class:`StockEngine` is exactly what ALFWorld's ``AlfredTWEnv`` plays: textworld's ``PddlEnv``
wrapped with alfworld's ``AlfredDemangler`` and ``AlfredInfos``.

:class:`FastEngine` plays the same game on the same state machinery (textworld's ``PddlState``
over Fast Downward's C library, the same grammar rules, the same query order) but avoids the
stock engine's repeated work. Measured here, the stock engine spends most of a step re-parsing
grammar text with TatSu and deep-copying symbol trees:

- every grammar string (command templates, feedback rules, rule bodies, conditions, queries) is
  parsed once per process and kept as an immutable tree; derivation passes contexts explicitly
  instead of deep-copying symbols;
- a command whose template only queries *static* predicates (never changed by any action, e.g.
  ``receptacleatlocation``) is derived once per operator and reused; the rest are derived each
  step as before;
- an action that is not admissible leaves the state unchanged, so its step returns "Nothing
  happens." with the previous admissible commands instead of recomputing them;
- the PDDL→SAS translation of a problem and the parsed game logic are cached per process, so a
  reset (or a second environment on the same game) skips Fast Downward's translator;
- grammar expressions (``{o.indefinite + ' ' + o.name}``) are compiled once to small closures
  from a whitelisted Python subset (names, attributes, ``+``, ``or``/``and``, string constants),
  never passed to ``eval``;
- a grammar query matches the facts of each signature as textworld does (same order), but the
  state keeps each signature's facts sorted until they change instead of sorting them at every
  match;
- a reset after the game's first one puts Fast Downward's library back in the initial state by
  its id in the library's state registry (``set_state_id``) and the facts back to a copy of the
  initial ones, and reuses the initial report, instead of reloading the task (where the library
  has no ``set_state_id``, every reset builds a fresh state as before);
- an operator's effect atoms are read from the library once per game and reused.

Transcripts are identical to the stock engine's: ``tests/test_alfworld_engine.py`` replays
walkthroughs and random action sequences through both and compares every observation, reward,
done flag and admissible-command list.
"""

from __future__ import annotations

import ast
import contextlib
import functools
import json
import re
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

WELCOME = "-= Welcome to TextWorld, ALFRED! =-"


@dataclass(frozen=True)
class EngineState:
    """What one reset or step of either engine reports."""

    feedback: str
    """The observation text."""
    score: int
    """1 once the goal holds, else 0 (textworld's score for PDDL games)."""
    done: bool
    won: bool
    admissible_commands: tuple[str, ...]
    """Sorted, without duplicates (as textworld reports them)."""
    location: str
    """The receptacles at the agent's place, sorted, ", "-joined ("" in the middle of the
    room)."""
    inventory: tuple[str, ...]
    """Names of the objects the agent holds, sorted."""


def require_alfworld() -> None:
    """Raise a clear error when the optional ``alfworld`` extra is missing."""
    try:
        import alfworld  # noqa: F401
        import fast_downward  # noqa: F401
        import textworld  # noqa: F401
    except ImportError as exc:  # pragma: no cover - depends on the install
        raise ImportError(
            "env=alfworld needs the real ALFWorld text engine: pip install 'agentrl[alfworld]' "
            f"(alfworld, textworld, fast-downward-textworld); import failed: {exc}"
        ) from exc


def _agent_facts(pddl_state, names: dict[str, str]) -> tuple[str, tuple[str, ...]]:
    """(where the agent is, sorted names of held objects) from the PDDL facts.

    Several receptacles can share one location (drawer 1 and drawer 2 side by side), so the
    place is every receptacle there, sorted and joined with ", " ("" in the middle of the
    room): a description that does not depend on the order of facts in a set.
    """
    # The facts of the three predicates only, in the order ``pddl_state.facts`` yields them (its
    # facts grouped by signature): the same facts seen in the same order as a walk over all.
    by_signature = pddl_state._facts.items()
    held, at = [], None
    for sig, facts in by_signature:
        if sig.name == "atlocation":
            for fact in facts:
                if fact.arguments[0].type == "agent":
                    at = fact.arguments[1].name
        elif sig.name == "holds":
            for fact in facts:
                held.append(names.get(fact.arguments[1].name, fact.arguments[1].name))
    here = []
    if at is not None:
        for sig, facts in by_signature:
            if sig.name == "receptacleatlocation":
                for fact in facts:
                    if fact.arguments[1].name == at:
                        here.append(names.get(fact.arguments[0].name, fact.arguments[0].name))
    return ", ".join(sorted(here)), tuple(sorted(held))


class StockEngine:
    """ALFWorld's own stack: ``PddlEnv`` + ``AlfredDemangler`` + ``AlfredInfos``."""

    def __init__(self) -> None:
        require_alfworld()
        self.env = None
        self.gamefile: str | None = None

    def load(self, gamefile: str) -> None:
        import textworld
        from alfworld.agents.environment.alfred_tw_env import AlfredDemangler, AlfredInfos

        infos = textworld.EnvInfos(won=True, admissible_commands=True, extras=["gamefile"])
        self.env = textworld.start(
            gamefile, infos, wrappers=[AlfredDemangler(shuffle=False), AlfredInfos]
        )
        self.gamefile = gamefile

    def _inner(self):
        env = self.env
        while hasattr(env, "_wrapped_env"):
            env = env._wrapped_env
        return env

    def _report(self, gs, score: int, done: bool) -> EngineState:
        inner = self._inner()
        names = {k: v.name for k, v in inner._entity_infos.items()}
        loc, inv = _agent_facts(inner._pddl_state, names)
        return EngineState(
            feedback=gs.feedback,
            score=int(score),
            done=bool(done),
            won=bool(gs["won"]),
            admissible_commands=tuple(gs["admissible_commands"]),
            location=loc,
            inventory=inv,
        )

    def reset(self) -> EngineState:
        gs = self.env.reset()
        return self._report(gs, 0, False)

    def step(self, command: str) -> EngineState:
        gs, score, done = self.env.step(command)
        return self._report(gs, score, done)


# -- fast grammar derivation ---------------------------------------------------------------
# Nodes: ("t", text) | ("n", name) | ("c", node, given|None) | ("e", fn, source) | ("l", node)

_ALLOWED_ATTR = re.compile(r"^[a-z][a-z_]*$")


def _compile_expr(source: str) -> Callable[[dict], Any]:
    """A closure evaluating a grammar expression over the context variables.

    Only names, attribute access, ``+``, ``or``/``and`` and constants are allowed (all that the
    ALFWorld grammar uses); anything else raises ``ValueError`` when the game loads.
    """
    tree = ast.parse(source.strip(), mode="eval").body

    def build(node) -> Callable[[dict], Any]:
        if isinstance(node, ast.Name):
            name = node.id
            return lambda v: v[name]
        if isinstance(node, ast.Attribute) and _ALLOWED_ATTR.match(node.attr):
            inner, attr = build(node.value), node.attr
            return lambda v: getattr(inner(v), attr)
        if isinstance(node, ast.Constant) and isinstance(node.value, (str, int, float)):
            value = node.value
            return lambda v: value
        if isinstance(node, ast.BinOp) and isinstance(node.op, ast.Add):
            left, right = build(node.left), build(node.right)
            return lambda v: left(v) + right(v)
        if isinstance(node, ast.BoolOp):
            parts = [build(x) for x in node.values]
            if isinstance(node.op, ast.Or):

                def _or(v):
                    value = None
                    for p in parts:
                        value = p(v)
                        if value:
                            return value
                    return value

                return _or

            def _and(v):
                value = None
                for p in parts:
                    value = p(v)
                    if not value:
                        return value
                return value

            return _and
        raise ValueError(f"unsupported grammar expression {source!r}")

    return build(tree)


def _convert(sym) -> tuple:
    from textworld.envs.pddl import textgen as tg

    if isinstance(sym, tg.TerminalSymbol):
        return ("t", str(sym.symbol))
    if isinstance(sym, tg.NonterminalSymbol):
        return ("n", str(sym.symbol))
    if isinstance(sym, tg.ConditionalSymbol):
        return ("c", _convert(sym.expression), sym.given or None)
    if isinstance(sym, tg.EvalSymbol):
        return ("e", _compile_expr(sym.expression), sym.expression)
    if isinstance(sym, tg.ListSymbol):
        return ("l", _convert(sym.symbol))
    raise TypeError(f"unknown grammar symbol {sym!r}")


@functools.lru_cache(maxsize=4096)
def _parse_symbols(text: str) -> tuple:
    """Grammar text → node tuple (TatSu parse once per distinct string)."""
    from textworld.envs.pddl.textgen import _parse_and_convert

    return tuple(_convert(s) for s in _parse_and_convert(text, rule_name="symbols"))


@functools.lru_cache(maxsize=4096)
def _parse_query(text: str):
    from textworld.logic import Rule

    return Rule.parse_conjunctive_query(text)


def _query_predicates(text: str) -> set[str]:
    return {p.name.removeprefix("not_") for p in _parse_query(text).preconditions}


class FastGrammar:
    """Derives text exactly as textworld's ``ContextSensitiveGrammar.derive`` does."""

    def __init__(self, csg, entity_infos: dict, state) -> None:
        self.entity_infos = entity_infos
        self.state = state
        # name -> [(condition or None, rhs nodes)], in the grammar's order
        self.rules: dict[str, list[tuple[str | None, tuple]]] = {
            name: [(r.condition or None, tuple(_convert(s) for s in r.rhs)) for r in rules]
            for name, rules in csg._rules.items()
        }
        self._signatures: dict[tuple, tuple[list, tuple]] = {}

    def derive(self, text: str, variables: dict, mapping: dict) -> str:
        return "".join(self._d(node, variables, mapping) for node in _parse_symbols(text))

    def _assignments(self, query: str, mapping: dict):
        """The mappings ``self.state.all_assignments(_parse_query(query), mapping)`` yields, in
        its order: the query's predicates matched left to right, each against the facts of
        its signature and of every subtype signature (textworld's order), sorted, binding a
        placeholder to a variable not bound yet. The state's ``sorted_facts`` keeps those
        sorted lists between changes, where textworld sorts them at every match."""
        rule = _parse_query(query)
        mapping = dict(mapping)
        used = set(mapping.values())
        seen = set(mapping)
        hierarchy = self.state._logic.types
        steps = []
        for pred in rule.preconditions:
            new = []
            for ph in pred.parameters:
                if ph not in seen:
                    new.append(ph)
                    seen.add(ph)
            steps.append((pred.parameters, new, self._subtype_signatures(pred, hierarchy)))
        if any(ph not in seen for ph in rule.placeholders):  # free placeholders: textworld's
            yield from self.state.all_assignments(rule, mapping)
            return
        yield from self._match(steps, 0, mapping, used)

    def _subtype_signatures(self, pred, hierarchy) -> tuple:
        """The signatures ``pred`` matches (its own, then its subtypes'), as textworld lists
        them: cached while the type hierarchy's own cache holds the same list."""
        key = (pred.signature.name, pred.signature.types)
        subtypes = hierarchy.multi_subtypes([hierarchy.get(t) for t in pred.signature.types])
        cached = self._signatures.get(key)
        if cached is not None and cached[0] is subtypes:
            return cached[1]
        from textworld.logic import Signature

        sigs = tuple(Signature(key[0], [t.name for t in types]) for types in subtypes)
        self._signatures[key] = (subtypes, sigs)  # holds the list: its identity stays valid
        return sigs

    def _match(self, steps: list, depth: int, mapping: dict, used: set):
        if depth == len(steps):
            yield mapping.copy()
            return
        params, new, sigs = steps[depth]
        sorted_facts = self.state.sorted_facts
        for sig in sigs:
            for prop in sorted_facts(sig):
                for ph, var in zip(params, prop.arguments):
                    existing = mapping.get(ph)
                    if existing is None:
                        if var in used:
                            break
                        mapping[ph] = var
                        used.add(var)
                    elif existing is not var and existing != var:
                        break
                else:
                    yield from self._match(steps, depth + 1, mapping, used)
                for ph in new:  # unbind what this fact bound
                    used.discard(mapping.pop(ph, None))

    def _query(self, given: str, variables: dict, mapping: dict) -> list[tuple[dict, dict]]:
        out = []
        infos = self.entity_infos
        for m in self._assignments(given, mapping):
            v = dict(variables)
            v.update({ph.name: infos[var.name] for ph, var in m.items()})
            mm = dict(mapping)
            mm.update(m)
            out.append((v, mm))
        return out

    def _rule_body(self, name: str, mapping: dict) -> tuple:
        rules = self.rules.get(name)
        if not rules:
            from textworld.envs.pddl.textgen import CSGUnknownSymbolError, NonterminalSymbol

            raise CSGUnknownSymbolError(NonterminalSymbol(name))
        for cond, rhs in rules:
            if cond is None:
                return rhs
            for _ in self._assignments(cond, mapping):
                return rhs
        raise IndexError(f"no applicable rule for #{name}#")  # as textworld (rules[0] of [])

    def _d(self, node: tuple, variables: dict, mapping: dict) -> str:
        kind = node[0]
        if kind == "t":
            return node[1]
        if kind == "e":
            return str(node[1](variables))
        if kind == "n":
            body = self._rule_body(node[1], mapping)
            return "".join(self._d(x, variables, mapping) for x in body)
        if kind == "c":
            if node[2] is None:
                return self._d(node[1], variables, mapping)
            return "".join(
                self._d(node[1], v, m) for v, m in self._query(node[2], variables, mapping)
            )
        if kind == "l":
            inner = node[1]
            if inner[0] == "c":
                ctxs = [(variables, mapping)] if inner[2] is None else None
                ctxs = ctxs or self._query(inner[2], variables, mapping)
                items = [self._d(inner[1], v, m) for v, m in ctxs]
            elif inner[0] == "e":
                items = [str(inner[1](variables))]
            else:
                raise TypeError(f"list over {inner[0]!r} symbols is not derivable")
            if not items:
                return self._d(("n", "list_empty"), variables, mapping)
            if len(items) == 1:
                return items[0]
            sep = self._d(("n", "list_separator"), variables, mapping)
            last = self._d(("n", "list_last_separator"), variables, mapping)
            return sep.join(items[:-1]) + last + items[-1]
        raise TypeError(f"unknown node {node!r}")

    def predicates_used(self, text: str, _seen: set | None = None) -> set[str]:
        """Every predicate a derivation of ``text`` may query (rules followed recursively)."""
        seen = _seen if _seen is not None else set()
        out: set[str] = set()

        def walk(node):
            kind = node[0]
            if kind == "n":
                if node[1] in seen:
                    return
                seen.add(node[1])
                for cond, rhs in self.rules.get(node[1], []):
                    if cond:
                        out.update(_query_predicates(cond))
                    for x in rhs:
                        walk(x)
            elif kind == "c":
                if node[2]:
                    out.update(_query_predicates(node[2]))
                walk(node[1])
            elif kind == "l":
                walk(node[1])
                walk(("n", "list_empty"))
                walk(("n", "list_separator"))
                walk(("n", "list_last_separator"))

        for node in _parse_symbols(text):
            walk(node)
        return out


# -- per-process caches of the expensive parts of loading ---------------------------------

_TASK_RULE = re.compile(r'("task"\s*:\s*\[\s*\{\s*"rhs"\s*:\s*")((?:[^"\\]|\\.)*)(")')


@functools.lru_cache(maxsize=8)
def _game_logic(domain: str, grammar: str):
    from textworld.envs.pddl.logic import GameLogic

    return GameLogic(domain=domain, grammar=grammar)


def _logic_for(domain: str, grammar: str):
    """Parsed game logic, shared by every game whose grammar differs only in the task line.

    Returns ``(logic, task_rhs)``: the task rule's text is parsed separately per game.
    """
    m = _TASK_RULE.search(grammar)
    if m is None:
        return _game_logic(domain, grammar), None
    generic = grammar[: m.start(2)] + "UNKNOWN GOAL." + grammar[m.end(2) :]
    task_rhs = json.loads('"' + m.group(2) + '"')
    return _game_logic(domain, generic), task_rhs


@functools.lru_cache(maxsize=256)
def _translate(domain: str, problem: str):
    """Fast Downward's PDDL→SAS translation (the slow part of loading a game)."""
    import sys

    import fast_downward

    saved = list(sys.argv)  # Fast Downward's translator overwrites sys.argv
    try:
        return fast_downward.pddl2sas(domain, problem, verbose=False)
    finally:
        sys.argv[:] = saved


def _make_pddl_state(lib, problem: str, logic):
    """A ``PddlState`` built from a cached translation (same facts, same insertion order)."""
    from textworld.envs.pddl.logic import PddlState

    class _CachedPddlState(PddlState):
        def __init__(self) -> None:  # mirrors PddlState.__init__ minus the translations
            from collections import Counter, defaultdict

            import fast_downward
            import textworld
            from textworld.envs.pddl.logic import Atom
            from textworld.logic import Proposition, Variable

            self._facts = defaultdict(set)
            self._sorted_facts = {}
            self._vars_by_name = {}
            self._vars_by_type = defaultdict(set)
            self._var_counts = Counter()
            self._logic = logic
            self.downward_lib = lib
            self.pddl_problem = problem
            self.task, self.sas = _translate(logic.domain, problem)
            self._actions = {a.name: a for a in self.task.actions}
            for type_ in self.task.types:
                with contextlib.suppress(ValueError):
                    logic.types.add(textworld.logic.Type(type_.name, type_.supertype_names))
            lib.load_sas(self.sas.encode("utf-8"))
            self.name2type = {o.name: o.type_name for o in self.task.objects}

            def to_prop(atom):
                if isinstance(atom, fast_downward.translate.pddl.conditions.Atom):
                    if atom.predicate == "=":
                        return None
                    args = [Variable(a, self.name2type[a]) for a in atom.args]
                    return Proposition(atom.predicate, args)
                if isinstance(atom, fast_downward.translate.pddl.f_expression.Assign):
                    if atom.fluent.symbol == "total-cost":
                        return None
                    name = f"{atom.expression.value}"
                    if str.isdigit(name):
                        return None
                    args = [Variable(a, self.name2type[a]) for a in atom.fluent.args]
                    return Proposition(name, args)
                return None

            self.add_facts([p for p in map(to_prop, self.task.init) if p])
            atoms = (Atom * lib.get_state_size())()
            lib.get_state(atoms)
            facts = [a.get_fact(self.name2type) for a in atoms]
            self.add_facts([f for f in facts if not f.is_negation])

        def sorted_facts(self, sig) -> tuple:
            """The facts of signature ``sig``, sorted (kept until they change): what every
            query of a derivation matches, in textworld's order."""
            facts = self._sorted_facts.get(sig)
            if facts is None:
                facts = self._sorted_facts[sig] = tuple(sorted(self._facts.get(sig, ())))
            return facts

        # Textworld's own matcher sorts what this returns: a sorted run costs it one
        # comparison per fact instead of n log n.
        facts_with_signature = sorted_facts

        def add_fact(self, prop) -> None:
            super().add_fact(prop)
            self._sorted_facts.pop(prop.signature, None)

        def remove_fact(self, prop) -> None:
            super().remove_fact(prop)
            self._sorted_facts.pop(prop.signature, None)

    return _CachedPddlState()


def _copy_pddl_state(state):
    """A copy of ``state`` (a :func:`_make_pddl_state` state) with the same facts and variable
    bookkeeping; the C library's state is not part of it (see :meth:`FastEngine.reset`)."""
    from collections import defaultdict

    new = object.__new__(type(state))
    new.__dict__.update(state.__dict__)
    new._facts = defaultdict(set, {k: v.copy() for k, v in state._facts.items()})
    new._sorted_facts = state._sorted_facts.copy()  # tuples, never changed in place
    new._vars_by_name = state._vars_by_name.copy()
    new._vars_by_type = defaultdict(set, {k: v.copy() for k, v in state._vars_by_type.items()})
    new._var_counts = state._var_counts.copy()
    return new


class FastEngine:
    """The same game as :class:`StockEngine`, with the stock engine's repeated work removed."""

    def __init__(self) -> None:
        require_alfworld()
        import fast_downward

        self.lib = fast_downward.load_lib()  # a private copy of the C library per engine
        # The C library's current state by id (Fast Downward's state registry keeps every state
        # it has seen): a reset goes back to the initial state instead of reloading the task.
        self._state_ids = hasattr(self.lib, "get_state_id") and hasattr(self.lib, "set_state_id")
        if self._state_ids:
            import ctypes

            self.lib.get_state_id.argtypes = []
            self.lib.get_state_id.restype = ctypes.c_int
            self.lib.set_state_id.argtypes = [ctypes.c_int]
            self.lib.set_state_id.restype = None
        self._start: tuple | None = None
        self.gamefile: str | None = None

    def load(self, gamefile: str) -> None:
        with open(gamefile) as fh:
            data = json.load(fh)
        self.load_data(data)
        self.gamefile = gamefile

    def load_data(self, data: dict) -> None:
        """Load a game from its parsed ``game.tw-pddl`` JSON."""
        self.gamefile = None
        self.data = data
        self.logic, task_rhs = _logic_for(data["pddl_domain"], data["grammar"])
        self.task_rhs = task_rhs
        self.pddl_state = _make_pddl_state(self.lib, data["pddl_problem"], self.logic)
        self._start = None
        self._init_entities()

    def _init_entities(self) -> None:
        from alfworld.agents.utils.misc import Demangler
        from textworld.generator.game import EntityInfo

        state = self.pddl_state
        infos = {v.name: EntityInfo(v.name, v.type) for f in state.facts for v in f.arguments}
        for info in infos.values():
            info.name, info.definite, info.indefinite = info.id, "the", "a"
        demangler = Demangler(game_infos=infos, shuffle=False)
        for info in infos.values():
            info.name = demangler.demangle_alfred_name(info.id)
        self.entity_infos = infos
        self.names = {k: v.name for k, v in infos.items()}
        # Predicates some action changes; a template querying none of them derives the same
        # text in every state, so its command is cached per operator.
        # Derived predicates (axioms) change with the state too.
        self.dynamic = {eff.literal.predicate for a in state.task.actions for eff in a.effects}
        self.dynamic |= {ax.name for ax in getattr(state.task, "axioms", [])}
        self.static_template: dict[str, bool] = {}
        self.command_cache: dict[bytes, tuple] = {}  # by the operator's raw name
        self._effects: dict[int, tuple] = {}

    def _grammar(self) -> FastGrammar:
        g = FastGrammar(self.logic.grammar, self.entity_infos, self.pddl_state)
        if self.task_rhs is not None:
            g.rules["task"] = [(None, _parse_symbols(self.task_rhs))]
        return g

    def _is_static(self, template: str) -> bool:
        if template not in self.static_template:
            used = self.grammar.predicates_used(template)
            self.static_template[template] = not (used & self.dynamic) and not any(
                p.startswith("new-axiom") for p in used
            )
        return self.static_template[template]

    def _gather(self) -> None:
        """Applicable operators → commands (first operator wins a duplicate command)."""
        lib = self.lib
        import fast_downward

        count = lib.get_applicable_operators_count()
        ops = (fast_downward.Operator * count)()
        lib.get_applicable_operators(ops)
        commands: dict[str, Any] = {}
        seen: set[str] = set()
        pddl_actions = self.pddl_state._actions
        for op in ops:
            name = op._name  # the raw bytes: decoded (``op.name``) once per operator, below
            if name in seen:
                continue
            seen.add(name)
            cached = self.command_cache.get(name)
            if cached is None:
                cached = self.command_cache[name] = self._describe(op.name, pddl_actions)
            _action_name, mapping, variables, template, feedback, command = cached
            if command is None:
                derived = self.grammar.derive(template, variables, mapping)
                command = derived.format(**self.names)
            if command not in commands:
                commands[command] = (op.id, op.nb_effect_atoms, feedback, variables, mapping)
        self.commands = commands
        self.admissible = tuple(sorted(commands))

    def _describe(self, op_name: str, pddl_actions) -> tuple:
        from textworld.logic import Placeholder, Variable

        parts = op_name.split()
        name, args = parts[0], parts[1:]
        mapping = {
            Placeholder(p.name.strip("?"), p.type_name): Variable(a, p.type_name)
            for p, a in zip(pddl_actions[name].parameters, args)
        }
        variables = {ph.name: self.entity_infos[var.name] for ph, var in mapping.items()}
        logic_action = self.logic.actions[name]
        template = logic_action.template
        command = None
        if self._is_static(template):
            command = self.grammar.derive(template, variables, mapping).format(**self.names)
        return (name, mapping, variables, template, logic_action.feedback_rule, command)

    def _report(self, feedback: str) -> EngineState:
        won = bool(self.lib.check_goal())
        loc, inv = _agent_facts(self.pddl_state, self.names)
        return EngineState(
            feedback=feedback,
            score=1 if won else 0,
            done=won,
            won=won,
            admissible_commands=self.admissible,
            location=loc,
            inventory=inv,
        )

    def reset(self) -> EngineState:
        # The first reset of a game builds a fresh state, as PddlEnv does each reset (the
        # translation is cached), and keeps it: what the initial state reports never changes,
        # so a later reset puts the C library back in the initial state by its id and the facts
        # back to a copy of the initial ones, and reuses the report. Entity names and the
        # per-operator command cache stay valid for the game.
        start = self._start
        if start is not None:
            state, state_id, grammar, commands, admissible, last = start
            self.lib.set_state_id(state_id)
            self.pddl_state = _copy_pddl_state(state)
            grammar.state = self.pddl_state
            self.grammar, self.commands, self.admissible = grammar, commands, admissible
            self._last = last
            return last
        self.pddl_state = _make_pddl_state(self.lib, self.data["pddl_problem"], self.logic)
        initial = _copy_pddl_state(self.pddl_state) if self._state_ids else None
        self.grammar = self._grammar()
        feedback = self.grammar.derive("#intro#", {}, {})
        self._gather()
        self._last = self._report(feedback)
        if initial is not None:
            self._start = (
                initial,
                self.lib.get_state_id(),
                self.grammar,
                self.commands,
                self.admissible,
                self._last,
            )
        return self._last

    def step(self, command: str) -> EngineState:
        command = command.strip()
        entry = self.commands.get(command)
        if entry is None:
            # Not admissible: the stock engine reports "Nothing happens." and recomputes the
            # same admissible commands from the unchanged state.
            self._last = EngineState(
                "Nothing happens.",
                self._last.score,
                self._last.won,
                self._last.won,
                self._last.admissible_commands,
                self._last.location,
                self._last.inventory,
            )
            return self._last
        op_id, n_effects, feedback_rule, variables, mapping = entry
        self._apply(op_id, n_effects)
        feedback = self.grammar.derive(feedback_rule, variables, mapping)
        self._gather()
        self._last = self._report(feedback)
        return self._last

    def _apply(self, op_id: int, n_effects: int) -> None:
        from textworld.envs.pddl.logic import Atom

        state = self.pddl_state
        # An operator's effect atoms are the same in every state (the library names them all,
        # conditional or not): read once per operator, then applied without the names.
        props = self._effects.get(op_id)
        if props is None:
            effects = (Atom * n_effects)()
            self.lib.apply_operator(op_id, effects)
            props = self._effects[op_id] = tuple(e.get_fact(state.name2type) for e in effects)
        else:
            self.lib.apply_operator(op_id, None)
        for prop in props:
            state.remove_fact(prop.negate())
            state.add_fact(prop)
