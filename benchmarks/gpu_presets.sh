#!/usr/bin/env bash
# The locomotion presets as shipped, on one GPU, seed 1000 (never tuned on): the GPU column of
# benchmarks/README.md's env-suite table, and `hopper` at a popsize a GPU can fill. Each step is
# `esjax evolve` capped so the whole run ends inside DEADLINE seconds; a capped run is stopped
# with SIGINT (it checkpoints), and its evaluations so far are printed either way.
#
#   bash benchmarks/gpu_presets.sh OUT_DIR [DEADLINE_S]
#   ONLY=hopper bash benchmarks/gpu_presets.sh OUT_DIR 265  # one step (a second call)
#   ONLY="halfcheetah halfcheetah-pop256" bash benchmarks/gpu_presets.sh OUT_DIR 300
#   QUICK=1 bash benchmarks/gpu_presets.sh /tmp/gpu 300     # tiny sizes: checks the script
set -u
out=${1:?usage: gpu_presets.sh OUT_DIR [DEADLINE_S]}
deadline=$((SECONDS + ${2:-540}))
mkdir -p "$out/logs" "$out/runs"
export PYTHONUNBUFFERED=1
quick=()
[[ ${QUICK:-0} == 1 ]] && quick=(--generations 2 --set episode_length=50 --set evaluation.every=1)

# The evaluations of a run directory: generation, env steps, wall, return; then the final test.
# Read through esjax's own readers, which skip the torn last line a killed run may leave.
curve() {
    python3 - "$1" <<'EOF'
import pathlib, sys
from esjax._src.run.runs import SUMMARY, is_run_dir, load_metrics, read_summary
run = pathlib.Path(sys.argv[1])
if not is_run_dir(run):
    sys.exit(print(f"  {run.name}: no run"))
for row in load_metrics(run):
    if "eval_return" in row:
        print(f"  {run.name} g{row['generation']}: {row['env_steps'] / 1e6:.2f} M steps, "
              f"{row['wall_s']:.1f} s, eval {row['eval_return']:.1f}")
if (run / SUMMARY).exists():
    shown = ("final_test_return", "solved", "env_steps", "wall_s")
    print(f"  {run.name} final: " + ", ".join(f"{k} {v}" for k, v in read_summary(run).items()
                                              if k in shown))
EOF
}

source "$(dirname "$0")/gpu_common.sh"

# step NAME CAP_S ARGS...: `esjax evolve ARGS` under min(CAP_S, time left less a margin).
step() {
    local name=$1
    selected "$name" || return 0
    capped "$name" "$2" 15 python3 -m esjax evolve "${@:3}" --seed 1000 \
        --out "$out/runs/$name" "${quick[@]}" || return
    tail -n 4 "$out/logs/$name.log"
    curve "$out/runs/$name" | tee -a "$out/steps.txt"
}

gpu_smoke

# A GPU steps 128 members in about the time of 16: the same wall buys more directions a step.
step hopper-pop128 90 hopper --popsize 128 --generations 60
step cartpole-swingup 90 cartpole-swingup
step pendulum-swingup 100 pendulum-swingup
step cheetah-run 150 cheetah-run
step hopper 250 hopper
step halfcheetah 130 halfcheetah
step halfcheetah-pop256 70 halfcheetah --popsize 256 --generations 60
# Four fresh seeds of the ant at once: 480 MJX envs, where one seed's 120 leave the GPU idle.
step ant-seeds4 170 ant --seeds 4

rm -f "$out/runs"/*/checkpoint*.msgpack "$out/runs"/*/*.png
echo "$SECONDS s in all"
