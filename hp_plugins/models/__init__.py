"""The built-in model sources: the Hugging Face ``config.json`` format and the model presets.

:mod:`~hp_plugins.models.hf` (hook ``hp_model_formats``: a Hugging Face
``config.json`` mapped onto the built-in kinds) and
:mod:`~hp_plugins.models.presets` (hook ``hp_models``: one JSON file per model,
shipped as package data).
"""
