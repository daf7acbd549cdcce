"""The ``queuey`` command line: a Typer app over queuey_core."""
