"""``python -m duro_devserver``: the ``duro`` command line."""

from .cli import main

main()
