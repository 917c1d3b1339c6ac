#!/bin/bash
# Run on every node: NODE_RANK=0 on the master, 1 on the other.
NNODES=2
NODE_RANK=${NODE_RANK:?set NODE_RANK}
MASTER_ADDR=${MASTER_ADDR:-10.0.0.1}
MASTER_PORT=${MASTER_PORT:-29500}

python -m torch.distributed.launch \
  --nproc_per_node=8 \
  --nnodes=$NNODES \
  --node_rank=$NODE_RANK \
  --master_addr=$MASTER_ADDR \
  --master_port=$MASTER_PORT \
  train.py --dist-url "tcp://$MASTER_ADDR:$MASTER_PORT" "$@"

# Elastic variant, already on the new module.
python -m torch.distributed.run --nnodes=1:4 --nproc_per_node=8 --rdzv_id=$JOB_ID --rdzv_backend=c10d --rdzv_endpoint=$MASTER_ADDR:29400 --use_env train.py "$@"
