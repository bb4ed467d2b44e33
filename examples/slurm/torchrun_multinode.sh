#!/bin/bash
# Two nodes x N GPUs with torchrun: one torchrun agent per node, each starting N workers (one per
# GPU). Every worker's Trainer adopts the job torchrun describes (RANK, LOCAL_RANK, WORLD_SIZE,
# LOCAL_WORLD_SIZE, GROUP_RANK...): leave --devices and --num-nodes of the example scripts at their
# defaults, or give the same numbers as torchrun (a disagreement is an error, not a silent
# 1-process run per GPU). Global batch = 2 x N x --batch-size x --accumulate.
#
# Without SLURM, the same command on each node with its own --node_rank; NODE0 is an address of
# node 0 that node 1 can reach, 29500 a free port there. For 2 nodes x 8 GPUs:
#
#   node 0:  torchrun --nnodes 2 --node_rank 0 --nproc_per_node 8 --master_addr NODE0 --master_port 29500 examples/image_classifier.py --dataset cifar10 --data-dir /tmp/lockstep-data --sync-batchnorm --scale-lr linear
#   node 1:  torchrun --nnodes 2 --node_rank 1 --nproc_per_node 8 --master_addr NODE0 --master_port 29500 examples/image_classifier.py --dataset cifar10 --data-dir /tmp/lockstep-data --sync-batchnorm --scale-lr linear
#
# or with torchrun's c10d rendezvous: the identical command on both nodes, node ranks assigned by
# the agents (any run id, the same on both):
#
#   torchrun --nnodes 2 --nproc_per_node 8 --rdzv_backend c10d --rdzv_endpoint NODE0:29500 --rdzv_id digits-1 examples/digits.py --accumulate 2
#
# prepare_data downloads once per node (local rank 0; the other ranks wait): give --data-dir a
# node-local path as above, since two nodes writing the same files on a shared disk would race.
#
# With SLURM, this file is the job script: `sbatch examples/slurm/torchrun_multinode.sh` from the
# repository root. SLURM starts one task per node, and that task is torchrun. (Or drop torchrun:
# examples/slurm/train.sbatch starts one task per GPU with srun, and the Trainer reads SLURM's
# variables instead.)
#
#SBATCH --job-name=lockstep-torchrun
#SBATCH --nodes=2
#SBATCH --ntasks-per-node=1
#SBATCH --gpus-per-node=8
#SBATCH --cpus-per-task=64
#SBATCH --time=02:00:00
#SBATCH --output=%x-%j.out
# Each torchrun agent needs all GPUs of its node: do not add --gpus-per-task or --gpu-bind.

set -euo pipefail
cd "${SLURM_SUBMIT_DIR}"

gpus_per_node="${GPUS_PER_NODE:-8}"  # keep equal to --gpus-per-node above
head_node="$(scontrol show hostnames "${SLURM_JOB_NODELIST}" | head -n 1)"
export OMP_NUM_THREADS=$(( ${SLURM_CPUS_PER_TASK:-8} / gpus_per_node > 0 ? ${SLURM_CPUS_PER_TASK:-8} / gpus_per_node : 1 ))

# --kill-on-bad-exit=1: when one node's torchrun fails, srun stops the other at once.
srun --kill-on-bad-exit=1 torchrun \
    --nnodes "${SLURM_NNODES}" --nproc_per_node "${gpus_per_node}" \
    --rdzv_backend c10d --rdzv_endpoint "${head_node}:29500" --rdzv_id "${SLURM_JOB_ID}" \
    examples/image_classifier.py --dataset cifar10 --data-dir "${TMPDIR:-/tmp}/lockstep-data-${SLURM_JOB_ID}" \
    --sync-batchnorm --scale-lr linear --root "runs/image-classifier-${SLURM_JOB_ID}"
