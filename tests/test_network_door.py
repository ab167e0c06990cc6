"""The policy door for a user's own network in any JAX framework (tests/data/networks.py): flax
NNX, equinox and plain functions, feed-forward and recurrent, trained with ``lowrank_es`` from
the command line, evaluated, resumed, loaded, swept, reported and rendered; a copied run that
names one refused unsealed; and each way a network can be wrong one line and exit code 2, with
no run directory left behind. This is CONTRIBUTING.md's fourth recipe, exercised."""

from __future__ import annotations

from pathlib import Path

import gymnax
import jax
import numpy as np
import pytest
from test_cli import assert_clean_error, esjax
from test_run_as_data import cli, eval_unsealed_copy

from esjax._src.run import runs, trust
from esjax._src.run.saved import load_policy

NETWORKS = Path(__file__).resolve().parent / "data" / "networks.py"
SMALL = ["episode_length=32", "evaluation.every=1", "evaluation.episodes=2", "test_episodes=4",
         "policy.hidden=[16]"]  # fmt: skip


def sets(*overrides: str) -> list[str]:
    return [item for override in overrides for item in ("--set", override)]


def evolve(out: Path, factory: str, *extra: str) -> tuple[int, str]:
    kind = f"policy.kind={NETWORKS}:{factory}"
    return cli("evolve", "cartpole", "--strategy", "lowrank_es", "--popsize", "8",
               *sets(kind, *SMALL), "--out", out, *extra)  # fmt: skip


@pytest.mark.parametrize("factory", ["nnx_mlp", "equinox_mlp", "plain_mlp", "equinox_cell",
                                     "plain_cell"])  # fmt: skip
def test_a_users_network_trains_evaluates_resumes_and_loads(factory, tmp_path):
    run = tmp_path / "run"
    code, output = evolve(run, factory, "--generations", "2")
    assert code == 0, output
    code, output = cli("eval", run, "--episodes", "2", "--json")
    assert code == 0 and '"mean"' in output, output
    code, output = cli("evolve", "--resume", "--out", run, "--generations", "3")
    assert code == 0, output
    assert max(row["generation"] for row in runs.load_metrics(run)) == 3
    controller = load_policy(run)  # played in a plain loop over gymnax's own env
    env, params = gymnax.make("CartPole-v1")
    obs, state = env.reset(jax.random.key(0), params)
    for t in range(10):
        action = controller.act(np.asarray(obs))
        assert int(action) in (0, 1)
        obs, state, _, done, _, _ = env.step(jax.random.key(t), state, int(action), params)
        if done:
            break


def test_a_copied_run_naming_a_users_network_is_refused_unsealed(tmp_path):
    run = tmp_path / "run"
    assert evolve(run, "nnx_mlp", "--generations", "1")[0] == 0
    code, errors, output = eval_unsealed_copy(run, tmp_path / "copy")
    assert code == 2 and len(errors) == 1, output
    assert "nnx_mlp" in errors[0] and "--trust-code" in errors[0]
    trust._GRANTED.clear()


def test_a_sweep_of_a_users_network_reports_and_renders(tmp_path):
    sweep = tmp_path / "sweep"
    code, output = cli("sweep", "cartpole", "--strategy", "lowrank_es", "--popsize", "8",
                       *sets(f"policy.kind={NETWORKS}:equinox_mlp", *SMALL),
                       "--vary", "strategy_settings.std_init=0.05,0.1", "--generations", "2",
                       "--out", sweep)  # fmt: skip
    assert code == 0, output
    code, output = cli("report", sweep, "--out", tmp_path / "report")
    assert code == 0, output
    assert (tmp_path / "report" / runs.REPORT_JSON).is_file()
    first = sorted(p for p in sweep.iterdir() if runs.is_run_dir(p))[0]
    code, output = cli("render", first, "--out", tmp_path / "episode.gif", "--steps", "8")
    assert code == 0, output
    assert (tmp_path / "episode.gif").stat().st_size > 0


@pytest.mark.parametrize(
    ("factory", "expected"),
    [
        ("returns_a_list", "returned a list, not a network"),
        ("wrong_output_size", "maps 4 inputs to shape (3,); the action head needs (2,)"),
        ("fails_on_the_observation", "fails on 4 inputs: TypeError"),
        ("recurrent_without_carry", "has no initial_carry()"),
    ],
)
def test_a_wrong_network_is_one_line_and_no_run(factory, expected, tmp_path):
    done = esjax("evolve", "cartpole", *sets(f"policy.kind={NETWORKS}:{factory}"),
                 "--out", tmp_path / "run", cwd=tmp_path)  # fmt: skip
    assert_clean_error(done, expected)
    assert not (tmp_path / "run").exists()


def test_an_equinox_network_without_equinox_names_the_extra(tmp_path):
    """With ``import equinox`` failing as it does where equinox is not installed."""
    missing = tmp_path / "site" / "equinox"
    missing.mkdir(parents=True)
    (missing / "__init__.py").write_text(
        "raise ModuleNotFoundError(\"No module named 'equinox'\", name='equinox')\n"
    )
    done = esjax("evolve", "cartpole", *sets(f"policy.kind={NETWORKS}:equinox_mlp"),
                 "--out", tmp_path / "run", cwd=tmp_path,
                 extra_path=str(missing.parent))  # fmt: skip
    assert_clean_error(done, "equinox is not installed", "esjax[equinox]")
    # A file that imports equinox at its top fails while it is imported: the same hint.
    (tmp_path / "net.py").write_text("import equinox\n\ndef make(input_size, output_size, key):\n"
                                     "    return None\n")  # fmt: skip
    done = esjax("evolve", "cartpole", *sets(f"policy.kind={tmp_path / 'net.py'}:make"),
                 "--out", tmp_path / "run", cwd=tmp_path,
                 extra_path=str(missing.parent))  # fmt: skip
    assert_clean_error(done, "No module named 'equinox'", "esjax[equinox]")
    assert not (tmp_path / "run").exists()
