#!/usr/bin/env bash
# Plays the scheduler examples on this machine: N shard jobs as N parallel processes, each run by
# run-shard.sh exactly as the GitHub Actions matrix and the Kubernetes Indexed Job run it, then the merge
# job (merge.sh). The shards get their index as the Indexed Job gives it (JOB_COMPLETION_INDEX, 0-based)
# with PLAY_AS=k8s, as a Slurm array does (SLURM_ARRAY_TASK_ID, 1..N) with PLAY_AS=slurm, else as the
# matrix does (the argument 1..N, the default).
#   play-matrix.sh MODEL N WORKDIR [gate options...]   → WORKDIR/shards/shard-I, WORKDIR/acceptance.json
#   (with LAYERDIFF_RUN_ID=R: WORKDIR/shards/R/shard-I, WORKDIR/acceptance-R.json)
# Exit code: the merge's (0 record written, 1 a prompt failed, 2 inconsistent or missing shards).
set -uo pipefail
if [ "$#" -lt 3 ]; then
  echo "usage: $0 MODEL N WORKDIR [gate options...]" >&2
  exit 2
fi
here=$(cd "$(dirname "$0")" && pwd)
model=$1 count=$2 work=$3
shift 3
mkdir -p "$work/shards" "$work/logs"
pids=()
for ((i = 1; i <= count; i++)); do
  if [ "${PLAY_AS:-matrix}" = k8s ]; then
    JOB_COMPLETION_INDEX=$((i - 1)) "$here/run-shard.sh" "$model" - "$count" "$work/shards" "$@" >"$work/logs/shard-$i.log" 2>&1 &
  elif [ "${PLAY_AS:-matrix}" = slurm ]; then
    SLURM_ARRAY_TASK_ID=$i "$here/run-shard.sh" "$model" - "$count" "$work/shards" "$@" >"$work/logs/shard-$i.log" 2>&1 &
  else
    "$here/run-shard.sh" "$model" "$i" "$count" "$work/shards" "$@" >"$work/logs/shard-$i.log" 2>&1 &
  fi
  pids+=($!)
done
for ((i = 1; i <= count; i++)); do
  # a failing shard does not stop the merge (the workflow's merge job runs if: !cancelled()): it names the failure
  if wait "${pids[$((i - 1))]}"; then echo "shard $i/$count: exit 0"; else echo "shard $i/$count: exit $? (log: $work/logs/shard-$i.log)"; fi
done
# a named run (LAYERDIFF_RUN_ID) gets a record of its own, as the Slurm and Kubernetes examples write one per run
"$here/merge.sh" "$work/acceptance${LAYERDIFF_RUN_ID:+-$LAYERDIFF_RUN_ID}.json" "$work/shards" "$count"
