#!/usr/bin/env bash
# The merge job of a sharded acceptance gate: merge.sh RECORD OUTROOT N
# checks that OUTROOT holds shard-1 … shard-N (the folders run-shard.sh writes) and runs
# layerdiff gate --merge OUTROOT/shard-1 … OUTROOT/shard-N --record RECORD.
# A missing folder is left out with a note, and layerdiff refuses the incomplete set naming the missing
# shard (exit 2); a failing prompt is exit 1; with LAYERDIFF_RUN_ID set (as for run-shard.sh) it reads
# OUTROOT/$LAYERDIFF_RUN_ID and takes only partials of that run (gate --merge --run-id); the record is written only on 0. LAYERDIFF_BIN overrides the layerdiff executable.
set -euo pipefail
if [ "$#" -ne 3 ]; then
  echo "usage: $0 RECORD OUTROOT N" >&2
  exit 2
fi
record=$1 outroot=$2 count=$3
run=()
if [ -n "${LAYERDIFF_RUN_ID:-}" ]; then
  outroot="$outroot/$LAYERDIFF_RUN_ID" run=(--run-id "$LAYERDIFF_RUN_ID")
  # a run's record is written once: finding it means the run id was used before (a re-applied Job), and
  # the folders hold that run's partials, not this one's
  if [ -e "$record" ]; then echo "$0: $record exists: run $LAYERDIFF_RUN_ID was merged before; give this run a new LAYERDIFF_RUN_ID" >&2; exit 2; fi
fi
dirs=()
for ((i = 1; i <= count; i++)); do
  if [ -d "$outroot/shard-$i" ]; then dirs+=("$outroot/shard-$i")
  else echo "$0: note: no partial result for shard $i/$count at $outroot/shard-$i (did its job run and upload it?)" >&2
  fi
done
exec "${LAYERDIFF_BIN:-layerdiff}" gate --merge ${dirs[@]+"${dirs[@]}"} --record "$record" ${run[@]+"${run[@]}"}
