#!/bin/bash
#ROTA --gpus 2 --gpu-model A100,H100
#ROTA --time 4h --queue train
#ROTA --restart-policy on-failure --retries 3
#ROTA --env WANDB_MODE=offline
#ROTA --grace 2m --signal usr1
#ROTA --cuda '>=12.4,<13' --driver ">=550"
exec python train.py "$@"
