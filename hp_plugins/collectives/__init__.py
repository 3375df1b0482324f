"""The built-in collective pricing (hook ``hp_collective_models``): NCCL on NVLink nodes and multi-rail networks."""
