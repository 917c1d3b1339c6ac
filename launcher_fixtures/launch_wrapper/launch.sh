#!/bin/sh
# Usage: ./launch.sh NGPUS [args...]
NGPUS=$1
shift
LAUNCHER="python -m torch.distributed.launch --nproc_per_node=$NGPUS"
if [ -z "$NGPUS" ]; then
  echo "usage: $0 NGPUS [args...]  (runs python -m torch.distributed.launch --nproc_per_node=NGPUS --use_env train.py)"
  exit 1
fi
$LAUNCHER --use_env train.py "$@"
cat > job.sh <<JOB
python -m torch.distributed.launch --nproc_per_node=$NGPUS --use_env train.py
JOB
