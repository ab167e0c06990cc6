#!/usr/bin/env bash
# The locomotion presets as shipped, on one GPU, seed 1000 (never tuned on): the GPU column of
# benchmarks/README.md's env-suite table, and `hopper` at a popsize a GPU can fill. Each step is
# `esjax evolve` capped so the whole run ends inside DEADLINE seconds; a capped run is stopped
# with SIGINT (it checkpoints), and its evaluations so far are printed either way.
#
#   bash benchmarks/gpu_presets.sh OUT_DIR [DEADLINE_S]
#   ONLY=hopper bash benchmarks/gpu_presets.sh OUT_DIR 265  # one step (a second call)
#   QUICK=1 bash benchmarks/gpu_presets.sh /tmp/gpu 300     # tiny sizes: checks the script
set -u
out=${1:?usage: gpu_presets.sh OUT_DIR [DEADLINE_S]}
deadline=$((SECONDS + ${2:-540}))
mkdir -p "$out/logs" "$out/runs"
export PYTHONUNBUFFERED=1
quick=()
[[ ${QUICK:-0} == 1 ]] && quick=(--generations 2 --set episode_length=50 --set evaluation.every=1)

# The evaluations of a run directory: generation, env steps, wall, return; then the final test.
curve() {
    python3 - "$1" <<'EOF'
import json, pathlib, sys
run = pathlib.Path(sys.argv[1])
if not (run / "metrics.jsonl").exists():
    sys.exit(print(f"  {run.name}: no metrics"))
for line in (run / "metrics.jsonl").read_text().splitlines():
    row = json.loads(line)
    if "eval_return" in row:
        print(f"  {run.name} g{row['generation']}: {row['env_steps'] / 1e6:.2f} M steps, "
              f"{row['wall_s']:.1f} s, eval {row['eval_return']:.1f}")
summary = run / "summary.json"
if summary.exists():
    s = json.loads(summary.read_text())
    print(f"  {run.name} final: " + ", ".join(f"{k} {v}" for k, v in s.items()
                                              if k in ("final_test_return", "solved", "env_steps", "wall_s")))
EOF
}

# step NAME CAP_S ARGS...: `esjax evolve ARGS` under min(CAP_S, time left less a margin).
step() {
    local name=$1 cap=$2 left
    shift 2
    [[ -n ${ONLY:-} && $name != "$ONLY" ]] && return
    left=$((deadline - SECONDS - 15))
    ((cap > left)) && cap=$left
    if ((cap < 20)); then
        echo "== $name: skipped, $left s left" | tee -a "$out/steps.txt"
        return
    fi
    local start=$SECONDS
    timeout --signal=INT --kill-after=10 "$cap" python3 -m esjax evolve "$@" --seed 1000 \
        --out "$out/runs/$name" "${quick[@]}" >"$out/logs/$name.log" 2>&1
    local rc=$?
    echo "== $name: rc $rc, $((SECONDS - start)) s (cap $cap s)" | tee -a "$out/steps.txt"
    tail -n 4 "$out/logs/$name.log"
    curve "$out/runs/$name" | tee -a "$out/steps.txt"
}

python3 - >"$out/logs/smoke.log" 2>&1 <<'EOF'
import jax, brax, mujoco, evosax, gymnax, mujoco_playground, esjax.suites  # noqa: F401
import esjax.cli, esjax.evolve  # noqa: F401,E401
print("jax", jax.__version__, "brax", brax.__version__, "mujoco", mujoco.__version__)
print("devices", jax.devices())
EOF
rc=$?
cat "$out/logs/smoke.log"
if ((rc != 0)); then
    echo "smoke check failed (rc $rc): nothing else run"
    exit 3
fi
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader 2>/dev/null

# A GPU steps 128 members in about the time of 16: the same wall buys more directions a step.
step hopper-pop128 90 hopper --popsize 128 --generations 60
step cartpole-swingup 90 cartpole-swingup
step pendulum-swingup 100 pendulum-swingup
step cheetah-run 150 cheetah-run
step hopper 250 hopper

rm -f "$out/runs"/*/checkpoint*.msgpack "$out/runs"/*/*.png
echo "$SECONDS s in all"
