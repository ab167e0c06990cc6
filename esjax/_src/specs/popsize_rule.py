"""How a task's settings follow the population size: one rule for every task preset.

A task's ``generations`` and its strategy's schedule are tuned at one population size, its
``[scaling] reference_popsize``. At another popsize ``P`` with ``r = P / reference_popsize``:

* **Env-step budget grows as ``r ** budget_exponent``.** A generation costs ``r`` times the
  steps, so ``generations = reference_generations * r ** (budget_exponent - 1)``, rounded, and
  at least ``min_generations``. With the default exponent 0.5, 8x the members buys about 2.8x
  the env steps in 0.35x the generations: each gradient estimate's noise falls as
  ``1 / sqrt(P)``, so fewer, better steps replace many noisy ones. Pendulum sets 0.75 (at
  2048 members 89 generations rather than 53: more generations helped its mirrored policy at
  every popsize tried, see benchmarks/README.md).
* **At least ``min_generations``.** An optimizer such as Adam moves the mean by about its
  learning rate per generation whatever the popsize, so getting from the start to a solution
  takes a minimum number of generations however good each gradient is (Pendulum: 50; at
  4096 members the uncapped 38 generations ended near -600).
* **Decays keep their total over the run.** ``lr_decay`` and ``std_decay`` are per-generation
  factors; a run with fewer generations would otherwise end with a larger step. Each becomes
  ``decay ** (reference_generations / generations)``, so the learning rate (and std) fall by
  the same overall factor as at the reference popsize.
* **The learning rate follows ``r ** lr_exponent``** (default 0: unchanged). Adam's step is in
  parameter units whatever the popsize, but a larger population's gradient points the same
  way from the first generations on, so the mean commits sooner to the basin it starts
  towards. Pendulum sets -0.25: at 4096 members and its reference 0.1, two seeds of three
  ended a swing late (-182, -184); at 0.05 none did (benchmarks/README.md).
* **Nothing else changes.** ``env_groups = "auto"`` already grows the number of episode starts
  with the population.

A value the user sets explicitly (``--generations``, ``--set strategy_settings.lr_decay=...``)
is never rescaled. At the reference popsize the rule is the identity, so the default command
is exactly the tuned one. The resolved values land in ``config.json``; ``[scaling]`` there
records the rule's inputs and what it changed.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Collection, Mapping
from typing import Any

# Per-generation factors that are rescaled so their product over the run stays the same.
DECAY_SETTINGS = ("lr_decay", "std_decay")


def scaled_learning_rate(learning_rate: float, popsize: int, reference_popsize: int,
                         lr_exponent: float) -> float:  # fmt: skip
    """The learning rate at ``popsize``: the reference one times ``ratio ** lr_exponent``."""
    return float(learning_rate * (popsize / reference_popsize) ** lr_exponent)


def scaled_generations(
    reference_generations: int,
    popsize: int,
    reference_popsize: int,
    budget_exponent: float,
    min_generations: int = 1,
) -> int:
    """Generations at ``popsize`` whose env-step budget grows as ``ratio ** budget_exponent``."""
    ratio = popsize / reference_popsize
    generations = round(reference_generations * ratio ** (budget_exponent - 1.0))
    return max(int(min_generations), int(generations))


def scaled_decay(decay: float, reference_generations: int, generations: int) -> float:
    """A per-generation factor whose product over ``generations`` equals the reference one's."""
    return float(decay ** (reference_generations / generations))


def scale_for_popsize(
    *,
    popsize: int | None,
    generations: int,
    settings: Mapping[str, Any],
    scaling: Mapping[str, Any],
    explicit: Collection[str] = (),
) -> tuple[int, dict[str, Any], dict[str, Any]]:
    """``(generations, strategy settings, record)`` for a run at ``popsize``.

    ``generations`` and ``settings`` are the task's values at ``scaling["reference_popsize"]``;
    ``explicit`` names the ones the user set (``"generations"`` or a setting name), which are
    kept as given. ``record`` is what ``config.json`` stores: the rule's inputs and outputs.
    """
    reference = scaling.get("reference_popsize")
    settings = dict(settings)
    record: dict[str, Any] = {**scaling, "popsize": popsize, "applied": False}
    if not isinstance(popsize, int) or not isinstance(reference, int) or popsize == reference:
        return generations, settings, record
    rule_generations = scaled_generations(
        generations,
        popsize,
        reference,
        scaling["budget_exponent"],
        scaling.get("min_generations", 1),
    )
    generations_out = generations if "generations" in explicit else rule_generations
    changed: dict[str, Any] = {}
    if generations_out != generations:
        changed["generations"] = [generations, generations_out]
    for name in DECAY_SETTINGS:
        if name in settings and name not in explicit:
            value = scaled_decay(settings[name], generations, rule_generations)
            if value != settings[name]:
                changed[name] = [settings[name], value]
                settings[name] = value
    lr_exponent = scaling.get("lr_exponent", 0.0)
    if lr_exponent and "learning_rate" in settings and "learning_rate" not in explicit:
        value = scaled_learning_rate(settings["learning_rate"], popsize, reference, lr_exponent)
        changed["learning_rate"] = [settings["learning_rate"], value]
        settings["learning_rate"] = value
    record.update(applied=True, changed=changed)
    return generations_out, settings, record


def apply_popsize_rule(task: Any, spec: Any, popsize: int | None, generations: int | None,
                       explicit: Collection[str]) -> tuple[Any, int, dict[str, Any]]:  # fmt: skip
    """``(spec, generations, record)`` of a new run: the rule applied to a parsed task and spec.

    ``popsize`` and ``generations`` are the command's (``None``: not given); ``explicit`` names
    the strategy settings its ``--set`` gave (``strategy_settings.NAME``, or
    ``strategy_settings.STRATEGY.NAME`` for the strategy that runs), which are kept as given.
    """
    preset_popsize = task.popsize if task.popsize is not None else spec.settings.get("popsize")
    reference = task.scaling.reference_popsize or preset_popsize
    explicit = set(explicit)
    if generations is not None:
        explicit.add("generations")
    scaling = {
        "reference_popsize": reference,
        "budget_exponent": task.scaling.budget_exponent,
        "min_generations": task.scaling.min_generations,
        "lr_exponent": task.scaling.lr_exponent,
    }
    run_generations, settings, record = scale_for_popsize(
        popsize=popsize or preset_popsize,
        generations=task.generations,
        settings=spec.settings,
        scaling=scaling,
        explicit=explicit,
    )
    if generations is not None:
        run_generations = generations
    return dataclasses.replace(spec, settings=settings), run_generations, record
