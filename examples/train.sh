#!/bin/sh
# A stand-in for a training job: STEPS steps of one second (default 60), a checkpoint every
# 10 steps in $ROTA_CHECKPOINT_DIR, reported through $ROTA_EVENTS_FILE, and a resume from the
# last checkpoint when a requeued attempt starts. On SIGTERM (preemption, cancel, time limit)
# it checkpoints and exits within its grace.
steps=${STEPS:-60}
dir=${ROTA_CHECKPOINT_DIR:-.}
events=${ROTA_EVENTS_FILE:-/dev/null}
step=0
if [ -f "$dir/step" ]; then
  step=$(cat "$dir/step")
  echo "attempt ${ROTA_ATTEMPT:-1}: resuming from step $step"
fi
checkpoint() {
  echo "$step" > "$dir/step"
  echo "{\"checkpoint\": {\"step\": $step, \"path\": \"$dir/step\"}}" >> "$events"
}
trap 'checkpoint; echo "stopped at step $step: $(cat "${ROTA_NOTICE_FILE:-/dev/null}" 2>/dev/null)"; exit 143' TERM
echo "training on GPUs ${CUDA_VISIBLE_DEVICES:-none}"
while [ "$step" -lt "$steps" ]; do
  sleep 1
  step=$((step + 1))
  echo "{\"progress\": {\"step\": $step, \"total\": $steps}}" >> "$events"
  if [ $((step % 10)) -eq 0 ]; then
    checkpoint
    echo "step $step: checkpointed"
  fi
done
echo "done after $steps steps"
