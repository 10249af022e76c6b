#!/usr/bin/env python3
#SBATCH --gpus=h100:2
#SBATCH --time=2-00
#SBATCH --mem=500M
import sys
print("args", sys.argv[1:])
