"""The built-in trainer-config importers (hook ``hp_importers``): :mod:`~hp_plugins.importers.megatron`."""
