#SBATCH --gres=gpu
#SBATCH --time=1-06
#SBATCH --array=1,3,5
nvidia-smi
