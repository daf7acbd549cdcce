"""``python -m queuey_cli``: the same as the ``queuey`` console script."""

from queuey_cli.main import main

main()
