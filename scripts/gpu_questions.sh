#!/usr/bin/env bash
# What the GPU rounds left open, read in one device call of about 5 minutes,
# after scripts/gpu_check.sh has passed on the same commit. Round 6
# (docs/performance.md) ran items 1 and 2 and explained what rounds 4 and 5
# had left; item 3 is what round 6 left:
# 1. ncu at 2^28, lazyfuse beside torch.compile: layer_norm, pointwise x1
#    and x16, with instruction counts per pipe;
# 2. replayed training beside reduce-overhead, each engine in its own
#    process, three times, four windows each;
# 3. the replayed Transformer's host loop against its whole step and its
#    kernels, in five processes (bench/gpu_replay_host.py): round 6 read a
#    host-bound step whose host speed differed 1.8x between processes.
# 4. a reduction on another strategy's template against the kernel its rows
#    call for (bench/strategy_reuse.py; kernel time in its last columns):
#    round 7 read 0.66-1.28x before 078e716 gave multi-pass rows one-warp
#    blocks, which no GPU has run. The target is within 5%.
#
#   GPU_CHECK_PREBUILT=1 bash scripts/gpu_questions.sh   # _C carried, as for gpu_check.sh
#
# Output goes to $OUT (default ./gpu_out): ncu_2p28.txt, replay_spread.txt,
# replay_host.txt, strategy_reuse.txt.
set -uo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
OUT=${OUT:-$PWD/gpu_out}
mkdir -p "$OUT"
PYTHON=${PYTHON:-python3}
export LAZYFUSE_DEVICE=cuda PYTHONUNBUFFERED=1
if [ -n "${GPU_CHECK_PREBUILT:-}" ]; then
  export PYTHONPATH=$PWD/python${PYTHONPATH:+:$PYTHONPATH}
fi
ncu=$(command -v ncu || ls /usr/local/cuda/bin/ncu /opt/nvidia/nsight-compute/*/ncu 2>/dev/null | head -n 1)
pipes=smsp__inst_executed.sum,smsp__inst_executed_pipe_xu.sum,smsp__inst_executed_pipe_fma.sum,\
smsp__inst_executed_pipe_alu.sum,smsp__inst_executed_pipe_lsu.sum,gpu__time_duration.sum

if [ -n "$ncu" ]; then
  for case in "layer_norm:lazyfuse:^lf_" "layer_norm:torch.compile:^triton_" \
    "pointwise x1:lazyfuse:^lf_" "pointwise x16:lazyfuse:^lf_" \
    "pointwise x16:torch.compile:^triton_"; do
    IFS=: read -r workload engine kernels <<<"$case"
    echo "== $workload, $engine, 2^28"
    timeout 60 "$ncu" --clock-control none --target-processes all --kernel-name "regex:$kernels" \
      --launch-skip 2 --launch-count 1 --section SpeedOfLight --section LaunchStats \
      --section MemoryWorkloadAnalysis --metrics "$pipes" "$PYTHON" bench/fused_kernels.py \
      --profile-workload "$workload" --profile-engine "$engine" --max-log2 28 2>&1 |
      grep -vE "^==(PROF|WARNING)"
  done >"$OUT/ncu_2p28.txt" 2>&1
else
  echo "no ncu on this machine" >"$OUT/ncu_2p28.txt"
fi

for round in 1 2 3; do
  for engine in lazyfuse-replay compile-reduce-overhead; do
    timeout 60 "$PYTHON" bench/gpu_training.py --models lenet5,transformer --engines "$engine" \
      --steps 20 --windows 4 \
      --no-memory --out "/tmp/gq_$round" 2>&1 | grep -E '^\{' | sed "s/^/round $round: /"
  done
done >"$OUT/replay_spread.txt" 2>&1

for round in 1 2 3 4 5; do
  timeout 60 "$PYTHON" bench/gpu_replay_host.py --models transformer --out "/tmp/gq_host_$round" \
    2>&1 | grep -E '^\{' | sed "s/^/process $round: /"
done >"$OUT/replay_host.txt" 2>&1

for rows_log2 in 16 20 24; do
  timeout 90 "$PYTHON" bench/strategy_reuse.py --rows-log2 "$rows_log2" --out "/tmp/gq_reuse_$rows_log2" 2>&1
done >"$OUT/strategy_reuse.txt" 2>&1

grep -E "^== |Duration|DRAM Throughput|Compute \(SM\)|inst_executed|Grid Size|Block Size" \
  "$OUT/ncu_2p28.txt"
cat "$OUT/replay_spread.txt"
cat "$OUT/replay_host.txt"
cat "$OUT/strategy_reuse.txt"
