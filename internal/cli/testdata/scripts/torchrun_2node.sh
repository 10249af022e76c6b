#!/usr/bin/env bash
#SBATCH -J llama-ft
#SBATCH -N 2
#SBATCH --ntasks-per-node=1
#SBATCH --gpus-per-node=8
#SBATCH -c 96
#SBATCH --mem=0
#SBATCH -t 48:00:00
#SBATCH --signal=B:USR1@300
#SBATCH --requeue
#SBATCH --exclusive

torchrun --nnodes 2 --nproc-per-node 8 finetune.py
