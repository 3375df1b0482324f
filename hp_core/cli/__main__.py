"""``python -m hp_core.cli``: the ``hp`` command."""

from hp_core.cli import main

if __name__ == "__main__":  # pragma: no cover
    raise SystemExit(main())
