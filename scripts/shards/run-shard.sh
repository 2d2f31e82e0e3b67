#!/usr/bin/env bash
# One shard of a sharded acceptance gate, as a scheduler's job runs it:
#   run-shard.sh MODEL I N OUTROOT [more gate options...]
# writes the partial result OUTROOT/shard-I (layerdiff gate MODEL --shard I/N --out OUTROOT/shard-I).
# I is 1-based (a CI matrix's value); give I as "-" to take it from JOB_COMPLETION_INDEX (0-based, set by
# a Kubernetes Indexed Job) or SLURM_ARRAY_TASK_ID (1-based when the array is --array=1-N).
# With SIDE=reference it is the reference half of a split gate instead: the golden runs of shard I's
# prompts go to OUTROOT/golden/prompt-NN (gate --save-golden), for device shards that run with
# --golden OUTROOT/golden on another machine and write the partials.
# With LAYERDIFF_RUN_ID set (a scheduler's job id, the same for the merge job), everything goes under
# OUTROOT/$LAYERDIFF_RUN_ID and the partial is named with the run (gate --run-id), so a re-run never meets, and
# the merge never takes, a previous run's partials.
# The exit code is the gate's: 0 every prompt of the shard passed, 1 one failed (its partial is still
# written, so the merge can name it), 2 bad input. LAYERDIFF_BIN overrides the layerdiff executable.
set -euo pipefail
if [ "$#" -lt 4 ]; then
  echo "usage: $0 MODEL I N OUTROOT [gate options...]  (I: 1..N, or - for JOB_COMPLETION_INDEX+1 / SLURM_ARRAY_TASK_ID)" >&2
  exit 2
fi
model=$1 index=$2 count=$3 outroot=$4
shift 4
if [ "$index" = "-" ]; then
  if [ -n "${JOB_COMPLETION_INDEX:-}" ]; then index=$((JOB_COMPLETION_INDEX + 1))
  elif [ -n "${SLURM_ARRAY_TASK_ID:-}" ]; then index=$SLURM_ARRAY_TASK_ID
  else echo "$0: I is '-' but neither JOB_COMPLETION_INDEX nor SLURM_ARRAY_TASK_ID is set" >&2; exit 2
  fi
fi
run=()
if [ -n "${LAYERDIFF_RUN_ID:-}" ]; then outroot="$outroot/$LAYERDIFF_RUN_ID" run=(--run-id "$LAYERDIFF_RUN_ID"); fi
mkdir -p "$outroot"
if [ "${SIDE:-both}" = reference ]; then
  exec "${LAYERDIFF_BIN:-layerdiff}" gate "$model" --shard "$index/$count" --save-golden "$outroot/golden" "$@"
fi
exec "${LAYERDIFF_BIN:-layerdiff}" gate "$model" --shard "$index/$count" --out "$outroot/shard-$index" ${run[@]+"${run[@]}"} "$@"
