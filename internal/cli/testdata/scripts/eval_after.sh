#!/bin/bash
#SBATCH --dependency=afterok:1201:1202,afterany:1190
#SBATCH --gres=gpu:1
#SBATCH --time=00:30:00
#SBATCH --job-name="eval after train"
#SBATCH --export=NONE
#SBATCH --chdir=/data/eval
python eval.py
