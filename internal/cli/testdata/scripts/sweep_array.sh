#!/bin/bash
# A hyper-parameter sweep, one element per learning rate.
#SBATCH --array=0-15%4
#SBATCH --gpus=1
#SBATCH --time=90
#SBATCH --mem=32000
#SBATCH --mail-type=END,FAIL
#SBATCH --mail-user=alice@example.com
#SBATCH --qos=normal

LRS=(1e-3 3e-4 1e-4 3e-5)
python sweep.py --lr "${LRS[$((SLURM_ARRAY_TASK_ID % 4))]}"
