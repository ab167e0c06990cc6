#!/usr/bin/env bash
# The locomotion benchmarks on one GPU, in one call that fits a fixed time (issue 32's GPU
# column): Brax's hopper alone per backend, Brax's own ARS against esjax's `hopper` preset (and
# the same preset at a GPU's popsize), and Playground's CheetahRun at the preset's popsize and a
# GPU's. Each step is capped so that the whole run ends inside DEADLINE seconds; a step cut
# short keeps what it printed and wrote. Everything lands in OUT_DIR, packed into one archive.
#
#   bash benchmarks/gpu_locomotion.sh OUT_DIR [DEADLINE_S]
#   QUICK=1 bash benchmarks/gpu_locomotion.sh /tmp/gpu 300    # tiny sizes: checks the script
#   ONLY="ant-speed es-side" bash benchmarks/gpu_locomotion.sh OUT_DIR 300   # some steps only
set -u
out=${1:?usage: gpu_locomotion.sh OUT_DIR [DEADLINE_S]}
deadline=$((SECONDS + ${2:-560}))
mkdir -p "$out/logs" "$out/runs"
export PYTHONUNBUFFERED=1

if [[ ${QUICK:-0} == 1 ]]; then
    speed_batch="16 64" speed_steps=100 ars_steps=60000 evals=2 episodes=4 gens=2 big_pop=32
    big_steps=120000 episode_len=100 ant_batch="8 32" es_pop=8 es_steps=60000
else
    speed_batch="16 4096" speed_steps=1000 ars_steps=3000000 evals=10 episodes=32 gens=20
    big_pop=128 big_steps=12000000 episode_len=1000 ant_batch="120 4096" es_pop=512
    es_steps=10000000
fi

source "$(dirname "$0")/gpu_common.sh"

# step NAME CAP_S COMMAND...: run it under min(CAP_S, time left less a margin for packing).
step() {
    selected "$1" || return 0
    capped "$1" "$2" 20 "${@:3}" && tail -n 25 "$out/logs/$1.log"
}

gpu_smoke brax.training.agents.ars.train brax.training.agents.es.train

step env-speed 100 python3 benchmarks/brax_env_speed.py --env hopper \
    --backends positional mjx --batch $speed_batch --steps "$speed_steps" --repeats 2

side=(python3 benchmarks/brax_side_by_side.py --task tasks/hopper.toml
    --seeds 1000 --levels 1000 1250 1500 --evals "$evals" --eval-episodes "$episodes"
    --episode-length "$episode_len")
step side-by-side 180 "${side[@]}" --steps "$ars_steps" --trainers ars esjax \
    --json "$out/runs/side.json"
# A GPU steps 128 members in about the time of 16: the same wall buys more directions a step.
step side-by-side-pop$big_pop 110 "${side[@]}" --steps "$big_steps" --trainers esjax \
    --set "strategy_settings.popsize=$big_pop" --json "$out/runs/side-pop$big_pop.json"

cheetah=(python3 -m esjax evolve cheetah-run --seed 1000 --generations "$gens"
    --set evaluation.every=10 --set "episode_length=$episode_len")
step cheetah-pop64 75 "${cheetah[@]}" --out "$out/runs/cheetah-pop64"
step cheetah-pop1024 75 "${cheetah[@]}" --popsize 1024 --out "$out/runs/cheetah-pop1024"

# The ant preset's MJX backend against Brax's spring pipeline, at its popsize and a GPU's; 200
# steps a scan, as MJX compiles slowly and a step's cost does not depend on the step.
step ant-speed 80 python3 benchmarks/brax_env_speed.py --env ant \
    --backends mjx spring --batch $ant_batch --steps 200 --repeats 2

# Brax's ES trainer at a popsize a GPU wants (512 pairs), and esjax's hopper preset at the same
# 1,024 members: the same budget, each alone in its capped step.
step es-side 100 "${side[@]}" --steps "$es_steps" --trainers es --es-population "$es_pop" \
    --json "$out/runs/es-side.json"
step esjax-side-pop$((2 * es_pop)) 70 "${side[@]}" --steps "$es_steps" --trainers esjax \
    --set "strategy_settings.popsize=$((2 * es_pop))" --json "$out/runs/esjax-side.json"

rm -f "$out/runs"/*/checkpoint.msgpack "$out/runs"/*/*.png
tar -czf "$out/results.tar.gz" -C "$out" steps.txt logs runs
echo "packed $(du -h "$out/results.tar.gz" | cut -f1); $SECONDS s in all"
