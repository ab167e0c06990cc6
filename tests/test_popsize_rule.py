"""The popsize rule: the settings a run resolves to at several popsizes, from the formula.

Expected values are computed here from the rule as documented in
``esjax/_src/specs/popsize_rule.py`` (env-step budget ~ (P / P_ref) ** e, decays keep their product
over the run, the learning rate ~ (P / P_ref) ** lr_exponent), not by calling it.
"""

from __future__ import annotations

import json
import math

import pytest

from esjax._src.run.training import resolve_config
from esjax._src.specs.config import ConfigError

# pendulum.toml: 150 generations, lr_decay 0.985, tuned at open_es's 256 members, e = 0.75,
# at least 50 generations, open_es's learning rate 0.1 scaled by (P / 256) ** -0.25.
REFERENCE_POPSIZE, REFERENCE_GENERATIONS, REFERENCE_DECAY, EXPONENT = 256, 150, 0.985, 0.75
MIN_GENERATIONS, REFERENCE_LR, LR_EXPONENT = 50, 0.1, -0.25


def expected(popsize: int) -> tuple[int, float]:
    steps_per_generation_ratio = popsize / REFERENCE_POPSIZE
    budget_ratio = steps_per_generation_ratio**EXPONENT
    generations = round(REFERENCE_GENERATIONS * budget_ratio / steps_per_generation_ratio)
    generations = max(MIN_GENERATIONS, generations)
    # lr_decay ** generations == REFERENCE_DECAY ** REFERENCE_GENERATIONS
    decay = math.exp(REFERENCE_GENERATIONS * math.log(REFERENCE_DECAY) / generations)
    return generations, decay


@pytest.mark.parametrize("popsize", [64, 256, 1024, 2048, 4096, 8192, 65536])
def test_pendulum_settings_follow_the_documented_rule(popsize):
    generations, decay = expected(popsize)
    config = resolve_config("pendulum", popsize=popsize)
    settings = config.strategy.settings
    assert config.generations == generations
    assert settings["lr_decay"] == pytest.approx(decay, rel=1e-12)
    assert settings["lr_decay"] ** generations == pytest.approx(
        REFERENCE_DECAY**REFERENCE_GENERATIONS, rel=1e-9
    )
    # At 4096 members (16x) the learning rate halves: 16 ** -0.25 = 1 / 2.
    want_lr = REFERENCE_LR * (popsize / REFERENCE_POPSIZE) ** LR_EXPONENT
    assert settings["learning_rate"] == pytest.approx(want_lr, rel=1e-12)
    if popsize == 4096:
        assert settings["learning_rate"] == pytest.approx(0.05, rel=1e-12)
    # What the rule leaves alone.
    assert settings["std_init"] == 0.15
    assert config.loop.env_groups == "auto"
    assert config.task.generations == REFERENCE_GENERATIONS
    # The run records the rule's inputs and what it changed.
    record = json.loads(json.dumps(config.scaling))
    assert record["reference_popsize"] == REFERENCE_POPSIZE
    assert record["budget_exponent"] == EXPONENT
    assert record["min_generations"] == MIN_GENERATIONS
    assert record["lr_exponent"] == LR_EXPONENT
    assert record["applied"] == (popsize != REFERENCE_POPSIZE)
    assert ("learning_rate" in record.get("changed", {})) == (popsize != REFERENCE_POPSIZE)


def test_the_default_command_is_the_tuned_one():
    config = resolve_config("pendulum")
    assert config.generations == REFERENCE_GENERATIONS
    assert config.strategy.settings["lr_decay"] == REFERENCE_DECAY
    assert config.strategy.settings["learning_rate"] == REFERENCE_LR
    assert not config.scaling["applied"]


def test_explicit_values_are_never_rescaled():
    config = resolve_config(
        "pendulum", popsize=2048, generations=99, overrides=["strategy_settings.lr_decay=0.9"]
    )
    assert config.generations == 99
    assert config.strategy.settings["lr_decay"] == 0.9
    config = resolve_config(
        "pendulum", popsize=4096, overrides=["strategy_settings.learning_rate=0.3"]
    )
    assert config.strategy.settings["learning_rate"] == 0.3
    # An explicit generation count keeps the rule's decay (it depends on popsize only).
    config = resolve_config("pendulum", popsize=2048, generations=99)
    assert config.strategy.settings["lr_decay"] == pytest.approx(expected(2048)[1])


@pytest.mark.parametrize("task", ["cartpole", "acrobot", "mountaincar-continuous"])
def test_every_task_follows_the_same_rule(task):
    base = resolve_config(task)
    reference = base.scaling["reference_popsize"]
    config = resolve_config(task, popsize=4 * reference)
    # 4x the members: 2x the env steps in half the generations.
    want = max(10, round(base.generations / 2))
    assert config.generations == want
    for name in ("lr_decay", "std_decay"):
        old = base.strategy.settings.get(name)
        if old is not None:
            new = config.strategy.settings[name]
            assert new == pytest.approx(old ** (base.generations / want))
    # No lr_exponent in their [scaling]: the learning rate stays as tuned.
    lr = base.strategy.settings.get("learning_rate")
    assert config.strategy.settings.get("learning_rate") == lr


def test_a_bad_scaling_table_is_one_line():
    with pytest.raises(ConfigError, match="budget_exponent: must be between 0 and 1"):
        resolve_config("pendulum", overrides=["scaling.budget_exponent=1.5"])
    with pytest.raises(ConfigError, match="lr_exponent: must be between -1 and 1"):
        resolve_config("pendulum", overrides=["scaling.lr_exponent=-2"])
    with pytest.raises(ConfigError, match="unknown key 'budget'"):
        resolve_config("pendulum", overrides=["scaling.budget=1"])
