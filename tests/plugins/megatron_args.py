"""``SMALL``: the arguments of a small Llama-shaped Megatron-LM job (8 layers, grouped-query attention, SwiGLU,
RMSNorm), which the megatron importer's and exporter's tests build on."""

from __future__ import annotations

SMALL = ("--num-layers 8 --hidden-size 1024 --num-attention-heads 8 --group-query-attention --num-query-groups 4 "
         "--ffn-hidden-size 2048 --seq-length 512 --vocab-size 1000 --swiglu --normalization RMSNorm "
         "--disable-bias-linear --untie-embeddings-and-output-weights --micro-batch-size 1 --global-batch-size 32 "
         "--bf16 --use-distributed-optimizer --attention-dropout 0.0 --hidden-dropout 0.0 --max-position-embeddings 512")
