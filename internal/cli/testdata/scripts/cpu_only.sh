#!/bin/bash -l

#SBATCH --partition=cpu
#SBATCH --cpus-per-task=8
#SBATCH --mem=2048K
#SBATCH --time=45:30
#SBATCH --nice=10
#SBATCH --hold

make -j8 data
