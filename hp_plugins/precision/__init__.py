"""Built-in low-precision GEMM recipes (hook ``hp_precision_recipes``)."""
