#!/bin/bash
#SBATCH --gres=gpu:2 -t 10:00
python train.py
