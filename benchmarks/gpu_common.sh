# Shared by the GPU scripts (sourced): a fail-fast smoke check and steps capped to a deadline.
# They read $out (the output folder, with logs/ in it) and $deadline (in bash's SECONDS).

# selected NAME: whether a step runs: every step when ONLY is unset, else those ONLY lists
# (space-separated), so that a short lease can spend itself on the steps not yet measured.
selected() {
    [[ -z ${ONLY:-} || " $ONLY " == *" $1 "* ]]
}

# gpu_smoke [MODULE...]: versions, the device, and every suite the script uses, imported; on
# any failure nothing else is worth running, so the script exits 3. SMOKE=0 skips it (a second
# script in the same call, after the first one's check passed).
gpu_smoke() {
    [[ ${SMOKE:-1} == 0 ]] && return
    python3 - "$@" >"$out/logs/smoke.log" 2>&1 <<'PY'
import importlib, sys
import jax, brax, mujoco, evosax, gymnax, mujoco_playground  # noqa: F401,E401
for name in ["esjax._src.envs.suites", "esjax._src.cli.main", "esjax._src.run.training", *sys.argv[1:]]:
    importlib.import_module(name)
print("jax", jax.__version__, "brax", brax.__version__, "mujoco", mujoco.__version__)
print("devices", jax.devices())
PY
    local rc=$?
    cat "$out/logs/smoke.log"
    if ((rc != 0)); then
        echo "smoke check failed (rc $rc): nothing else run"
        exit 3
    fi
    nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader 2>/dev/null
}

# capped NAME CAP_S MARGIN_S COMMAND...: COMMAND under min(CAP_S, time left less MARGIN_S),
# stopped with SIGINT at the cap (killed 10 s later), output in logs/NAME.log; a step with
# under 10 s left is skipped (status 1).
capped() {
    local name=$1 cap=$2 margin=$3 left
    shift 3
    left=$((deadline - SECONDS - margin))
    ((cap > left)) && cap=$left
    if ((cap < 10)); then
        echo "== $name: skipped, $left s left" | tee -a "$out/steps.txt"
        return 1
    fi
    local start=$SECONDS
    timeout --signal=INT --kill-after=10 "$cap" "$@" >"$out/logs/$name.log" 2>&1
    echo "== $name: rc $?, $((SECONDS - start)) s (cap $cap s)" | tee -a "$out/steps.txt"
}
