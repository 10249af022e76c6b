#!/bin/sh
#SBATCH --constraint=volta32gb
#SBATCH --nodelist node[01-04]
#SBATCH --hint=nomultithread
#SBATCH --tmp=100G
#SBATCH --frobnicate=7
#SBATCH -n 4
#SBATCH --gres=gpu:4,nvme:1
#SBATCH -t 5-00:00:00   # five days
echo start
#SBATCH --gpus=8
