"""The built-in layer kinds (hook ``hp_layer_kinds``): one module per kind family.

:mod:`~hp_plugins.kinds.embedding` (``embedding``), :mod:`~hp_plugins.kinds.dense`
(``dense``), :mod:`~hp_plugins.kinds.moe` (``moe``), :mod:`~hp_plugins.kinds.mla`
(``mla``, ``mla_moe``), :mod:`~hp_plugins.kinds.mtp` (``mtp``) and
:mod:`~hp_plugins.kinds.output` (``output``). The decoder kinds are made of the
public blocks of :mod:`hp_plugins.kit`; docs/kinds.md states what each keeps.
Their config classes (``DenseConfig``, ``EmbeddingConfig``, ``MoEConfig``,
``MLAConfig``, ``MLAMoEConfig``, ``MTPConfig``, ``OutputConfig``) are covered by
the kit's stability promise (docs/kit.md): a plugin's model format may stack them.
"""
