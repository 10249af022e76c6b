#!/bin/sh
# One element of a hyper-parameter sweep: `rota submit --array 0-99%8 -- examples/sweep.sh`
# runs it 100 times, 8 at a time, each with its own ROTA_ARRAY_INDEX.
i=${ROTA_ARRAY_INDEX:-0}
lr=$(awk -v i="$i" 'BEGIN { printf "%.5f", 0.0001 * (1 + i % 10) }')
echo "element $i of array ${ROTA_ARRAY_JOB_ID:-?}: learning rate $lr on GPUs ${CUDA_VISIBLE_DEVICES:-none}"
sleep "${SECONDS_PER_RUN:-5}"
echo "element $i: loss $(awk -v i="$i" 'BEGIN { printf "%.3f", 2.0 / (1 + i % 7) }')"
